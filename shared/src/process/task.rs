//! One task of a pass: claim it (it was read already), run the handler while extending the
//! lease, and settle it unless it succeeded (successes are completed in batches by the pass).

use std::time::Duration;

use tokio::time::Instant;

use super::report::Outcome;
use super::settle::{resend_once, settle_failure};
use super::{Run, stopped};
use crate::error::Result;
use crate::handler::{Handler, HandlerError};
use crate::lease;
use crate::queue::{ClaimOutcome, Lease, Settled, TaskRead};

/// How a task's claim and run ended.
pub(super) enum Ran {
    /// Settled already (or never claimed); the bool says whether it was claimed.
    Settled(Outcome, bool),
    /// The handler succeeded; the task waits to be completed with others.
    Succeeded(Box<Lease>),
}

/// How a handler's run ended.
enum HandlerEnd {
    Finished(Result<(), HandlerError>),
    /// Stopped at the deadline or on the stop signal.
    Interrupted,
    LeaseLost,
}

impl<H: Handler> Run<'_, H> {
    /// Claims a task that was read, runs it, and settles it unless it succeeded.
    pub(super) async fn run_task(&self, name: String, read: TaskRead) -> Result<Ran> {
        let queue = self.queue;
        let (body, stat) = match read {
            TaskRead::Found { body, stat } => (body, stat),
            TaskRead::Gone => return Ok(Ran::Settled(Outcome::Gone, false)),
            TaskRead::Unreadable(why) => {
                tracing::warn!(task = %name, reason = %why, "task unreadable: skipped for this run");
                return Ok(Ran::Settled(Outcome::Unreadable(name), false));
            }
        };
        let mut lease = match queue.claim_read(&name, &body, &stat, &self.now).await? {
            ClaimOutcome::Claimed(lease) => lease,
            ClaimOutcome::Taken => return Ok(Ran::Settled(Outcome::Conflict, false)),
            ClaimOutcome::Gone => return Ok(Ran::Settled(Outcome::Gone, false)),
            ClaimOutcome::Backoff { .. } => return Ok(Ran::Settled(Outcome::Backoff(name), false)),
            ClaimOutcome::Buried { .. } => return Ok(Ran::Settled(Outcome::DeadLettered, false)),
        };
        tracing::debug!(task = %name, attempt = lease.task.attempt(), consumer = %queue.consumer_id(),
            fencing_token = lease.task.fencing_token, "task claimed");
        let outcome = match self.run_handler(&mut lease).await? {
            HandlerEnd::Finished(Ok(())) => return Ok(Ran::Succeeded(Box::new(lease))),
            HandlerEnd::Finished(Err(e)) => settle_failure(queue, lease, e, &self.now).await?,
            HandlerEnd::Interrupted => self.release_unfinished(lease).await?,
            HandlerEnd::LeaseLost => Outcome::LeaseLost,
        };
        Ok(Ran::Settled(outcome, true))
    }

    /// Releases a task whose handler was stopped, without counting the attempt.
    async fn release_unfinished(&self, lease: Lease) -> Result<Outcome> {
        let queue = self.queue;
        let why = Some("released unfinished: the run had to stop".to_string());
        let release =
            || queue.release(lease.clone(), why.clone(), Duration::ZERO, &self.now, false);
        Ok(match resend_once(queue, release).await? {
            Settled::Done => Outcome::Deadline,
            Settled::LeaseLost => Outcome::LeaseLost,
        })
    }

    /// Runs the handler, extending the lease every third of its timeout, until it finishes,
    /// the deadline nears, or the stop signal's grace runs out.
    async fn run_handler(&self, lease: &mut Lease) -> Result<HandlerEnd> {
        let queue = self.queue;
        let stop_at = self.options.deadline - self.options.margin / 2;
        let every = lease::extend_interval(queue.lease_timeout());
        let mut extend = tokio::time::interval_at(Instant::now() + every, every);
        let task = lease.task.clone();
        let work = self.handler.handle(&task);
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => return Ok(HandlerEnd::Finished(result)),
                _ = extend.tick() => match queue.extend(lease).await {
                    Ok(Settled::Done) => {}
                    Ok(Settled::LeaseLost) => {
                        tracing::warn!(task = %task.name, fencing_token = task.fencing_token, "lease lost while running");
                        return Ok(HandlerEnd::LeaseLost);
                    }
                    // A dropped connection or a slow answer: the lease has two more thirds of its
                    // timeout; let the handler go on and try again at the next tick.
                    Err(e) => tracing::warn!(task = %task.name, error = %e, "lease extension failed; retrying at the next tick"),
                },
                _ = tokio::time::sleep_until(stop_at) => return Ok(HandlerEnd::Interrupted),
                _ = stopped(self.stop.clone()) => {
                    let until = stop_at.min(Instant::now() + self.options.margin);
                    return Ok(match tokio::time::timeout_at(until, &mut work).await {
                        Ok(result) => HandlerEnd::Finished(result),
                        Err(_) => HandlerEnd::Interrupted,
                    });
                }
            }
        }
    }
}
