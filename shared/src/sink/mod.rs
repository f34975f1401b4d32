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
