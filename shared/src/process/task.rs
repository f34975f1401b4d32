//! The tasks of a pass: claim them in batches (they were read already), run each handler
//! while extending its lease ([`super::hold`]), and settle it unless it succeeded (successes
//! are completed in batches by the pass).

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

/// What came of one task of a batch of claims.
pub(super) enum Claimed {
    /// Ours: run it (claimed at that instant).
    Held(Box<Lease>, Instant),
    /// Ended without a run: how, and the task's name.
    Settled(Outcome, String),
    /// Not tried: a claim before it in the batch lost a race.
    Untried(String, TaskRead),
}

impl<H: Handler> Run<'_, H> {
    /// Claims a batch of tasks that were read, in one multi-op; those gone or unreadable
    /// since are settled without a request, those in backoff are moved aside.
    pub(super) async fn claim_batch(&self, batch: Vec<(String, TaskRead)>) -> Result<Vec<Claimed>> {
        let mut claimed = Vec::with_capacity(batch.len());
        let mut found = Vec::with_capacity(batch.len());
        for (name, read) in batch {
            match read {
                TaskRead::Found { body, stat } => found.push((name, body, stat)),
                TaskRead::Gone => claimed.push(Claimed::Settled(Outcome::Gone, name)),
                TaskRead::Unreadable(why) => {
                    tracing::warn!(task = %name, reason = %why, "task unreadable: skipped for this run");
                    claimed.push(Claimed::Settled(Outcome::Unreadable, name));
                }
            }
        }
        let queue = self.queue();
        let holds = self.fresh_holds().await;
        let claimed_at = Instant::now();
        let outcomes = match queue.claim_many(&found, &self.now, &holds).await {
            Ok(outcomes) => outcomes,
            // No answer (a dropped link, a leader change): not claimed, as far as we know. Had
            // the claim landed, its leases expire unextended and the tasks run later.
            Err(e) if recovery(&e, queue.session_over()) != Recovery::GiveUp => {
                for (name, ..) in found {
                    tracing::warn!(task = %name, error = %e, "claim got no answer; passed over");
                    claimed.push(Claimed::Settled(Outcome::ClaimFailed, name));
                }
                return Ok(claimed);
            }
            Err(e) => return Err(e),
        };
        for ((name, body, stat), outcome) in found.into_iter().zip(outcomes) {
            let outcome = match outcome {
                None => Claimed::Untried(name, TaskRead::Found { body, stat }),
                Some(ClaimOutcome::Claimed(lease)) => Claimed::Held(Box::new(lease), claimed_at),
                Some(ClaimOutcome::Taken) => Claimed::Settled(Outcome::Conflict, name),
                Some(ClaimOutcome::Gone) => Claimed::Settled(Outcome::Gone, name),
                Some(ClaimOutcome::Paused) => Claimed::Settled(Outcome::Paused, name),
                Some(ClaimOutcome::Limited { retry_in_ms }) => {
                    Claimed::Settled(Outcome::Limited(retry_in_ms), name)
                }
                Some(ClaimOutcome::Cancelled) => Claimed::Settled(Outcome::Cancelled, name),
                Some(ClaimOutcome::GroupBusy { owner }) => {
                    Claimed::Settled(Outcome::GroupBusy(owner), name)
                }
                // A grouped task not due yet stays in its place: moving it would let the rest
                // of its group pass it.
                Some(ClaimOutcome::Backoff { .. }) if crate::task::group_of(&body).is_some() => {
                    Claimed::Settled(Outcome::NotDueInGroup, name)
                }
                Some(ClaimOutcome::Backoff { until_ms }) => {
                    // Not due yet: it waits under `delayed/`, not at the head of the queue.
                    let outcome = match queue.defer(&name, &body, stat.version, until_ms).await? {
                        Deferred::Moved => Outcome::Backoff,
                        Deferred::Taken => Outcome::Conflict,
                        Deferred::Gone => Outcome::Gone,
                    };
                    Claimed::Settled(outcome, name)
                }
                Some(ClaimOutcome::Buried { .. }) => Claimed::Settled(Outcome::DeadLettered, name),
            };
            claimed.push(outcome);
        }
        Ok(claimed)
    }

    /// Runs a claimed task, and settles it unless it succeeded.
    pub(super) async fn run_claimed(&self, mut lease: Lease, claimed_at: Instant) -> Result<Ran> {
        tracing::debug!(task = %lease.task.name, attempt = lease.task.attempt(),
            consumer = %self.queue().consumer_id(), fencing_token = lease.task.fencing_token,
            traceparent = lease.task.envelope.traceparent.as_deref(), "task claimed");
        let name = lease.task.name.clone();
        let started = Instant::now();
        let ended = self.run_handler(&mut lease, claimed_at).await;
        let result = match &ended {
            Ok(HandlerEnd::Finished(result)) => Some(result),
            _ => None,
        };
        let event_type = &lease.task.envelope.event_type;
        crate::telemetry_metrics::handled(
            event_type,
            &self.handler.route_name(event_type),
            crate::telemetry_metrics::outcome(result),
            started.elapsed(),
        );
        // The handler is done (or stopped): its route's slot goes at once, whatever comes next.
        if let Some(slot) = lease.take_slot() {
            self.queue().free_slot(&slot).await;
        }
        let outcome = match ended? {
            HandlerEnd::Finished(Ok(delivered)) => {
                return Ok(Ran::Succeeded(Box::new(lease.delivered(delivered))));
            }
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
