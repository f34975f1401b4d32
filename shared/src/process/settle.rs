//! Settling a task whose handler failed: a retry with backoff, or the dead letters; and the one
//! more try a settling write gets after a dropped link.

use std::future::Future;
use std::time::Duration;

use super::report::Outcome;
use crate::clock::ZkTime;
use crate::error::Result;
use crate::handler::HandlerError;
use crate::queue::{Lease, Queue, Settled};
use crate::session::{Recovery, recovery};

/// How long to wait before sending a settling write again after a dropped link.
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// Settles a task whose handler failed: retry with backoff, or bury.
pub(super) async fn settle_failure(
    queue: &Queue,
    lease: Lease,
    error: HandlerError,
    now: &ZkTime,
) -> Result<Outcome> {
    let (name, attempt) = (lease.task.name.clone(), lease.task.attempt());
    let (e, at_least) = match error {
        HandlerError::Permanent(e) => {
            let bury = || queue.bury(lease.clone(), "permanent failure", Some(e.clone()));
            let settled = resend_once(queue, bury).await?;
            return Ok(lost_or(settled, Outcome::DeadLettered, &name));
        }
        HandlerError::Retryable(e) => (e, Duration::ZERO),
        HandlerError::RetryAfter { error, after } => (error, after),
    };
    if attempt >= queue.max_attempts() {
        let reason = format!("gave up after {attempt} attempts");
        let bury = || queue.bury(lease.clone(), &reason, Some(e.clone()));
        let settled = resend_once(queue, bury).await?;
        return Ok(lost_or(settled, Outcome::DeadLettered, &name));
    }
    let delay = queue
        .backoff(attempt)
        .max(at_least)
        .min(queue.backoff_max());
    tracing::info!(task = %name, attempt, error = %e, backoff_ms = delay.as_millis() as u64, "task will be retried");
    let release = || queue.release(lease.clone(), Some(e.clone()), delay, now, true);
    let settled = resend_once(queue, release).await?;
    Ok(lost_or(settled, Outcome::Retried, &name))
}

/// Sends a settling write once more when [`recovery`] says the same session may take it (a
/// dropped link). Fencing makes the repeat safe; giving up would leave the lease held until it
/// expires and the task run again.
pub(super) async fn resend_once<T, F, Fut>(queue: &Queue, mut write: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match write().await {
        Err(e) if recovery(&e, queue.session_over()) == Recovery::SameSession => {
            tracing::warn!(error = %e, "settling failed on a dropped link; trying once more");
            tokio::time::sleep(RESEND_PAUSE).await;
            write().await
        }
        result => result,
    }
}

/// `outcome`, or [`Outcome::LeaseLost`] (logged) when the write found the lease gone.
pub(super) fn lost_or(settled: Settled, outcome: Outcome, name: &str) -> Outcome {
    if settled == Settled::LeaseLost {
        tracing::warn!(task = %name, "lease lost before settling; nothing changed");
        return Outcome::LeaseLost;
    }
    outcome
}
