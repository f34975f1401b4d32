//! The sinks' errors: a delivery that failed (worth another try, perhaps not before a given
//! time, or never), and a sink that cannot be built from its spec.

use std::time::Duration;

use crate::handler::HandlerError;

/// Why a sink did not deliver a task. Becomes the task's [`HandlerError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// Worth another try later (a timeout, a 503, throttling).
    #[error("{0}")]
    Retryable(String),
    /// Worth another try, and the other side said when (HTTP `Retry-After`).
    #[error("{error}")]
    RetryAfter {
        /// What went wrong.
        error: String,
        /// How long the other side asked to wait.
        after: Duration,
    },
    /// Will never succeed (a 400, a missing queue, access denied).
    #[error("{0}")]
    Permanent(String),
    /// The webhook answered `202` with a checkpoint: the task resumes later (see
    /// [`super::http`]); its record says when.
    #[error("suspended")]
    Suspended,
}

impl From<SinkError> for HandlerError {
    fn from(error: SinkError) -> Self {
        match error {
            SinkError::Retryable(e) => HandlerError::Retryable(e),
            SinkError::RetryAfter { error, after } => HandlerError::RetryAfter { error, after },
            SinkError::Permanent(e) => HandlerError::Permanent(e),
            SinkError::Suspended => HandlerError::Suspended,
        }
    }
}

/// A sink's spec that cannot work (a malformed URL, a zero timeout, an unset secret variable);
/// the message names the problem, never a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidSpec(pub String);
