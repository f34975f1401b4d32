//! Where tasks go: built-in sinks and the routing from event type to sink (cargo features
//! `http` and `sqs`; the queue core needs neither).
//!
//! - [`route`]: the route table (`ROUTES` / `ROUTES_FILE`), parsed and checked where sinks are
//!   built; `route_limits` reads a route's limits and `on_dead`.
//! - [`router`]: the handler that delivers each task to its route's sink ([`Delivery`] is
//!   what the functions, the CLI and the worker run).
//! - `http` (feature `http`): POST the envelope to a webhook, signed.
//! - `sqs` (feature `sqs`): send the payload to an SQS queue; the SQS dead-letter queue.
//! - [`redact`]: URLs without their credentials, for messages.
//! - [`SinkError`]: why a delivery failed, and whether it is worth another try.
//!
//! # How the sinks work
//!
//! **Trace context.** A task may carry a W3C `traceparent` (set by `publish --traceparent`, a
//! JSON line's or an HTTP publish item's `traceparent`, or the Python and Node producers'
//! `--traceparent`; checked for the version-00 form where it enters). It travels in the envelope:
//! the claim, retry and built-in log events carry it as a field; the SQS sink sends it as a
//! `traceparent` message attribute; the HTTP sink sends it as the `traceparent` header, or, when
//! traces are exported (feature `otel`, `OTEL_EXPORTER_OTLP_ENDPOINT` set), the context of the
//! CLIENT span of that request (`crate::traces`).
//!
//! With `ROUTES` set the functions run `sink::router::Router`, a `Handler` like any other: the
//! pipeline neither knows nor cares where a task goes, and each task's result still decides its
//! completion, retry or dead letter. An SQS route batches by default without the pipeline's help:
//! its sink owns a small Tokio task (spawned when the router is built, ended when it is dropped)
//! that gathers the messages of concurrent handlers into `SendMessageBatch` requests of up to 10
//! (or after a 3 ms linger) and answers each handler with its own entry's result; a batch SQS
//! refuses as a whole for one message's sake is resent message by message. The details are in
//! `sqs/` (its `mod.rs` documents what is sent; the error tables are the tests of
//! `classify.rs`).
//!
//! The HTTP sink (`http.rs`) posts the envelope, signed with HMAC-SHA256 over
//! `"{timestamp}.{body}"` when the route names a secret, and turns the answer into the handler
//! result: 2xx done; 408, 429, 5xx and transport errors retryable, `Retry-After` becoming a lower
//! bound on the backoff (`HandlerError::RetryAfter`); redirects and other statuses permanent. Both
//! sinks carry the task's idempotency key (HTTP `Idempotency-Key`, SQS `TaskId` and the FIFO
//! deduplication id), and HTTP also the fencing token, so a receiver can drop a repeated or stale
//! delivery: delivery is at least once.
//!
//! The SQS dead-letter queue hangs off the queue through the `DeadLetterSink` trait, which is all
//! the core knows of it: after a bury has committed (the record is under `dead/` in the same
//! multi-op that removed task and lease) the record is also sent to `DEAD_LETTER_QUEUE_URL`,
//! bounded to 5 s; a failed send is logged and loses nothing.
//!
//! `Config` keeps the route table as text (`ROUTES`, or the file `ROUTES_FILE` names, read at
//! start); the sinks module parses and checks it where sinks are built (`Delivery::from_config`:
//! `process_events`' cold start, the CLI's `process` and `worker`), so a bad route stops
//! `process_events` at cold start, naming `ROUTES` and the route, while `reap_leases`, which builds
//! no sinks, is not stopped by it.

mod error;
pub mod redact;
pub mod route;
mod route_limits;
pub mod router;

#[cfg(feature = "http")]
mod answer;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
mod resume_answer;
#[cfg(feature = "http")]
pub mod signature;
#[cfg(feature = "sqs")]
pub mod sqs;

use std::sync::Arc;

pub use error::{InvalidSpec, SinkError};
pub use router::{Delivery, Router};

use crate::config::Config;
use crate::error::Error;
use crate::queue::DeadLetterSink;

/// The sink every dead letter is also copied to: the SQS queue `DEAD_LETTER_QUEUE_URL` names,
/// if it is set.
///
/// # Notable errors
/// - [`Error::Config`] naming `DEAD_LETTER_QUEUE_URL` when it is set but the `sqs` feature is
///   not built in.
pub async fn dead_letter_sink(config: &Config) -> Result<Option<Arc<dyn DeadLetterSink>>, Error> {
    let Some(url) = &config.dead_letter_queue_url else {
        return Ok(None);
    };
    #[cfg(feature = "sqs")]
    {
        let queue = sqs::DeadLetterQueue::new(sqs::client().await, url.clone());
        Ok(Some(Arc::new(queue)))
    }
    #[cfg(not(feature = "sqs"))]
    {
        Err(Error::Config(crate::config::ConfigError {
            variable: "DEAD_LETTER_QUEUE_URL",
            value: redact::redacted(url),
            problem: "the sqs sink is not built in: build with cargo feature `sqs`, or unset it"
                .into(),
        }))
    }
}
