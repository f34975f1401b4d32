//! Where dead letters also go: a [`DeadLetterSink`] receives a copy of every dead-letter record
//! after the bury that wrote it under `ROOT/dead` has committed. The queue core knows only this
//! trait; the SQS dead-letter queue (`DEAD_LETTER_QUEUE_URL`, feature `sqs`) is one.

use futures::future::BoxFuture;
use serde_json::Value;

/// A failed copy, as the sink describes it (the record stays in ZooKeeper).
pub type SendError = Box<dyn std::error::Error + Send + Sync>;

/// Receives copies of dead-letter records.
pub trait DeadLetterSink: Send + Sync {
    /// Where the copies go, for logs (no credentials).
    fn destination(&self) -> String;

    /// Sends the record of task `name` (the JSON written under `ROOT/dead`, see WIRE-FORMAT).
    /// The caller bounds the time it may take and logs a failure.
    fn send<'a>(&'a self, name: &'a str, record: &'a Value)
    -> BoxFuture<'a, Result<(), SendError>>;
}
