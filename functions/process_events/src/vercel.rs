//! The Vercel handler. `GET` with `Authorization: Bearer $CRON_SECRET` runs one scheduled
//! batch (Vercel's cron), `?drain=1[&max_tasks=N]` drains; `POST` publishes and
//! `GET ?status=<task>` answers a task's status, both with `Bearer $PUBLISH_SECRET`; any other
//! method (`HEAD` too) is 405. Vercel
//! gives no deadline, so a run takes at most `TIME_BUDGET_MS`, which must stay under the
//! function's `maxDuration`.

use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use platform::intake::{self, Ask};
use platform::{HttpReply, admit, admit_publish};
use vercel_runtime::{Request, Response};

use crate::App;

/// Handles one request.
pub async fn handle(
    app: Arc<App>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    let authorization = platform::vercel::authorization(&req).map(str::to_string);
    let authorization = authorization.as_deref();
    let query = req.uri().query().unwrap_or("").to_string();
    let path = req.uri().path().to_string();
    let method = req.method().as_str().to_string();
    let body = match method.as_str() {
        "POST" => match read_body(app.session.config().publish_max_bytes, req).await {
            Ok(body) => body,
            Err(refused) => return platform::vercel::response(refused),
        },
        _ => Default::default(),
    };
    let has_body = !body.iter().all(u8::is_ascii_whitespace);
    let reply = match intake::ask(&method, &query, has_body) {
        Err(refused) => refused,
        Ok(Ask::Run(_)) => respond(&app, &query, authorization).await,
        Ok(Ask::Status(key)) => match admit_publish(app.session.config(), authorization) {
            Ok(()) => crate::intake::status(&app, &key).await,
            Err(refused) => refused,
        },
        Ok(Ask::Publish) => match admit_publish(app.session.config(), authorization) {
            Ok(()) => crate::intake::publish(&app, &body, &path).await,
            Err(refused) => refused,
        },
    };
    platform::vercel::response(reply)
}

/// Reads a body of no more than one byte over `limit` (a larger one is refused with 413).
async fn read_body(limit: usize, req: Request) -> Result<Vec<u8>, HttpReply> {
    match Limited::new(req.into_body(), limit + 1).collect().await {
        Ok(collected) => Ok(collected.to_bytes().to_vec()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(HttpReply::too_large(
            &format!("the body is over PUBLISH_MAX_BYTES ({limit})"),
        )),
        Err(e) => Err(HttpReply::bad_request(&format!(
            "the body could not be read: {e}"
        ))),
    }
}

/// The reply to a run request (`GET`) with this query string and `Authorization` header.
pub async fn respond(app: &App, query: &str, authorization: Option<&str>) -> HttpReply {
    let config = app.session.config();
    if let Err(refused) = admit(config, authorization) {
        return refused;
    }
    let trigger = match platform::trigger::from_query(query) {
        Ok(trigger) => trigger,
        Err(problem) => return HttpReply::bad_request(&problem),
    };
    match crate::run(app, trigger, config.time_budget).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
