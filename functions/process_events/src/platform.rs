//! What both functions share at the platform edge: the ZooKeeper session a warm instance keeps
//! between invocations, the labels errors get, and HTTP replies.
//!
//! # The session across invocations
//!
//! A function connects once, at cold start, and reuses the session. Between invocations Lambda
//! freezes the sandbox, and a sandbox frozen for longer than the session timeout thaws with a
//! session ZooKeeper has already expired. [`Session::run`] deals with that in two simple steps:
//!
//! 1. before the work, a session the client already knows is over (expired, closed) is
//!    replaced by a new one;
//! 2. when the work fails with a session error anyway (the client only learned of the expiry
//!    mid-run), it reconnects once and runs the work again, against the same deadline.
//!
//! Running the work again is safe: every write a holder makes is fenced by the task's version
//! ([`event_bridge::queue`]), so whatever the first attempt claimed under the old session is
//! either settled or left to the reaper. The reply reports the second attempt only.

use std::future::Future;
use std::sync::Mutex;

use event_bridge::sink::router::Delivery;
use event_bridge::sink::sqs::{self, DeadLetterQueue};
use event_bridge::{Config, Error, Queue};
use lambda_runtime::Diagnostic;
use serde::Serialize;
use serde_json::{Value, json};
use zookeeper_client as zk;

/// A queue on a ZooKeeper session, replaced when the session ends.
pub struct Session {
    config: Config,
    /// Kept across reconnects, so one instance's logs and leases carry one name.
    consumer_id: String,
    /// The queue on the current session; swapped whole on reconnect. Vercel serves requests
    /// concurrently, hence the lock (held only to clone or swap, never across an await).
    queue: Mutex<Queue>,
    /// Where dead letters also go (`DEAD_LETTER_QUEUE_URL`), kept across reconnects.
    dead_letter_queue: Option<DeadLetterQueue>,
    /// What runs tasks: the routes' sinks, built once at cold start, or the built-in handler.
    delivery: Delivery,
}

impl Session {
    /// A function's cold start: connects (failing fast, naming the address) and creates the
    /// queue's base paths. `platform` prefixes the consumer id (`lambda-…`, `vercel-…`).
    pub async fn open(config: Config, platform: &str) -> Result<Self, Error> {
        let consumer_id = Queue::new_consumer_id(platform);
        let dead_letter_queue = match &config.dead_letter_queue_url {
            Some(url) => Some(DeadLetterQueue::new(sqs::client().await, url.clone())),
            None => None,
        };
        let queue = connect(&config, &consumer_id, &dead_letter_queue).await?;
        queue.ensure_paths().await?;
        let delivery = Delivery::from_config(&config).await?;
        Ok(Session {
            config,
            consumer_id,
            queue: Mutex::new(queue),
            dead_letter_queue,
            delivery,
        })
    }

    /// [`Session::open`] with the configuration from the environment.
    pub async fn from_env(platform: &str) -> Result<Self, Error> {
        Session::open(Config::from_env()?, platform).await
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether an HTTP request's `Authorization` header satisfies `CRON_SECRET` (any request
    /// does when it is unset).
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        let secret = self
            .config
            .cron_secret
            .as_ref()
            .map(event_bridge::config::Secret::expose);
        event_bridge::trigger::authorized(authorization, secret)
    }

    /// The handler tasks run with.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The queue on the current session.
    pub fn queue(&self) -> Queue {
        self.queue.lock().expect("session lock").clone()
    }

    /// Runs `work` on the queue, reconnecting when the session is over (see the module docs):
    /// at most one reconnect and one second run per call.
    ///
    /// # Notable errors
    /// - the work's own error when it is not a session error, or when the second run fails too;
    /// - [`Error::Unreachable`] when reconnecting fails.
    pub async fn run<T, F, Fut>(&self, work: F) -> Result<T, Error>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut queue = self.queue();
        if queue.client().state().is_terminated() {
            let state = queue.client().state().to_string();
            queue = self.reconnect(&queue, &state).await?;
        }
        match work(queue.clone()).await {
            Err(e) if is_session_error(&e) => {
                let queue = self.reconnect(&queue, &e.to_string()).await?;
                work(queue).await
            }
            result => result,
        }
    }

    /// Replaces `stale` with a queue on a new session, unless a concurrent request already did.
    async fn reconnect(&self, stale: &Queue, reason: &str) -> Result<Queue, Error> {
        tracing::warn!(consumer = %self.consumer_id, reason, "zookeeper session over; reconnecting");
        let fresh = connect(&self.config, &self.consumer_id, &self.dead_letter_queue).await?;
        let mut current = self.queue.lock().expect("session lock");
        if current.client().session_id() == stale.client().session_id() {
            *current = fresh;
        }
        Ok(current.clone())
    }
}

async fn connect(
    config: &Config,
    consumer_id: &str,
    dead_letter_queue: &Option<DeadLetterQueue>,
) -> Result<Queue, Error> {
    let client = event_bridge::zk::connect(config).await?;
    let queue = Queue::new(client, config, consumer_id);
    Ok(match dead_letter_queue {
        Some(dlq) => queue.with_dead_letter_queue(dlq.clone()),
        None => queue,
    })
}

/// Whether `err` means the session (not the request) is gone, so a new session may succeed.
pub fn is_session_error(err: &Error) -> bool {
    use zk::Error::*;
    // `Custom` is what an in-flight request gets when the connection dies under it.
    matches!(
        err,
        Error::Zk {
            source: SessionExpired
                | ClientClosed
                | ConnectionLoss
                | SessionMoved
                | NoHosts
                | Custom(_),
            ..
        }
    )
}

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

/// Opens the session from the environment, or logs why not (naming the variable or the
/// address) and returns the error for `main` to exit with.
pub async fn cold_start(
    platform: &str,
) -> Result<Session, Box<dyn std::error::Error + Send + Sync>> {
    Session::from_env(platform).await.map_err(|e| {
        tracing::error!(error_type = error_type(&e), error = %e, "cold start failed");
        // As text, so `main`'s exit message reads like the log line.
        format!("{}: {e}", error_type(&e)).into()
    })
}

/// An HTTP reply with a JSON body, for Vercel and for Lambda Function URLs.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpReply {
    pub status: u16,
    pub body: Value,
}

impl HttpReply {
    /// 200 with a report.
    pub fn ok(report: &impl Serialize) -> Self {
        let body = serde_json::to_value(report).expect("reports are plain data");
        HttpReply { status: 200, body }
    }

    /// 401: the request lacks `Authorization: Bearer $CRON_SECRET`.
    pub fn unauthorized() -> Self {
        let message = "send Authorization: Bearer <CRON_SECRET>";
        HttpReply::error(401, "Unauthorized", message)
    }

    /// 400: the query string does not say what to do.
    pub fn bad_request(problem: &str) -> Self {
        HttpReply::error(400, "BadRequest", problem)
    }

    /// 503 when ZooKeeper failed us (worth retrying), 500 otherwise.
    pub fn failed(err: &Error) -> Self {
        let status = match err {
            Error::Unreachable { .. } | Error::Zk { .. } | Error::Timeout { .. } => 503,
            _ => 500,
        };
        HttpReply::error(status, error_type(err), &err.to_string())
    }

    fn error(status: u16, label: &str, message: &str) -> Self {
        let body = json!({ "error": label, "message": message });
        HttpReply { status, body }
    }

    /// The response object a Lambda Function URL expects.
    pub fn into_lambda(self) -> Value {
        json!({
            "statusCode": self.status,
            "headers": { "content-type": "application/json" },
            "body": self.body.to_string(),
        })
    }

    /// The response a Vercel function returns.
    pub fn into_vercel(self) -> Result<vercel_runtime::Response<String>, vercel_runtime::Error> {
        let response = vercel_runtime::Response::builder()
            .status(self.status)
            .header("content-type", "application/json")
            .body(self.body.to_string())?;
        Ok(response)
    }
}

/// A Vercel request's `Authorization` header, if it is readable text.
pub fn authorization(req: &vercel_runtime::Request) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_bridge::config::ConfigError;

    fn zk_error(source: zk::Error) -> Error {
        Error::Zk {
            op: "get",
            path: "/event-bridge/tasks".into(),
            source,
        }
    }

    #[test]
    fn only_session_errors_are_retried_on_a_new_session() {
        for source in [
            zk::Error::SessionExpired,
            zk::Error::ClientClosed,
            zk::Error::ConnectionLoss,
        ] {
            assert!(is_session_error(&zk_error(source.clone())), "{source}");
        }
        for source in [
            zk::Error::NoNode,
            zk::Error::BadVersion,
            zk::Error::NoAuth,
            zk::Error::AuthFailed,
        ] {
            assert!(!is_session_error(&zk_error(source.clone())), "{source}");
        }
        let timeout = Error::Timeout {
            op: "get",
            path: "/x".into(),
            timeout_ms: 5,
        };
        assert!(!is_session_error(&timeout));
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
        let d = diagnostic(&config);
        assert_eq!(d.error_type, "ConfigError");
        assert!(
            d.error_message.starts_with("MAX_ATTEMPTS"),
            "{}",
            d.error_message
        );
        let d = diagnostic(&unreachable);
        assert_eq!(d.error_type, "ZooKeeperUnreachable");
        assert!(
            d.error_message.contains("10.0.0.1:2181"),
            "{}",
            d.error_message
        );
        assert_eq!(error_type(&zk_error(zk::Error::NoAuth)), "ZooKeeperError");
        assert_eq!(bad_event("unknown mode".into()).error_type, "BadEvent");
    }

    #[test]
    fn http_replies_carry_status_and_json() {
        assert_eq!(HttpReply::unauthorized().status, 401);
        assert_eq!(HttpReply::unauthorized().body["error"], "Unauthorized");
        assert_eq!(HttpReply::bad_request("max_tasks").status, 400);
        assert_eq!(
            HttpReply::failed(&zk_error(zk::Error::SessionExpired)).status,
            503
        );
        let lambda = HttpReply::ok(&json!({ "completed": 2 })).into_lambda();
        assert_eq!(lambda["statusCode"], 200);
        assert_eq!(lambda["headers"]["content-type"], "application/json");
        let body: Value = serde_json::from_str(lambda["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["completed"], 2);
    }

    #[test]
    fn vercel_responses_are_json() {
        let response = HttpReply::unauthorized().into_vercel().unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["error"], "Unauthorized");
    }
}
