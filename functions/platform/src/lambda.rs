//! Lambda glue: errors as Lambda's `Diagnostic`, Function URL replies, and the time an
//! invocation has left.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_bridge::Error;
use lambda_runtime::Diagnostic;
use serde_json::{Value, json};

use crate::reply::{HttpReply, error_type};

/// A library error as a Lambda error.
pub fn diagnostic(err: &Error) -> Diagnostic {
    Diagnostic {
        error_type: error_type(err).into(),
        error_message: err.to_string(),
    }
}

/// An event the function cannot read, as a Lambda error.
pub fn bad_event(problem: String) -> Diagnostic {
    Diagnostic {
        error_type: "BadEvent".into(),
        error_message: problem,
    }
}

/// The response object a Lambda Function URL expects.
pub fn function_url_reply(reply: HttpReply) -> Value {
    let mut headers = json!({ "content-type": "application/json" });
    for (name, value) in reply.headers {
        headers[name] = json!(value);
    }
    json!({
        "statusCode": reply.status,
        "headers": headers,
        "body": reply.body.to_string(),
    })
}

/// A Function URL request's method, path, query string and body (decoded when the URL sent
/// it in base64); `None` for any other event.
pub fn function_url_request(event: &Value) -> Option<Result<UrlRequest, String>> {
    let http = event.pointer("/requestContext/http")?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let body = text(event.get("body"));
    let body = match event.get("isBase64Encoded").and_then(Value::as_bool) {
        Some(true) => {
            use base64::Engine;
            match base64::engine::general_purpose::STANDARD.decode(body.as_bytes()) {
                Ok(bytes) => bytes,
                Err(e) => {
                    return Some(Err(format!(
                        "the body is not valid base64 ({e}): send it base64-encoded, or not flagged so"
                    )));
                }
            }
        }
        _ => body.into_bytes(),
    };
    Some(Ok(UrlRequest {
        method: text(http.get("method")),
        path: text(event.get("rawPath")),
        query: text(event.get("rawQueryString")),
        body,
    }))
}

/// What a Function URL request carries.
pub struct UrlRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
}

/// The time left to an invocation whose deadline is `deadline_ms` (from its context); see
/// [`crate::trigger::time_left`].
pub fn time_left(deadline_ms: u64, budget: Duration) -> Duration {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    crate::trigger::time_left(deadline_ms, now_ms, budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_carry_the_label_and_the_message() {
        let unreachable = Error::Unreachable {
            address: "10.0.0.1:2181".into(),
            timeout_ms: 5000,
            reason: "timed out".into(),
        };
        let d = diagnostic(&unreachable);
        assert_eq!(d.error_type, "ZooKeeperUnreachable");
        assert!(
            d.error_message.contains("10.0.0.1:2181"),
            "{}",
            d.error_message
        );
        assert_eq!(bad_event("unknown mode".into()).error_type, "BadEvent");
    }

    #[test]
    fn function_url_replies_are_json_in_http_shape() {
        let lambda = function_url_reply(HttpReply::ok(&json!({ "completed": 2 })));
        assert_eq!(lambda["statusCode"], 200);
        assert_eq!(lambda["headers"]["content-type"], "application/json");
        let body: Value = serde_json::from_str(lambda["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["completed"], 2);
    }
}
