//! The Vercel handler: a cron request (`GET`, `Authorization: Bearer $CRON_SECRET`) runs one
//! scheduled batch; `?drain=1[&max_tasks=N]` drains. Vercel gives no deadline, so a run takes
//! at most `TIME_BUDGET_MS`, which must stay under the function's `maxDuration`.

use std::sync::Arc;

use platform::{HttpReply, admit, trigger};
use vercel_runtime::{Request, Response};

use crate::App;

/// Handles one request.
pub async fn handle(
    app: Arc<App>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    let authorization = platform::vercel::authorization(&req);
    let query = req.uri().query().unwrap_or("");
    platform::vercel::response(respond(&app, query, authorization).await)
}

/// The reply to a request with this query string and `Authorization` header.
pub async fn respond(app: &App, query: &str, authorization: Option<&str>) -> HttpReply {
    let config = app.session.config();
    if let Err(refused) = admit(config, authorization) {
        return refused;
    }
    let trigger = match trigger::from_query(query) {
        Ok(trigger) => trigger,
        Err(problem) => return HttpReply::bad_request(&problem),
    };
    match crate::run(app, trigger, config.time_budget).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
