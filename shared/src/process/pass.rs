//! One pass over a snapshot, as a small state machine. Each turn of its loop takes four named
//! steps:
//!
//! 1. [`Pass::start`]: fill the free slots: run tasks already read, else read a batch ahead,
//!    else (worker only) wait for a refill notification;
//! 2. [`Pass::next_events`]: wait for the next job to end, and take every other that has;
//! 3. [`Pass::apply`]: account for each event in the report and the in-flight counts;
//! 4. [`Pass::complete`]: send the tasks that succeeded together as one completion.
//!
//! The pass ends when nothing is in flight and nothing more may start.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::Run;
use super::cursor::Cursor;
use super::report::{Outcome, ProcessReport};
use super::settle::Sent;
use super::task::Ran;
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::queue::{Lease, Queue, Settled, TaskRead};

/// Tasks read in one request, at most.
const READ_BATCH: usize = 32;
/// Tasks completed in one multi-op, at most.
const COMPLETE_BATCH: usize = 32;

/// What the jobs of a pass report back.
enum Event {
    /// A batch of tasks read ahead of their claims.
    Read(Result<Vec<(String, TaskRead)>>),
    /// A new snapshot's candidates, taken after a refill notification.
    Refilled(Result<Vec<String>>),
    /// A task's claim and run ended.
    Ran(Result<Ran>),
    /// A batch of completions was sent: their leases, and what came of them.
    Completed(Vec<String>, Result<Sent<Vec<(String, Settled)>>>),
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

/// A pass's state.
pub(super) struct Pass<'r, 'a, H> {
    run: &'r Run<'a, H>,
    report: &'r mut ProcessReport,
    /// Tasks found in backoff or unreadable: not read again in this run.
    waiting: &'r mut HashSet<String>,
    cursor: Cursor,
    /// Tasks read, waiting for a free slot.
    ready: VecDeque<(String, TaskRead)>,
    jobs: FuturesUnordered<Job<'r>>,
    flight: InFlight,
    first_error: Option<Error>,
    /// Names taken from the cursor in this pass: a refill does not hand them out again.
    seen: HashSet<String>,
}

impl<'r, 'a, H: Handler> Pass<'r, 'a, H> {
    pub(super) fn new(
        run: &'r Run<'a, H>,
        candidates: Vec<String>,
        report: &'r mut ProcessReport,
        waiting: &'r mut HashSet<String>,
    ) -> Self {
        Pass {
            cursor: Cursor::new(candidates, run.options.concurrency),
            run,
            report,
            waiting,
            ready: VecDeque::new(),
            jobs: FuturesUnordered::new(),
            flight: InFlight::default(),
            first_error: None,
            seen: HashSet::new(),
        }
    }

    /// Runs the pass to its end; the first error of any job is the pass's error.
    pub(super) async fn drive(mut self) -> Result<()> {
        loop {
            self.start();
            // Only a refill job left: nothing is in flight, the pass is over.
            if self.jobs.len() == self.flight.refilling as usize {
                break;
            }
            let Some(events) = self.next_events().await else {
                break;
            };
            let succeeded = self.apply(events);
            self.complete(succeeded);
        }
        self.first_error.map_or(Ok(()), Err)
    }

    /// How many more tasks may start now.
    fn room(&self) -> usize {
        let options = self.run.options;
        if *self.run.stop.borrow() || Instant::now() + options.margin >= options.deadline {
            return 0;
        }
        let flight = &self.flight;
        let by_concurrency = options
            .concurrency
            .saturating_sub(flight.running + flight.completing);
        by_concurrency.min(self.budget())
    }

    /// Claims the cap still allows, counting those in flight.
    fn budget(&self) -> usize {
        (self.run.options.max_tasks as usize)
            .saturating_sub(self.report.claimed as usize + self.flight.running)
    }

    /// Step 1: starts tasks already read while there is room; else starts one read ahead, or
    /// (when the cursor is used up and the worker asked for refills) a wait for a refill.
    fn start(&mut self) {
        let run = self.run;
        while self.first_error.is_none() {
            let room = self.room();
            if room == 0 {
                return;
            }
            if let Some((name, read)) = self.ready.pop_front() {
                self.flight.running += 1;
                self.jobs.push(Box::pin(async move {
                    Event::Ran(run.run_task(name, read).await)
                }));
                continue;
            }
            if self.flight.reading {
                return;
            }
            // Read a whole batch ahead, not just what fits now: slots free up one by one, and
            // one read per free slot would cost a request per task.
            let batch = self
                .cursor
                .take(self.budget().min(READ_BATCH).max(room.min(1)));
            if batch.is_empty() {
                self.wait_for_refill();
                return;
            }
            self.seen.extend(batch.iter().cloned());
            self.flight.reading = true;
            self.jobs.push(Box::pin(async move {
                let reads = run.queue().read_tasks(&batch).await;
                Event::Read(reads.map(|reads| batch.into_iter().zip(reads).collect()))
            }));
            return;
        }
    }

    /// Starts a job that waits for the worker's refill notification and takes a new
    /// snapshot, unless one waits already or the run was not asked for refills.
    fn wait_for_refill(&mut self) {
        let run = self.run;
        let Some(notify) = run.refill.filter(|_| !self.flight.refilling) else {
            return;
        };
        self.flight.refilling = true;
        self.jobs.push(Box::pin(async move {
            notify.notified().await;
            Event::Refilled(run.queue().snapshot().await.map(|s| s.candidates))
        }));
    }

    /// Step 2: the next event, and every other that is ready now.
    async fn next_events(&mut self) -> Option<Vec<Event>> {
        let first = self.jobs.next().await?;
        let mut events = vec![first];
        while let Some(Some(more)) = self.jobs.next().now_or_never() {
            events.push(more);
        }
        Some(events)
    }

    /// Step 3: accounts for `events`; returns the leases of tasks that succeeded.
    fn apply(&mut self, events: Vec<Event>) -> Vec<Lease> {
        let mut succeeded = Vec::new();
        for event in events {
            let error = match event {
                Event::Read(reads) => {
                    self.flight.reading = false;
                    reads.map(|reads| self.ready.extend(reads)).err()
                }
                Event::Refilled(candidates) => {
                    self.flight.refilling = false;
                    candidates.map(|names| self.refill(names)).err()
                }
                Event::Ran(ran) => {
                    self.flight.running -= 1;
                    ran.map(|ran| self.ran(ran, &mut succeeded)).err()
                }
                Event::Completed(names, sent) => {
                    self.flight.completing -= names.len();
                    sent.map(|sent| self.completed(names, sent)).err()
                }
            };
            if let Some(e) = error {
                self.first_error.get_or_insert(e);
            }
        }
        succeeded
    }

    /// Adds a new snapshot's names that this pass has not handed out yet.
    fn refill(&mut self, names: Vec<String>) {
        let (seen, waiting) = (&self.seen, &*self.waiting);
        let fresh = names
            .into_iter()
            .filter(|n| !seen.contains(n) && !waiting.contains(n));
        self.cursor.extend(fresh);
    }

    /// Accounts for one task whose claim and run ended.
    fn ran(&mut self, ran: Ran, succeeded: &mut Vec<Lease>) {
        match ran {
            Ran::Succeeded(lease) => {
                self.report.claimed += 1;
                self.flight.completing += 1;
                succeeded.push(*lease);
            }
            Ran::Settled(outcome, claimed) => {
                self.report.claimed += claimed as u32;
                match &outcome {
                    Outcome::Conflict => self.cursor.lost_race(),
                    // Not read again in this run: it is counted once.
                    Outcome::Backoff(name) | Outcome::Unreadable(name) => {
                        self.waiting.insert(name.clone());
                    }
                    _ => {}
                }
                self.report.count(&outcome);
            }
        }
    }

    /// Accounts for a batch of completions.
    fn completed(&mut self, names: Vec<String>, sent: Sent<Vec<(String, Settled)>>) {
        match sent {
            Sent::Answered(settled, resent) => self.report.count_completions(settled, resent),
            Sent::Unsettled => {
                for name in names {
                    tracing::warn!(task = %name, "not completed before the deadline: left to the reaper");
                    self.report.count(&Outcome::Unsettled);
                }
            }
        }
    }

    /// Step 4: completes the tasks that succeeded together, up to [`COMPLETE_BATCH`] to a
    /// multi-op.
    fn complete(&mut self, mut succeeded: Vec<Lease>) {
        let run = self.run;
        while !succeeded.is_empty() {
            let batch: Vec<Lease> = succeeded
                .drain(..succeeded.len().min(COMPLETE_BATCH))
                .collect();
            let names = batch.iter().map(|l| l.task.name.clone()).collect();
            self.jobs.push(Box::pin(async move {
                let complete = |queue: Queue| {
                    let batch = batch.clone();
                    async move { queue.complete_many(batch).await }
                };
                Event::Completed(names, run.settle(complete).await)
            }));
        }
    }
}
