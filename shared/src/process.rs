//! `process_events`' work: claim tasks oldest first, run them, settle them.
//!
//! A run takes a snapshot of the unleased tasks (two list requests), then walks it with up to
//! `concurrency` tasks in flight. Tasks are read 32 to a request ahead of their claims; each is
//! claimed (one multi-op), run, and settled; tasks whose handlers succeed together are
//! completed together in one multi-op. When the snapshot is used up the run takes another,
//! until a pass claims nothing, the cap is reached, or the deadline is near. A scheduled run of
//! one task makes three requests for it: read, claim, complete.
//!
//! Consumers that start together would all try the oldest task first. A consumer that loses a
//! claim skips a random distance ahead, so after the first collision they spread over the head
//! of the queue instead of trailing each other one task apart. A single consumer never loses,
//! so it claims strictly oldest first.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

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
    run_refilling(queue, handler, options, stop, None).await
}

/// As [`run_until`]; and when `refill` is given, a pass that has run out of candidates while
/// tasks are still in flight waits for `refill` to be notified (the worker notifies it on every
/// change under `tasks/`) and takes a new snapshot, so a task published meanwhile need not wait
/// for the slowest task in flight.
pub async fn run_refilling<H: Handler>(
    queue: &Queue,
    handler: &H,
    options: &RunOptions,
    stop: &watch::Receiver<bool>,
    refill: Option<&Notify>,
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
        refill,
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
    /// When set, a pass short of candidates waits on it for a new snapshot.
    refill: Option<&'a Notify>,
}

/// Tasks read in one request, at most.
const READ_BATCH: usize = 32;
/// Tasks completed in one multi-op, at most.
const COMPLETE_BATCH: usize = 32;

type Read = Option<(Vec<u8>, zk::Stat)>;

/// What the jobs of a pass report back.
enum Event {
    /// A batch of tasks read ahead of their claims.
    Read(Result<Vec<(String, Read)>>),
    /// A new snapshot's candidates, taken after a refill notification.
    Refilled(Result<Vec<String>>),
    /// A task's claim and run ended.
    Ran(Result<Ran>),
    /// A batch of completions was committed.
    Completed(usize, Result<Vec<(String, Settled)>>),
}

/// How a task's claim and run ended.
enum Ran {
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

type Job<'a> = Pin<Box<dyn Future<Output = Event> + Send + 'a>>;

/// Counts of a pass's tasks between start and settlement.
#[derive(Default)]
struct InFlight {
    /// Started: being read, claimed or run.
    running: usize,
    /// Handler done, completion not yet committed.
    completing: usize,
    /// A read-ahead request is out.
    reading: bool,
    /// A refill job waits for a notification.
    refilling: bool,
}

impl<H: Handler> Run<'_, H> {
    /// How many more tasks may start now.
    fn room(&self, report: &ProcessReport, flight: &InFlight) -> usize {
        let options = self.options;
        if *self.stop.borrow() || Instant::now() + options.margin >= options.deadline {
            return 0;
        }
        let by_concurrency = options
            .concurrency
            .saturating_sub(flight.running + flight.completing);
        let by_budget =
            (options.max_tasks as usize).saturating_sub(report.claimed as usize + flight.running);
        by_concurrency.min(by_budget)
    }

    /// One walk over a snapshot: tasks are read in batches, claimed and run one by one (up
    /// to the concurrency), and those that succeeded together are completed together.
    async fn pass(
        &self,
        candidates: Vec<String>,
        report: &mut ProcessReport,
        waiting: &mut HashSet<String>,
    ) -> Result<()> {
        let mut cursor = Cursor::new(candidates, self.options.concurrency);
        let mut ready: VecDeque<(String, Read)> = VecDeque::new();
        let mut jobs: FuturesUnordered<Job<'_>> = FuturesUnordered::new();
        let mut flight = InFlight::default();
        let mut first_error: Option<Error> = None;
        // Names taken from the cursor in this pass: a refill does not hand them out again.
        let mut seen: HashSet<String> = HashSet::new();
        loop {
            while first_error.is_none() {
                let room = self.room(report, &flight);
                if room == 0 {
                    break;
                }
                if let Some((name, read)) = ready.pop_front() {
                    flight.running += 1;
                    jobs.push(Box::pin(async move {
                        Event::Ran(self.run_task(name, read).await)
                    }));
                } else if !flight.reading {
                    // Read a whole batch ahead, not just what fits now: slots free up one by
                    // one, and one read per free slot would cost a request per task.
                    let budget = (self.options.max_tasks as usize)
                        .saturating_sub(report.claimed as usize + flight.running);
                    let batch = cursor.take(budget.min(READ_BATCH).max(room.min(1)));
                    if batch.is_empty() {
                        if let Some(notify) = self.refill.filter(|_| !flight.refilling) {
                            flight.refilling = true;
                            jobs.push(Box::pin(async move {
                                notify.notified().await;
                                Event::Refilled(self.queue.snapshot().await.map(|s| s.candidates))
                            }));
                        }
                        break;
                    }
                    seen.extend(batch.iter().cloned());
                    flight.reading = true;
                    jobs.push(Box::pin(async move {
                        let reads = self.queue.read_tasks(&batch).await;
                        Event::Read(reads.map(|reads| batch.into_iter().zip(reads).collect()))
                    }));
                    break;
                } else {
                    break;
                }
            }
            // Only a refill job left: nothing is in flight, the pass is over.
            if jobs.len() == flight.refilling as usize {
                break;
            }
            let Some(event) = jobs.next().await else {
                break;
            };
            let mut succeeded = Vec::new();
            let mut events = vec![event];
            while let Some(Some(more)) = jobs.next().now_or_never() {
                events.push(more);
            }
            for event in events {
                let error = match event {
                    Event::Read(reads) => {
                        flight.reading = false;
                        reads.map(|reads| ready.extend(reads)).err()
                    }
                    Event::Refilled(candidates) => {
                        flight.refilling = false;
                        candidates
                            .map(|names| {
                                let fresh = names
                                    .into_iter()
                                    .filter(|n| !seen.contains(n) && !waiting.contains(n));
                                cursor.extend(fresh);
                            })
                            .err()
                    }
                    Event::Ran(ran) => {
                        flight.running -= 1;
                        match ran {
                            Ok(Ran::Succeeded(lease)) => {
                                report.claimed += 1;
                                flight.completing += 1;
                                succeeded.push(*lease);
                                None
                            }
                            Ok(Ran::Settled(outcome, claimed)) => {
                                report.claimed += claimed as u32;
                                match &outcome {
                                    Outcome::Conflict => cursor.lost_race(),
                                    Outcome::Backoff(name) => {
                                        waiting.insert(name.clone());
                                    }
                                    _ => {}
                                }
                                count(report, outcome);
                                None
                            }
                            Err(e) => Some(e),
                        }
                    }
                    Event::Completed(n, settled) => {
                        flight.completing -= n;
                        settled
                            .map(|settled| count_completions(report, settled))
                            .err()
                    }
                };
                if let Some(e) = error {
                    first_error.get_or_insert(e);
                }
            }
            while !succeeded.is_empty() {
                let batch: Vec<Lease> = succeeded
                    .drain(..succeeded.len().min(COMPLETE_BATCH))
                    .collect();
                let n = batch.len();
                jobs.push(Box::pin(async move {
                    let complete = || self.queue.complete_many(batch.clone());
                    Event::Completed(n, retry_transient(complete).await)
                }));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Claims a task that was read, runs it, and settles it unless it succeeded.
    async fn run_task(&self, name: String, read: Read) -> Result<Ran> {
        let queue = self.queue;
        let Some((body, stat)) = read else {
            return Ok(Ran::Settled(Outcome::Gone, false));
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
            HandlerEnd::Interrupted => {
                let why = Some("released unfinished: the run had to stop".to_string());
                let release =
                    || queue.release(lease.clone(), why.clone(), Duration::ZERO, &self.now, false);
                let released = retry_transient(release).await?;
                if released == Settled::Done {
                    Outcome::Deadline
                } else {
                    Outcome::LeaseLost
                }
            }
            HandlerEnd::LeaseLost => Outcome::LeaseLost,
        };
        Ok(Ran::Settled(outcome, true))
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

fn count_completions(report: &mut ProcessReport, settled: Vec<(String, Settled)>) {
    for (_, settled) in settled {
        count(
            report,
            if settled == Settled::Done {
                Outcome::Completed
            } else {
                Outcome::LeaseLost
            },
        );
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

/// Settles a task whose handler failed: retry with backoff, or bury.
async fn settle_failure(
    queue: &Queue,
    lease: Lease,
    error: HandlerError,
    now: &ZkTime,
) -> Result<Outcome> {
    let (name, attempt) = (lease.task.name.clone(), lease.task.attempt());
    let (e, at_least) = match error {
        HandlerError::Permanent(e) => {
            let settled =
                retry_transient(|| queue.bury(lease.clone(), "permanent failure", Some(e.clone())))
                    .await?;
            return Ok(lost_or(settled, Outcome::DeadLettered, &name));
        }
        HandlerError::Retryable(e) => (e, Duration::ZERO),
        HandlerError::RetryAfter { error, after } => (error, after),
    };
    if attempt >= queue.max_attempts() {
        let reason = format!("gave up after {attempt} attempts");
        let settled =
            retry_transient(|| queue.bury(lease.clone(), &reason, Some(e.clone()))).await?;
        return Ok(lost_or(settled, Outcome::DeadLettered, &name));
    }
    let delay = queue
        .backoff(attempt)
        .max(at_least)
        .min(queue.backoff_max());
    tracing::info!(task = %name, attempt, error = %e, backoff_ms = delay.as_millis() as u64, "task will be retried");
    let settled =
        retry_transient(|| queue.release(lease.clone(), Some(e.clone()), delay, now, true)).await?;
    Ok(lost_or(settled, Outcome::Retried, &name))
}

/// Sends a settling write once more after a transient failure (a dropped connection). Fencing
/// makes the repeat safe; giving up would leave the lease held until it expires and the task
/// run again.
async fn retry_transient<T, F, Fut>(mut write: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match write().await {
        Err(e) if e.is_transient() => {
            tracing::warn!(error = %e, "settling failed on a dropped connection; trying once more");
            tokio::time::sleep(Duration::from_millis(500)).await;
            write().await
        }
        result => result,
    }
}

fn lost_or(settled: Settled, outcome: Outcome, name: &str) -> Outcome {
    if settled == Settled::LeaseLost {
        tracing::warn!(task = %name, "lease lost before settling; nothing changed");
        return Outcome::LeaseLost;
    }
    outcome
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

    fn take(&mut self, n: usize) -> Vec<String> {
        self.names.by_ref().take(n).collect()
    }

    /// Appends names after the ones left.
    fn extend(&mut self, more: impl Iterator<Item = String>) {
        let names: Vec<String> = self.names.by_ref().chain(more).collect();
        self.names = names.into_iter();
    }

    /// Never skips the last name: a short snapshot is not given up on after one lost race.
    fn lost_race(&mut self) {
        let skip = fastrand::usize(0..=self.jump.min(self.names.len().saturating_sub(1)));
        if skip > 0 {
            self.names.nth(skip - 1);
        }
    }
}
