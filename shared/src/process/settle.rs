//! Settling writes under faults, and settling a task whose handler failed.
//!
//! A settling write (complete, release, bury) is sent again as the retry policy says: on the
//! same session after a dropped link, on a new one after an expiry (when the run has a
//! session to renew); fencing makes every repeat safe. All of it ends by the run's settling
//! deadline: what is not settled by then is left to the reaper and counted as unsettled.
//!
//! A repeat that finds its work already done ([`Settled::Gone`]) means the first try landed and
//! only its reply was lost: that is the outcome, not "lease lost".

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Run;
use super::report::Outcome;
use crate::clock::ZkTime;
use crate::error::Result;
use crate::handler::HandlerError;
use crate::queue::{CANCELLED, Lease, Queue, Settled};
use crate::session::{Recovery, recovery};

/// How long to wait before sending a settling write again after a dropped link.
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// Tries of one settling write, at most.
const TRIES: usize = 3;

/// What a settling write came to.
pub(super) enum Sent<T> {
    /// Its result, and whether it took more than one try.
    Answered(T, bool),
    /// No answer before the settling deadline.
    Unsettled,
}

impl<H> Run<'_, H> {
    /// Sends `write` on the run's queue, again as the module documentation says, until the
    /// settling deadline.
    ///
    /// # Notable errors
    /// - the write's error when the retry policy gives up on it (not a link or session fault).
    pub(super) async fn settle<T, F, Fut>(&self, write: F) -> Result<Sent<T>>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut queue = self.queue();
        for attempt in 0..TRIES {
            let error = match tokio::time::timeout_at(self.settle_by, write(queue.clone())).await {
                Err(_) => return Ok(Sent::Unsettled),
                Ok(Ok(answer)) => return Ok(Sent::Answered(answer, attempt > 0)),
                Ok(Err(error)) => error,
            };
            match recovery(&error, queue.session_over()) {
                Recovery::GiveUp => return Err(error),
                Recovery::SameSession => {
                    tracing::warn!(%error, "settling failed on a dropped link; trying again");
                    let pause = Instant::now() + RESEND_PAUSE;
                    tokio::time::sleep_until(pause.min(self.settle_by)).await;
                }
                Recovery::NewSession => {
                    tracing::warn!(%error, "settling failed: the session is over; trying on a new one");
                    let renewed = self.source.renew(&queue, error);
                    queue = match tokio::time::timeout_at(self.settle_by, renewed).await {
                        Ok(Ok(fresh)) => fresh,
                        Ok(Err(e)) if attempt + 1 < TRIES => {
                            tracing::warn!(error = %e, "no new session yet");
                            continue;
                        }
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Ok(Sent::Unsettled),
                    };
                }
            }
        }
        Ok(Sent::Unsettled)
    }

    /// Settles a task whose handler failed: retry with backoff, or bury.
    pub(super) async fn settle_failure(
        &self,
        lease: Lease,
        error: HandlerError,
    ) -> Result<Outcome> {
        let name = lease.task.name.clone();
        let attempt = lease.task.attempt();
        let (e, at_least) = match error {
            HandlerError::Permanent(e) => {
                return self.bury(lease, "permanent failure", Some(e)).await;
            }
            HandlerError::Retryable(e) => (e, Duration::ZERO),
            HandlerError::RetryAfter { error, after } => (error, after),
        };
        let queue = self.queue();
        if attempt >= queue.max_attempts() {
            let reason = format!("gave up after {attempt} attempts");
            return self.bury(lease, &reason, Some(e)).await;
        }
        let delay = queue
            .backoff(attempt)
            .max(at_least)
            .min(queue.backoff_max());
        let traceparent = lease.task.envelope.traceparent.as_deref();
        tracing::info!(task = %name, attempt, error = %e, backoff_ms = delay.as_millis() as u64,
            traceparent, "task will be retried");
        // Without a delay (a zero backoff) the task stays where it is.
        let done = if delay.is_zero() {
            Outcome::RetriedInPlace
        } else {
            Outcome::Retried
        };
        self.release(lease, Some(e), delay, true, done).await
    }

    /// Moves a held task to the dead letters.
    pub(super) async fn bury(
        &self,
        lease: Lease,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<Outcome> {
        let name = lease.task.name.clone();
        let on_dead = self.on_dead().for_task(&lease.task.envelope);
        let bury = |queue: Queue| {
            let (lease, last_error) = (lease.clone(), last_error.clone());
            async move { queue.bury_with(lease, reason, last_error, on_dead).await }
        };
        Ok(outcome(
            self.settle(bury).await?,
            Outcome::DeadLettered,
            &name,
        ))
    }

    /// Gives a held task back, as [`Queue::release`] does; `done` is the outcome when it went.
    pub(super) async fn release(
        &self,
        lease: Lease,
        error: Option<String>,
        delay: Duration,
        count_attempt: bool,
        done: Outcome,
    ) -> Result<Outcome> {
        let name = lease.task.name.clone();
        let now: ZkTime = self.now;
        let release = |queue: Queue| {
            let (lease, error) = (lease.clone(), error.clone());
            async move {
                queue
                    .release(lease, error, delay, &now, count_attempt)
                    .await
            }
        };
        match self.settle(release).await? {
            Sent::Answered(Settled::Cancelled, _) => self.bury_cancelled(lease, error).await,
            sent => Ok(outcome(sent, done, &name)),
        }
    }

    /// Buries a held task that was cancelled while we held it, and removes its mark.
    async fn bury_cancelled(&self, lease: Lease, error: Option<String>) -> Result<Outcome> {
        let id = lease.task.envelope.id.clone();
        match self.bury(lease, CANCELLED, error).await? {
            Outcome::DeadLettered => {
                self.queue().unmark_cancelled(&id).await?;
                Ok(Outcome::Cancelled)
            }
            other => Ok(other),
        }
    }
}

/// The outcome of a settling write of task `name` that would be `done` if it took effect.
pub(super) fn outcome(sent: Sent<Settled>, done: Outcome, name: &str) -> Outcome {
    match sent {
        Sent::Unsettled => {
            tracing::warn!(task = %name, "not settled before the deadline: left to the reaper");
            Outcome::Unsettled
        }
        Sent::Answered(settled, resent) => Outcome::settled_as(settled, resent, done, name),
    }
}
