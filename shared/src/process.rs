//! `process_events`' work: claim tasks oldest first, run them, settle them.
//!
//! A run takes a snapshot of the unleased tasks (two list requests), then walks it with up to
//! `concurrency` tasks in flight, each one read, claimed, run and settled: three requests per
//! task. When the snapshot is used up it takes another, until a pass claims nothing, the cap
//! is reached, or the deadline is near.
//!
//! Consumers that start together would all try the oldest task first. A consumer that loses a
//! claim skips a random distance ahead, so after the first collision they spread over the head
//! of the queue instead of trailing each other one task apart. A single consumer never loses,
//! so it claims strictly oldest first.

use std::time::Duration;

use std::collections::HashSet;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::ZkTime;
use crate::handler::{Handler, HandlerError};
use crate::lease;
use crate::queue::{ClaimOutcome, Lease, Queue, Settled};
use crate::{Error, Result};

/// What a run may do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Claim at most this many tasks.
    pub max_tasks: u32,
    /// Tasks in flight at once.
    pub concurrency: usize,
    /// When the invocation must have returned.
    pub deadline: Instant,
    /// Stop claiming this long before the deadline; unfinished handlers are stopped and their
    /// tasks released half of it before.
    pub margin: Duration,
}

/// What a run did: the function's response and its one summary log event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessReport {
    pub consumer_id: String,
    pub claimed: u32,
    pub completed: u32,
    pub retried: u32,
    pub dead_lettered: u32,
    /// Claims lost to another consumer.
    pub lease_conflicts: u32,
    /// Tasks whose lease passed on while we held them; our writes were refused.
    pub leases_lost: u32,
    /// Tasks skipped because their retry backoff has not ended.
    pub in_backoff: u32,
    /// Tasks released unfinished because the deadline was near.
    pub released_at_deadline: u32,
    /// Tasks pending after the run, leased ones included.
    pub remaining_depth: usize,
    pub duration_ms: u64,
}

/// How one task ended, for the report.
#[derive(Debug)]
enum Outcome {
    Completed,
    Retried,
    DeadLettered,
    Conflict,
    LeaseLost,
    Backoff(String),
    Gone,
    Deadline,
}

/// Runs up to `options.max_tasks` tasks with `handler`.
pub async fn run<H: Handler>(
    queue: &Queue,
    handler: &H,
    options: &RunOptions,
) -> Result<ProcessReport> {
    run_until(queue, handler, options, &watch::channel(false).1).await
}

/// As [`run`], and stops early when `stop` turns true: no more claims, and tasks in flight
/// get `options.margin` to finish before they are released.
pub async fn run_until<H: Handler>(
    queue: &Queue,
    handler: &H,
    options: &RunOptions,
    stop: &watch::Receiver<bool>,
) -> Result<ProcessReport> {
    let started = Instant::now();
    let mut report = ProcessReport {
        consumer_id: queue.consumer_id().to_string(),
        ..Default::default()
    };
    let run = Run {
        queue,
        handler,
        options,
        now: queue.server_time().await?,
        stop,
    };
    // Tasks found in backoff are not read again in this run.
    let mut waiting = HashSet::new();
    loop {
        let snapshot = queue.snapshot().await?;
        let candidates: Vec<String> = snapshot
            .candidates
            .into_iter()
            .filter(|c| !waiting.contains(c))
            .collect();
        if candidates.is_empty() {
            break;
        }
        let claimed_before = report.claimed;
        run.pass(candidates, &mut report, &mut waiting).await?;
        if report.claimed == claimed_before || !may_claim(&report, options) || *stop.borrow() {
            break;
        }
    }
    report.remaining_depth = queue.count(&queue.layout().tasks()).await?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(
        consumer = %report.consumer_id,
        claimed = report.claimed,
        completed = report.completed,
        retried = report.retried,
        dead_lettered = report.dead_lettered,
        lease_conflicts = report.lease_conflicts,
        leases_lost = report.leases_lost,
        in_backoff = report.in_backoff,
        released_at_deadline = report.released_at_deadline,
        remaining_depth = report.remaining_depth,
        duration_ms = report.duration_ms,
        "process_events finished"
    );
    Ok(report)
}

fn may_claim(report: &ProcessReport, options: &RunOptions) -> bool {
    report.claimed < options.max_tasks && Instant::now() + options.margin < options.deadline
}

/// One run's fixed parts.
struct Run<'a, H> {
    queue: &'a Queue,
    handler: &'a H,
    options: &'a RunOptions,
    now: ZkTime,
    stop: &'a watch::Receiver<bool>,
}

impl<H: Handler> Run<'_, H> {
    /// May another task be started, with `in_flight` running?
    fn may_start(&self, report: &ProcessReport, in_flight: usize) -> bool {
        let options = self.options;
        !*self.stop.borrow()
            && in_flight < options.concurrency
            && report.claimed + (in_flight as u32) < options.max_tasks
            && Instant::now() + options.margin < options.deadline
    }

    /// One walk over a snapshot.
    async fn pass(
        &self,
        candidates: Vec<String>,
        report: &mut ProcessReport,
        waiting: &mut HashSet<String>,
    ) -> Result<()> {
        let mut cursor = Cursor::new(candidates, self.options.concurrency);
        let mut in_flight = FuturesUnordered::new();
        let mut first_error: Option<Error> = None;
        loop {
            while first_error.is_none() && self.may_start(report, in_flight.len()) {
                let Some(name) = cursor.next() else { break };
                in_flight.push(self.process_one(name));
            }
            let Some(done) = in_flight.next().await else {
                break;
            };
            match done {
                Ok((outcome, claimed)) => {
                    report.claimed += claimed as u32;
                    match &outcome {
                        Outcome::Conflict => cursor.lost_race(),
                        Outcome::Backoff(name) => {
                            waiting.insert(name.clone());
                        }
                        _ => {}
                    }
                    count(report, outcome);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Claims, runs and settles one task; the bool says whether it was claimed.
    async fn process_one(&self, name: String) -> Result<(Outcome, bool)> {
        let (queue, options) = (self.queue, self.options);
        let lease = match queue.claim(&name, &self.now).await? {
            ClaimOutcome::Claimed(lease) => lease,
            ClaimOutcome::Taken => return Ok((Outcome::Conflict, false)),
            ClaimOutcome::Gone => return Ok((Outcome::Gone, false)),
            ClaimOutcome::Backoff { .. } => return Ok((Outcome::Backoff(name), false)),
            ClaimOutcome::Buried { .. } => return Ok((Outcome::DeadLettered, false)),
        };
        tracing::debug!(task = %name, attempt = lease.task.attempt(), consumer = %queue.consumer_id(),
            fencing_token = lease.task.fencing_token, "task claimed");
        let limits = Limits {
            stop_at: options.deadline - options.margin / 2,
            grace: options.margin,
            stop: self.stop.clone(),
        };
        Ok((
            run_claimed(queue, self.handler, lease, &self.now, limits).await?,
            true,
        ))
    }
}
fn count(report: &mut ProcessReport, outcome: Outcome) {
    let field = match outcome {
        Outcome::Completed => &mut report.completed,
        Outcome::Retried => &mut report.retried,
        Outcome::DeadLettered => &mut report.dead_lettered,
        Outcome::Conflict => &mut report.lease_conflicts,
        Outcome::LeaseLost => &mut report.leases_lost,
        Outcome::Backoff(_) => &mut report.in_backoff,
        Outcome::Deadline => &mut report.released_at_deadline,
        Outcome::Gone => return,
    };
    *field += 1;
}

/// When a running handler must give up its task.
struct Limits {
    /// The deadline, less half the margin for releasing.
    stop_at: Instant,
    /// After a stop signal, how long the handler may still take.
    grace: Duration,
    stop: watch::Receiver<bool>,
}

/// Runs a claimed task's handler, extending the lease meanwhile, and settles the task.
async fn run_claimed<H: Handler>(
    queue: &Queue,
    handler: &H,
    mut lease: Lease,
    now: &ZkTime,
    limits: Limits,
) -> Result<Outcome> {
    let Limits {
        stop_at,
        grace,
        stop,
    } = limits;
    let every = lease::extend_interval(queue.lease_timeout());
    let mut extend = tokio::time::interval_at(Instant::now() + every, every);
    let task = lease.task.clone();
    let work = handler.handle(&task);
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            result = &mut work => break Some(result),
            _ = extend.tick() => {
                if queue.extend(&mut lease).await? == Settled::LeaseLost {
                    tracing::warn!(task = %task.name, fencing_token = task.fencing_token, "lease lost while running");
                    return Ok(Outcome::LeaseLost);
                }
            }
            _ = tokio::time::sleep_until(stop_at) => break None,
            _ = stopped(stop.clone()) => {
                let until = stop_at.min(Instant::now() + grace);
                break tokio::time::timeout_at(until, &mut work).await.ok();
            }
        }
    };
    settle(queue, lease, result, now).await
}

async fn settle(
    queue: &Queue,
    lease: Lease,
    result: Option<Result<(), HandlerError>>,
    now: &ZkTime,
) -> Result<Outcome> {
    let (name, attempt) = (lease.task.name.clone(), lease.task.attempt());
    let (settled, outcome) = match result {
        Some(Ok(())) => (queue.complete(lease).await?, Outcome::Completed),
        None => {
            let why = Some("released unfinished at the invocation's deadline".to_string());
            (
                queue
                    .release(lease, why, Duration::ZERO, now, false)
                    .await?,
                Outcome::Deadline,
            )
        }
        Some(Err(HandlerError::Permanent(e))) => (
            queue.bury(lease, "permanent failure", Some(e)).await?,
            Outcome::DeadLettered,
        ),
        Some(Err(HandlerError::Retryable(e))) if attempt >= queue.max_attempts() => {
            let reason = format!("gave up after {attempt} attempts");
            (
                queue.bury(lease, &reason, Some(e)).await?,
                Outcome::DeadLettered,
            )
        }
        Some(Err(HandlerError::Retryable(e))) => {
            let delay = queue.backoff(attempt);
            tracing::info!(task = %name, attempt, error = %e, backoff_ms = delay.as_millis() as u64, "task will be retried");
            (
                queue.release(lease, Some(e), delay, now, true).await?,
                Outcome::Retried,
            )
        }
    };
    Ok(match settled {
        Settled::Done => outcome,
        Settled::LeaseLost => {
            tracing::warn!(task = %name, attempt, "lease lost before settling; nothing changed");
            Outcome::LeaseLost
        }
    })
}

/// Resolves once `stop` is true; never, if its sender is gone while it is false.
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Walks a snapshot; after a lost race jumps a random distance ahead.
struct Cursor {
    names: std::vec::IntoIter<String>,
    jump: usize,
}

impl Cursor {
    fn new(names: Vec<String>, concurrency: usize) -> Self {
        Cursor {
            names: names.into_iter(),
            jump: concurrency.max(1) * 2,
        }
    }

    fn next(&mut self) -> Option<String> {
        self.names.next()
    }

    fn lost_race(&mut self) {
        let skip = fastrand::usize(0..=self.jump);
        if skip > 0 {
            self.names.nth(skip - 1);
        }
    }
}
