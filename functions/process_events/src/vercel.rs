//! The Vercel handler: a cron request (`GET`, `Authorization: Bearer $CRON_SECRET`) runs one
//! scheduled batch; `?drain=1[&max_tasks=N]` drains. Vercel gives no deadline, so a run takes
//! at most `TIME_BUDGET_MS`, which must stay under the function's `maxDuration`.

use std::sync::Arc;

use event_bridge::trigger;
use vercel_runtime::{Request, Response};

use crate::platform::{self, HttpReply, Session};

/// Handles one request.
pub async fn handle(
    session: Arc<Session>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    let authorization = platform::authorization(&req);
    let query = req.uri().query().unwrap_or("");
    respond(&session, query, authorization).await.into_vercel()
}

/// The reply to a request with this query string and `Authorization` header.
pub async fn respond(session: &Session, query: &str, authorization: Option<&str>) -> HttpReply {
    if !session.authorized(authorization) {
        return HttpReply::unauthorized();
    }
    let trigger = match trigger::from_query(query) {
        Ok(trigger) => trigger,
        Err(problem) => return HttpReply::bad_request(&problem),
    };
    match crate::run(session, trigger, session.config().time_budget).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
