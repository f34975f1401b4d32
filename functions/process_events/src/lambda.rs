//! The Lambda handler: reads the event, takes the deadline from the invocation, runs, and
//! answers as the event expects (plain JSON, or an HTTP response for a Function URL).

use std::time::Duration;

use lambda_runtime::{Diagnostic, LambdaEvent};
use platform::HttpReply;
use platform::intake::{self, Ask};
use platform::lambda::{
    bad_event, diagnostic, function_url_reply, function_url_request, time_left,
};
use platform::trigger::{self, Reply};
use serde_json::Value;

use crate::App;

/// A Function URL `POST` (publish, answered within `time_left`) or `GET ?status=` (a task's
/// status), answered, or a request refused (another method: 405; a bad query: 400); `None` for
/// a run request and every other event. The URL's IAM authorization (`AuthType: AWS_IAM`)
/// admitted the caller.
async fn publish_or_status(app: &App, event: &Value, time_left: Duration) -> Option<HttpReply> {
    let request = match function_url_request(event)? {
        Ok(request) => request,
        Err(problem) => return Some(HttpReply::bad_request(&problem)),
    };
    let has_body = !request.body.iter().all(u8::is_ascii_whitespace);
    match intake::ask(&request.method, &request.query, has_body) {
        Ok(Ask::Publish) => {
            let path = &request.path;
            Some(crate::intake::publish(app, &request.body, path, time_left).await)
        }
        Ok(Ask::Status(key)) => Some(crate::intake::status(app, &key).await),
        Ok(Ask::Batch(name)) => Some(crate::intake::batch_status(app, &name).await),
        // A run: the trigger is read below, as for every other event.
        Ok(Ask::Run(_)) => None,
        // A method the URL does not answer (405, `HEAD` included: it must not drain), a bad
        // query (400).
        Err(refused) => Some(refused),
    }
}

/// Handles one invocation.
///
/// # Notable errors
/// - `BadEvent` when the event asks for something unknown (`{"mode":"flush"}`, `max_tasks=0`);
/// - `ZooKeeperUnreachable` / `ZooKeeperError` when ZooKeeper fails us (after one more try).
///
/// A Function URL request gets its errors as HTTP replies instead (400 for a bad query, 503
/// when ZooKeeper fails), as Vercel requests do, rather than the URL's bare 502.
pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Diagnostic> {
    handle_printing_to(app, event, std::io::stdout()).await
}

/// As [`handle`], printing the run's metrics line (when `METRICS_EMF` is on) to `out` instead
/// of stdout.
pub async fn handle_printing_to(
    app: &App,
    event: LambdaEvent<Value>,
    mut out: impl std::io::Write,
) -> Result<Value, Diagnostic> {
    // The invocation's time left (its deadline, within the configured budget).
    let budget = app.session.config().time_budget;
    let time_left = time_left(event.context.deadline, budget);
    if let Some(reply) = publish_or_status(app, &event.payload, time_left).await {
        return Ok(function_url_reply(reply));
    }
    let is_http = event.payload.pointer("/requestContext/http").is_some();
    let (trigger, reply) = match trigger::from_lambda_event(&event.payload) {
        Ok(read) => read,
        Err(problem) if is_http => return Ok(function_url_reply(HttpReply::bad_request(&problem))),
        Err(problem) => return Err(bad_event(problem)),
    };
    let report = match crate::run(app, trigger, time_left).await {
        Ok(report) => report,
        Err(e) if reply == Reply::Http => {
            tracing::error!(error = %e, "process_events failed");
            return Ok(function_url_reply(HttpReply::failed(&e)));
        }
        Err(e) => return Err(diagnostic(&e)),
    };
    if let Some(line) = crate::metrics_line(app, &report).await
        && let Err(e) = writeln!(out, "{line}")
    {
        tracing::warn!(error = %e, "the metrics line could not be printed");
    }
    Ok(match reply {
        Reply::Json => serde_json::to_value(&report).expect("reports are plain data"),
        Reply::Http => function_url_reply(HttpReply::ok(&report)),
    })
}
