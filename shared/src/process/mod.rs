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

mod cursor;
mod pass;
mod report;
mod settle;
mod task;

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub use report::ProcessReport;

use crate::clock::ZkTime;
use crate::error::Result;
use crate::handler::Handler;
use crate::queue::Queue;
use pass::Pass;

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
        Pass::new(&run, candidates, &mut report, &mut waiting)
            .drive()
            .await?;
        if report.claimed == claimed_before || !may_claim(&report, options) || *stop.borrow() {
            break;
        }
    }
    report.remaining_depth = queue.count(&queue.layout().tasks()).await?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.log();
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

/// Resolves once `stop` is true; never, if its sender is gone while it is false.
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
