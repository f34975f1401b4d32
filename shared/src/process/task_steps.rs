//! One task's steps within a pass: claimed in batches (it was read already), its handler run
//! while its lease is extended ([`super::hold`]), and settled: a failure retried or buried, a
//! success completed in a batch by the pass.
//!
//! Every write of a holder (complete, release, bury, and the extensions in `hold`) goes
//! through one retry loop ([`super::send`]). A settling write ends by the run's settling
//! deadline: what is not settled by then is left to the reaper and counted as unsettled.
//!
//! A repeat that finds its work already done ([`Settled::Gone`]) means the first try landed and
//! only its reply was lost: that is the outcome, not "lease lost".
//!
//! # Under faults
//!
//! What a holder does when the network, ZooKeeper or the clock does not cooperate (the tests are
//! in `tests/queue/holding.rs`):
//!
//! - **One retry loop.** After a dropped link a write is sent again after a pause (half a second
//!   when settling, a twelfth of the timeout when extending). When the session is over, a run
//!   that has a `Session` (the functions, the worker) opens a new one and sends the write there:
//!   leases are persistent znodes and outlive sessions, so a task whose handler succeeded is
//!   completed, not left to wait out its lease and run again. Any other failure is the write's
//!   error. The loop ends at its deadline: the settling deadline, or, for an extension, the end of
//!   the time the holder can vouch for (`hold`). Fencing makes every repeat safe.
//! - **Lost replies.** An extension that landed but whose reply was lost leaves the holder with an
//!   old lease version; its later writes read the lease again and, when it is still theirs, send
//!   again at its version (`queue::holder`).
//! - **Deadlines.** A run stops claiming when less than `DEADLINE_MARGIN_MS` is left, stops
//!   handlers when half of it is left, and gives up its settling writes (and the final count) a
//!   quarter of it before the deadline: a task not settled by then is counted `unsettled` and left
//!   to the reaper, and the run still returns its report in time. On Lambda the deadline comes
//!   from the invocation; where there is none (Vercel, the CLI) or it is implausible (`cargo
//!   lambda watch` sends one in 1970), `TIME_BUDGET_MS` applies.
//! - **Interruptions.** A handler stopped at half the margin has its task released without
//!   counting the attempt and without backoff: the run ran out of time, the task did nothing
//!   wrong. Each such stop raises the envelope's `interruptions`; at `MAX_INTERRUPTIONS` (3) the
//!   task goes to the dead letters ("did not finish within a run's time") instead of taking every
//!   run's budget forever. A stop by the worker's shutdown signal does not count, and a run that
//!   recorded a step of the task (or its checkpoint) made progress: it sets `interruptions` back
//!   to 0, so only runs in a row without progress count.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::Run;
use super::hold::HandlerEnd;
use super::send::Sent;
use crate::clock::ZkTime;
use crate::error::Result;
use crate::handler::{Handler, HandlerError};
use crate::queue::{
    Burial, CANCELLED, Deferred, GiveBack, Lease, Queue, Settled, TaskOutcome, TaskRead,
};
use crate::queue::{Recovery, recovery};

/// How a task's claim and run ended.
pub(super) enum Ran {
    /// Settled already (or never claimed): how, whether it was claimed, and the task's name.
    Settled(TaskOutcome, bool, String),
    /// The handler succeeded; the task waits to be completed with others.
    Succeeded(Box<Lease>),
}

/// What came of a batch of claims.
pub(super) struct Claims {
    /// When the claim went out: a task's run is timed from it.
    pub(super) at: Instant,
    /// Each task tried: ours to run ([`TaskOutcome::Claimed`]), or why not.
    pub(super) outcomes: Vec<(String, TaskOutcome)>,
    /// The tasks not tried, as they were read: a claim before them in the batch lost a race.
    pub(super) untried: Vec<(String, TaskRead)>,
}

impl<H: Handler> Run<'_, H> {
    /// Claims a batch of tasks that were read, in one multi-op; those gone or unreadable
    /// since are settled without a request, those in backoff are moved aside.
    pub(super) async fn claim_batch(&self, batch: Vec<(String, TaskRead)>) -> Result<Claims> {
        let mut claims = Claims {
            at: Instant::now(),
            outcomes: Vec::with_capacity(batch.len()),
            untried: Vec::new(),
        };
        let mut found = Vec::with_capacity(batch.len());
        for (name, read) in batch {
            match read {
                TaskRead::Found { body, stat } => found.push((name, body, stat)),
                TaskRead::Gone => claims.outcomes.push((name, TaskOutcome::Gone)),
                TaskRead::Unreadable(why) => {
                    tracing::warn!(task = %name, reason = %why, "task unreadable: skipped for this run");
                    claims.outcomes.push((name, TaskOutcome::Unreadable));
                }
            }
        }
        let queue = self.queue();
        let restraints = self.fresh_restraints().await;
        claims.at = Instant::now();
        let outcomes = match queue.claim_many(&found, &self.now, &restraints).await {
            Ok(outcomes) => outcomes,
            // No answer (a dropped link, a leader change): not claimed, as far as we know. Had
            // the claim landed, its leases expire unextended and the tasks run later.
            Err(e) if recovery(&e, queue.session_over()) != Recovery::GiveUp => {
                for (name, ..) in found {
                    tracing::warn!(task = %name, error = %e, "claim got no answer; passed over");
                    claims.outcomes.push((name, TaskOutcome::ClaimFailed));
                }
                return Ok(claims);
            }
            Err(e) => return Err(e),
        };
        for ((name, body, stat), outcome) in found.into_iter().zip(outcomes) {
            let outcome = match outcome {
                None => {
                    claims.untried.push((name, TaskRead::Found { body, stat }));
                    continue;
                }
                // A grouped task not due yet stays in its place: moving it would let the rest
                // of its group pass it.
                Some(TaskOutcome::Backoff { .. }) if crate::task::group_of(&body).is_some() => {
                    TaskOutcome::InPlace
                }
                // Not due yet: it waits under `delayed/`, not at the head of the queue.
                Some(TaskOutcome::Backoff { until_ms }) => {
                    match queue
                        .delays()
                        .defer(&name, &body, stat.version, until_ms)
                        .await?
                    {
                        Deferred::Moved => TaskOutcome::Backoff { until_ms },
                        Deferred::Taken => TaskOutcome::Taken,
                        Deferred::Gone => TaskOutcome::Gone,
                    }
                }
                Some(outcome) => outcome,
            };
            claims.outcomes.push((name, outcome));
        }
        Ok(claims)
    }

    /// Runs a claimed task, and settles it unless it succeeded.
    pub(super) async fn run_claimed(&self, mut lease: Lease, claimed_at: Instant) -> Result<Ran> {
        tracing::debug!(task = %lease.task.name, attempt = lease.task.attempt(),
            consumer = %self.queue().consumer_id(), run = %self.id,
            fencing_token = lease.task.fencing_token,
            traceparent = lease.task.envelope.traceparent.as_deref(), "task claimed");
        let name = lease.task.name.clone();
        if let Some(again) = lease.task.steps.suspended_until(self.now.now_ms()) {
            return self.suspend_again(lease, again).await;
        }
        if let Some(failed) = self.read_back(&lease).await {
            self.queue().gates().free_slots(&lease.take_slots()).await;
            let outcome = match failed {
                HandlerError::Permanent(why) => self.bury(lease, &why, None).await?,
                other => self.settle_failure(lease, other).await?,
            };
            return Ok(Ran::Settled(outcome, true, name));
        }
        let started = Instant::now();
        let span = crate::traces::attempt_span(self.queue().layout().root(), &lease.task);
        let ended = (self.run_handler(&mut lease, claimed_at))
            .instrument(span.clone())
            .await;
        // Before its places are freed: whatever the handler sent is given up on by now (the
        // contract checker reads this line to know when a request stopped counting).
        tracing::debug!(task = %name, fencing_token = lease.task.fencing_token, "handler ended");
        if let Ok(HandlerEnd::Finished(result)) = &ended {
            let suspended = matches!(result, Err(HandlerError::Suspended));
            lease.task.steps.check_returned(suspended);
        }
        // A resumable handler that cannot go on (a non-deterministic resume, a record over
        // its cap, a suspension swallowed) fails loudly, whatever it returned.
        let ended = match (ended, lease.task.steps.failed()) {
            (Ok(HandlerEnd::Finished(_)), Some(reason)) => {
                Ok(HandlerEnd::Finished(Err(HandlerError::Permanent(reason))))
            }
            (ended, _) => ended,
        };
        let failure = super::attempt_trace::failure(&ended);
        let result = match &ended {
            Ok(HandlerEnd::Finished(result)) => Some(result),
            _ => None,
        };
        let event_type = &lease.task.envelope.event_type;
        crate::run_metrics::handled(
            event_type,
            &self.handler.route_name(event_type),
            crate::run_metrics::outcome(result),
            started.elapsed(),
        );
        // The handler is done (or stopped): its places (in its route's gate, its key's) are
        // freed at once, whatever comes next; a task that succeeded keeps them for its
        // completion's multi-op, sent right after, which frees them with it.
        if !matches!(ended, Ok(HandlerEnd::Finished(Ok(_)))) {
            self.queue().gates().free_slots(&lease.take_slots()).await;
        }
        let outcome = match ended? {
            HandlerEnd::Finished(Ok(delivered)) => {
                return Ok(Ran::Succeeded(Box::new(lease.delivered(delivered))));
            }
            HandlerEnd::Finished(Err(HandlerError::Suspended)) => self.suspend(lease).await?,
            HandlerEnd::Finished(Err(HandlerError::Permanent(e)))
                if lease.task.steps.failed().as_ref() == Some(&e) =>
            {
                self.bury(lease, &e, None).await?
            }
            HandlerEnd::Finished(Err(e)) => self.settle_failure(lease, e).await?,
            HandlerEnd::Interrupted { deadline } => {
                self.release_unfinished(lease, deadline).await?
            }
            HandlerEnd::LeaseLost => TaskOutcome::LeaseLost,
            HandlerEnd::Unvouched => TaskOutcome::Abandoned,
        };
        super::attempt_trace::record(&span, failure, &outcome);
        Ok(Ran::Settled(outcome, true, name))
    }

    /// Reads back the record's entries stored in step znodes ([`crate::resume::store`]), once
    /// per claim: the handler's replay needs them all, so this costs one read per stored write
    /// (pipelined), and the steps this run records later stay in its memory. What keeps the
    /// handler from running: the znodes not read (retried) or not whole (buried).
    async fn read_back(&self, lease: &Lease) -> Option<HandlerError> {
        let steps = &lease.task.steps;
        let stored = steps.to_read_back();
        if stored == 0 {
            return None;
        }
        let id = &lease.task.envelope.id;
        match self.queue().read_steps(id, stored).await {
            Ok(Ok(earlier)) => {
                steps.read_back(earlier);
                None
            }
            Ok(Err(why)) => Some(HandlerError::Permanent(format!(
                "the record's step znodes do not read back: {why}"
            ))),
            Err(e) => Some(HandlerError::Retryable(format!(
                "the record's step znodes were not read: {e}"
            ))),
        }
    }

    /// Releases a task whose handler was stopped, without counting the attempt. A stop at the
    /// deadline counts as an interruption, unless the run recorded a step of the task (or its
    /// checkpoint): that run made progress, and the count starts again. At
    /// `MAX_INTERRUPTIONS` in a row the task goes to the dead letters instead of taking every
    /// run's time again.
    async fn release_unfinished(&self, mut lease: Lease, deadline: bool) -> Result<TaskOutcome> {
        if deadline {
            let progressed = lease.task.steps.progressed();
            let envelope = &mut lease.task.envelope;
            envelope.interruptions = match progressed {
                true => 0,
                false => envelope.interruptions + 1,
            };
            let interruptions = envelope.interruptions;
            tracing::info!(task = %lease.task.name, run = %self.id, progressed, interruptions,
                steps_done = lease.task.steps.steps_done(), "cut at the run's deadline");
            if interruptions >= self.queue().settings().max_interruptions {
                let reason = format!("did not finish within a run's time, {interruptions} times");
                return self.bury(lease, &reason, None).await;
            }
        }
        let why = Some("released unfinished: the run had to stop".to_string());
        self.release(lease, why, Duration::ZERO, false, TaskOutcome::Deadline)
            .await
    }
}

impl<H> Run<'_, H> {
    /// Settles a task whose handler failed: retry with backoff, or bury.
    pub(super) async fn settle_failure(
        &self,
        lease: Lease,
        error: HandlerError,
    ) -> Result<TaskOutcome> {
        let name = lease.task.name.clone();
        let attempt = lease.task.attempt();
        let (e, at_least) = match error {
            HandlerError::Permanent(e) => {
                return self.bury(lease, "permanent failure", Some(e)).await;
            }
            HandlerError::Suspended => return self.suspend(lease).await,
            HandlerError::Retryable(e) => (e, Duration::ZERO),
            HandlerError::RetryAfter { error, after } => (error, after),
        };
        let queue = self.queue();
        if attempt >= queue.settings().max_attempts {
            let reason = format!("gave up after {attempt} attempts");
            return self.bury(lease, &reason, Some(e)).await;
        }
        let delay = (queue.settings())
            .backoff(attempt)
            .max(at_least)
            .min(queue.settings().backoff_max);
        let traceparent = lease.task.envelope.traceparent.as_deref();
        tracing::info!(task = %name, attempt, error = %e, backoff_ms = delay.as_millis() as u64,
            traceparent, "task will be retried");
        // Without a delay (a zero backoff) the task stays where it is.
        let done = if delay.is_zero() {
            TaskOutcome::RetriedInPlace
        } else {
            TaskOutcome::Retried
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
    ) -> Result<TaskOutcome> {
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
            TaskOutcome::Cancelled
        } else {
            TaskOutcome::DeadLettered {
                reason: reason.to_string(),
            }
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
        done: TaskOutcome,
    ) -> Result<TaskOutcome> {
        let name = lease.task.name.clone();
        let now: ZkTime = self.now;
        let release = |queue: Queue| {
            let (lease, error) = (lease.clone(), error.clone());
            async move {
                let back = GiveBack::after(error, delay, &now, count_attempt);
                queue.release(lease, back).await
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
pub(super) fn outcome(sent: Sent<Settled>, done: TaskOutcome, name: &str) -> TaskOutcome {
    match sent {
        Sent::Unsettled => {
            tracing::warn!(task = %name, "not settled before the deadline: left to the reaper");
            TaskOutcome::Unsettled
        }
        Sent::Answered(settled, resent) => TaskOutcome::settled_as(settled, resent, done, name),
    }
}
