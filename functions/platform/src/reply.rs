//! The labels errors are reported under (Lambda's `errorType`, `error` in HTTP replies), and
//! JSON replies for HTTP requests (Vercel, Lambda Function URLs).

use event_bridge::Error;
use serde::Serialize;
use serde_json::{Value, json};

/// The label an error is reported under: Lambda's `errorType`, and `error` in HTTP replies.
pub fn error_type(err: &Error) -> &'static str {
    match err {
        Error::Config(_) => "ConfigError",
        Error::Unreachable { .. } => "ZooKeeperUnreachable",
        Error::Zk { .. } => "ZooKeeperError",
        Error::Timeout { .. } => "ZooKeeperTimeout",
        Error::TooLarge { .. } => "TaskTooLarge",
        Error::Json(_) => "JsonError",
        _ => "EventBridgeError",
    }
}

/// An HTTP reply with a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpReply {
    pub status: u16,
    pub body: Value,
    /// Headers besides `content-type` (`Allow` on a 405).
    pub headers: Vec<(&'static str, String)>,
}

impl HttpReply {
    /// A reply with `status` and `body`, and no header of its own.
    pub fn new(status: u16, body: Value) -> Self {
        HttpReply {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// 200 with a report.
    pub fn ok(report: &impl Serialize) -> Self {
        let body = serde_json::to_value(report).expect("reports are plain data");
        HttpReply::new(200, body)
    }

    /// 401: the request lacks `Authorization: Bearer $CRON_SECRET`.
    pub fn unauthorized() -> Self {
        let message = "send Authorization: Bearer <CRON_SECRET>";
        HttpReply::error(401, "Unauthorized", message)
    }

    /// 401: no `CRON_SECRET` is configured, so no request can be let in.
    pub fn no_secret() -> Self {
        let message = "CRON_SECRET is not set, so every request is refused: set it (Vercel \
                       sends it with its crons), or ALLOW_UNAUTHENTICATED=1 for local use";
        HttpReply::error(401, "Unauthorized", message)
    }

    /// 400: the query string does not say what to do.
    pub fn bad_request(problem: &str) -> Self {
        HttpReply::error(400, "BadRequest", problem)
    }

    /// 405: a method the endpoint does not answer, with `Allow` listing those it does.
    pub fn method_not_allowed(problem: &str, allow: &str) -> Self {
        let mut reply = HttpReply::error(405, "MethodNotAllowed", problem);
        reply.headers.push(("allow", allow.to_string()));
        reply
    }

    /// 503 when ZooKeeper failed us (worth retrying), 500 otherwise.
    pub fn failed(err: &Error) -> Self {
        let status = match err {
            Error::Unreachable { .. } | Error::Zk { .. } | Error::Timeout { .. } => 503,
            _ => 500,
        };
        HttpReply::error(status, error_type(err), &err.to_string())
    }

    /// 202 with what a publish created.
    pub fn accepted(body: Value) -> Self {
        HttpReply::new(202, body)
    }

    /// A status: 200, or 404 when there is no such task.
    pub fn status(found: bool, body: Value) -> Self {
        HttpReply::new(if found { 200 } else { 404 }, body)
    }

    /// 413: a publish over the limit.
    pub fn too_large(problem: &str) -> Self {
        HttpReply::error(413, "PayloadTooLarge", problem)
    }

    /// A reply with a JSON error body.
    pub fn error(status: u16, label: &str, message: &str) -> Self {
        let body = json!({ "error": label, "message": message });
        HttpReply::new(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_bridge::config::ConfigError;
    use zookeeper_client as zk;

    fn zk_error(source: zk::Error) -> Error {
        Error::Zk {
            op: "get",
            path: "/event-bridge/tasks".into(),
            source,
        }
    }

    #[test]
    fn errors_get_stable_labels() {
        let config = Error::Config(ConfigError {
            variable: "MAX_ATTEMPTS",
            value: "0".into(),
            problem: "must be at least 1".into(),
        });
        let unreachable = Error::Unreachable {
            address: "10.0.0.1:2181".into(),
            timeout_ms: 5000,
            reason: "timed out".into(),
        };
        assert_eq!(error_type(&config), "ConfigError");
        assert_eq!(error_type(&unreachable), "ZooKeeperUnreachable");
        assert_eq!(error_type(&zk_error(zk::Error::NoAuth)), "ZooKeeperError");
    }

    #[test]
    fn http_replies_carry_status_and_json() {
        assert_eq!(HttpReply::unauthorized().status, 401);
        assert_eq!(HttpReply::unauthorized().body["error"], "Unauthorized");
        assert_eq!(HttpReply::bad_request("max_tasks").status, 400);
        let refused = HttpReply::method_not_allowed("DELETE", "GET, POST");
        assert_eq!(
            (refused.status, &refused.body["error"]),
            (405, &json!("MethodNotAllowed"))
        );
        assert_eq!(refused.headers, [("allow", "GET, POST".to_string())]);
        assert_eq!(
            HttpReply::failed(&zk_error(zk::Error::SessionExpired)).status,
            503
        );
        assert_eq!(
            HttpReply::failed(&Error::TooLarge { size: 2, limit: 1 }).status,
            500
        );
    }
}
