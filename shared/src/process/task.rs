//! One task of a pass: claim it (it was read already), run the handler while extending the
//! lease ([`super::hold`]), and settle it unless it succeeded (successes are completed in
//! batches by the pass).

use std::time::Duration;

use tokio::time::Instant;

use super::Run;
use super::hold::HandlerEnd;
use super::report::Outcome;
use crate::error::Result;
use crate::handler::Handler;
use crate::queue::{ClaimOutcome, Deferred, Lease, TaskRead};
use crate::session::{Recovery, recovery};

/// How a task's claim and run ended.
pub(super) enum Ran {
    /// Settled already (or never claimed): how, whether it was claimed, and the task's name.
    Settled(Outcome, bool, String),
    /// The handler succeeded; the task waits to be completed with others.
    Succeeded(Box<Lease>),
}

impl<H: Handler> Run<'_, H> {
    /// Claims a task that was read, runs it, and settles it unless it succeeded.
    pub(super) async fn run_task(&self, name: String, read: TaskRead) -> Result<Ran> {
        let (body, stat) = match read {
            TaskRead::Found { body, stat } => (body, stat),
            TaskRead::Gone => return Ok(Ran::Settled(Outcome::Gone, false, name)),
            TaskRead::Unreadable(why) => {
                tracing::warn!(task = %name, reason = %why, "task unreadable: skipped for this run");
                return Ok(Ran::Settled(Outcome::Unreadable, false, name));
            }
        };
        let queue = self.queue();
        let claimed_at = Instant::now();
        let claimed = match queue.claim_read(&name, &body, &stat, &self.now).await {
            Ok(claimed) => claimed,
            // No answer (a dropped link, a leader change): not claimed, as far as we know. Had
            // the claim landed, its lease expires unextended and the task runs later.
            Err(e) if recovery(&e, queue.session_over()) != Recovery::GiveUp => {
                tracing::warn!(task = %name, error = %e, "claim got no answer; passed over");
                return Ok(Ran::Settled(Outcome::ClaimFailed, false, name));
            }
            Err(e) => return Err(e),
        };
        let mut lease = match claimed {
            ClaimOutcome::Claimed(lease) => lease,
            ClaimOutcome::Taken => return Ok(Ran::Settled(Outcome::Conflict, false, name)),
            ClaimOutcome::Gone => return Ok(Ran::Settled(Outcome::Gone, false, name)),
            ClaimOutcome::Backoff { until_ms } => {
                // Not due yet: it waits under `delayed/`, not at the head of the queue.
                let outcome = match queue.defer(&name, &body, stat.version, until_ms).await? {
                    Deferred::Moved => Outcome::Backoff,
                    Deferred::Taken => Outcome::Conflict,
                    Deferred::Gone => Outcome::Gone,
                };
                return Ok(Ran::Settled(outcome, false, name));
            }
            ClaimOutcome::Buried { .. } => {
                return Ok(Ran::Settled(Outcome::DeadLettered, false, name));
            }
        };
        tracing::debug!(task = %name, attempt = lease.task.attempt(), consumer = %queue.consumer_id(),
            fencing_token = lease.task.fencing_token, "task claimed");
        let outcome = match self.run_handler(&mut lease, claimed_at).await? {
            HandlerEnd::Finished(Ok(())) => return Ok(Ran::Succeeded(Box::new(lease))),
            HandlerEnd::Finished(Err(e)) => self.settle_failure(lease, e).await?,
            HandlerEnd::Interrupted { deadline } => {
                self.release_unfinished(lease, deadline).await?
            }
            HandlerEnd::LeaseLost => Outcome::LeaseLost,
            HandlerEnd::Unvouched => Outcome::Abandoned,
        };
        Ok(Ran::Settled(outcome, true, name))
    }

    /// Releases a task whose handler was stopped, without counting the attempt. A stop at the
    /// deadline counts as an interruption; at `MAX_INTERRUPTIONS` the task goes to the dead
    /// letters instead of taking every run's time again.
    async fn release_unfinished(&self, mut lease: Lease, deadline: bool) -> Result<Outcome> {
        if deadline {
            let envelope = &mut lease.task.envelope;
            envelope.interruptions += 1;
            let interruptions = envelope.interruptions;
            if interruptions >= self.queue().max_interruptions() {
                let reason = format!("did not finish within a run's time, {interruptions} times");
                return self.bury(lease, &reason, None).await;
            }
        }
        let why = Some("released unfinished: the run had to stop".to_string());
        self.release(lease, why, Duration::ZERO, false, Outcome::Deadline)
            .await
    }
}
