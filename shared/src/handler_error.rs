//! Why a handler did not finish a task: the one error a [`Handler`](crate::Handler) and a
//! resumable handler's [`Steps`](crate::Steps) answer with (re-exported by `handler`). A leaf,
//! so that `resume`, which `task` carries, can answer with it too.

use std::time::Duration;

/// Why a handler did not finish a task.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Worth another try later (a timeout, a 503): the task is released with a backoff.
    #[error("retryable: {0}")]
    Retryable(String),
    /// Worth another try, and the other side said when (HTTP `Retry-After`): the task is
    /// released for the longer of `after` and the backoff, at most `BACKOFF_MAX_MS`.
    #[error("retryable after {after:?}: {error}")]
    RetryAfter {
        /// What went wrong.
        error: String,
        /// How long the other side asked to wait.
        after: Duration,
    },
    /// Will never succeed (a 400, a missing record): the task goes to the dead letters now.
    #[error("permanent: {0}")]
    Permanent(String),
    /// A resumable handler stopped between steps: to sleep, to wait for a signal, or because
    /// the run is stopping (see [`crate::resume::Steps`]). The task is released with its
    /// record, no attempt counted.
    #[error("suspended")]
    Suspended,
}
