//! The Lambda handler: reads the event, takes the deadline from the invocation, runs, and
//! answers as the event expects (plain JSON, or an HTTP response for a Function URL).

use std::time::{SystemTime, UNIX_EPOCH};

use event_bridge::trigger::{self, Reply};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;

use crate::platform::{self, HttpReply, Session};

/// Handles one invocation.
///
/// # Notable errors
/// - `BadEvent` when the event asks for something unknown (`{"mode":"flush"}`, `max_tasks=0`);
/// - `ZooKeeperUnreachable` / `ZooKeeperError` when ZooKeeper fails us (after one reconnect).
///
/// A Function URL request gets its errors as HTTP replies instead (400 for a bad query, 503
/// when ZooKeeper fails), as Vercel requests do, rather than the URL's bare 502.
pub async fn handle(session: &Session, event: LambdaEvent<Value>) -> Result<Value, Diagnostic> {
    let is_http = event.payload.pointer("/requestContext/http").is_some();
    let (trigger, reply) = match trigger::from_lambda_event(&event.payload) {
        Ok(read) => read,
        Err(problem) if is_http => return Ok(HttpReply::bad_request(&problem).into_lambda()),
        Err(problem) => return Err(platform::bad_event(problem)),
    };
    let budget = session.config().time_budget;
    let time_left = trigger::time_left(event.context.deadline, now_ms(), budget);
    let report = match crate::run(session, trigger, time_left).await {
        Ok(report) => report,
        Err(e) if reply == Reply::Http => {
            tracing::error!(error = %e, "process_events failed");
            return Ok(HttpReply::failed(&e).into_lambda());
        }
        Err(e) => return Err(platform::diagnostic(&e)),
    };
    Ok(match reply {
        Reply::Json => serde_json::to_value(&report).expect("reports are plain data"),
        Reply::Http => HttpReply::ok(&report).into_lambda(),
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
