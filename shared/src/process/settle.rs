//! Settling writes under faults, and settling a task whose handler failed.
//!
//! Every write of a holder (complete, release, bury, and the extensions in `hold`) goes
//! through one retry loop, [`Run::send`], driven by the one retry policy: on the same session
//! after a dropped link, on a new one after an expiry (when the run has a session to renew);
//! fencing makes every repeat safe. A settling write ends by the run's settling deadline: what
//! is not settled by then is left to the reaper and counted as unsettled.
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
use crate::queue::{Burial, CANCELLED, Lease, Queue, Settled};
use crate::session::{Recovery, recovery};

/// How long to wait before sending a settling write again after a dropped link.
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// What a holder's write came to.
pub(super) enum Sent<T> {
    /// Its result, and whether it took more than one try.
    Answered(T, bool),
    /// No answer before its deadline.
    Unsettled,
}

impl<H> Run<'_, H> {
    /// Sends a settling write until the run's settling deadline; see [`Run::send`].
    pub(super) async fn settle<T, F, Fut>(&self, write: F) -> Result<Sent<T>>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.send(self.settle_by, RESEND_PAUSE, write).await
    }

    /// The one retry loop of a holder's writes (settling, extending): sends `write` on the
    /// run's queue until it is answered or `by` comes. After a failure the retry policy
    /// ([`recovery`]) decides: a dropped link sends it again after `pause`; an ended session
    /// sends it on a new one (when the run has a session to renew; a new session that cannot
    /// be had yet is tried again after `pause`); anything else is the write's error. Fencing
    /// makes every repeat safe.
    ///
    /// # Notable errors
    /// - the write's error when the retry policy gives up on it (not a link or session fault),
    ///   or when the session is over and the run has none to renew.
    pub(super) async fn send<T, F, Fut>(
        &self,
        by: Instant,
        pause: Duration,
        write: F,
    ) -> Result<Sent<T>>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut queue = self.queue();
        let mut resent = false;
        loop {
            let error = match tokio::time::timeout_at(by, write(queue.clone())).await {
                Err(_) => return Ok(Sent::Unsettled),
                Ok(Ok(answer)) => return Ok(Sent::Answered(answer, resent)),
                Ok(Err(error)) => error,
            };
            resent = true;
            match recovery(&error, queue.session_over()) {
                Recovery::GiveUp => return Err(error),
                Recovery::SameSession => {
                    tracing::warn!(%error, "a holder's write failed on a dropped link; trying again");
                }
                Recovery::NewSession => {
                    tracing::warn!(%error, "a holder's write failed: the session is over; trying on a new one");
                    let renewed = self.source.renew(&queue, error);
                    match tokio::time::timeout_at(by, renewed).await {
                        Ok(Ok(fresh)) => {
                            queue = fresh;
                            continue;
                        }
                        Ok(Err(e)) if self.source.renews() => {
                            tracing::warn!(error = %e, "no new session yet");
                        }
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Ok(Sent::Unsettled),
                    }
                }
            }
            tokio::time::sleep_until((Instant::now() + pause).min(by)).await;
        }
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

    /// Moves a held task to the dead letters ([`Queue::bury`]); its group does what the
    /// handler's policy says.
    pub(super) async fn bury(
        &self,
        lease: Lease,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<Outcome> {
        let name = lease.task.name.clone();
        let cancelled = reason == CANCELLED;
        let on_dead = self.on_dead().for_task(&lease.task.envelope);
        let bury = |queue: Queue| {
            let (lease, last_error) = (lease.clone(), last_error.clone());
            async move {
                let task = Burial::Held { lease, on_dead };
                queue.bury(task, reason, last_error).await
            }
        };
        let done = if cancelled {
            Outcome::Cancelled
        } else {
            Outcome::DeadLettered
        };
        Ok(outcome(self.settle(bury).await?, done, &name))
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
            // Cancelled while we held it: buried, and its mark with it.
            Sent::Answered(Settled::Cancelled, _) => self.bury(lease, CANCELLED, error).await,
            sent => Ok(outcome(sent, done, &name)),
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
