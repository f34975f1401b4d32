//! The Vercel handler. `GET` with `Authorization: Bearer $CRON_SECRET` runs one scheduled
//! batch (Vercel's cron), `?drain=1[&max_tasks=N]` drains; `POST` publishes and
//! `GET ?status=<task>` answers a task's status, both with `Bearer $PUBLISH_SECRET`; any other
//! method (`HEAD` too) is 405. The secret is checked before the body: a caller without it gets
//! 401 whatever it sent. Vercel gives no deadline, so a run takes at most `TIME_BUDGET_MS`,
//! which must stay under the function's `maxDuration`.

use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use platform::intake::{self, Ask};
use platform::trigger::Trigger;
use platform::{HttpReply, admit, admit_publish};
use tokio::time::Instant;
use vercel_runtime::{Request, Response};

use crate::App;

/// Handles one request: what it asks for (a method or query that says nothing clear is
/// refused first), then the secret it needs, then its body, then the work.
pub async fn handle(
    app: Arc<App>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    // Vercel gives no deadline: the budget counts from the request's arrival.
    let deadline = Instant::now() + app.session.config().time_budget;
    let authorization = platform::vercel::authorization(&req).map(str::to_string);
    let query = req.uri().query().unwrap_or("").to_string();
    let path = req.uri().path().to_string();
    let method = req.method().as_str().to_string();
    let body = match method.as_str() {
        "POST" => read_body(app.session.config().publish_max_bytes, req).await,
        _ => Ok(Vec::new()),
    };
    // A body too large or unreadable is a body all the same: it asks for a publish.
    let has_body = body
        .as_ref()
        .map_or(true, |b| !b.iter().all(u8::is_ascii_whitespace));
    let reply = match intake::ask(&method, &query, has_body) {
        Err(refused) => refused,
        Ok(ask) => answer(&app, ask, authorization.as_deref(), body, &path, deadline).await,
    };
    platform::vercel::response(reply)
}

/// The reply to `ask`: the secret it needs is checked before the body is looked at, so a
/// caller without it learns nothing of how its body would be taken.
async fn answer(
    app: &App,
    ask: Ask,
    authorization: Option<&str>,
    body: Result<Vec<u8>, HttpReply>,
    path: &str,
    deadline: Instant,
) -> HttpReply {
    let config = app.session.config();
    let admitted = match ask {
        Ask::Run(_) => admit(config, authorization),
        Ask::Status(_) | Ask::Batch(_) | Ask::Publish => admit_publish(config, authorization),
    };
    let body = match admitted.and(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    match ask {
        Ask::Run(trigger) => run(app, trigger).await,
        Ask::Status(key) => crate::intake::status(app, &key).await,
        Ask::Batch(name) => crate::intake::batch_status(app, &name).await,
        Ask::Publish => {
            let time_left = deadline.saturating_duration_since(Instant::now());
            crate::intake::publish(app, &body, path, time_left).await
        }
    }
}

/// Reads a body of no more than one byte over `limit` (a larger one is refused with 413).
async fn read_body(limit: usize, req: Request) -> Result<Vec<u8>, HttpReply> {
    match Limited::new(req.into_body(), limit + 1).collect().await {
        Ok(collected) => Ok(collected.to_bytes().to_vec()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(HttpReply::too_large(&format!(
                "the body is over PUBLISH_MAX_BYTES ({limit}): split it into smaller publishes, \
                 or raise PUBLISH_MAX_BYTES"
            )))
        }
        Err(e) => Err(HttpReply::bad_request(&format!(
            "the body could not be read ({e}): send it again"
        ))),
    }
}

/// The reply to an admitted run: its report.
async fn run(app: &App, trigger: Trigger) -> HttpReply {
    match crate::run(app, trigger, app.session.config().time_budget).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
