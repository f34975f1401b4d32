//! One pass over the queue, from its head to its tail, as a small state machine. Each turn of
//! its loop takes four named steps:
//!
//! 1. [`Pass::start`]: fill the free places (the run's concurrency): run tasks already probed, else probe the walk's
//!    next window, else wait at the tail: a worker for a refill notification, any pass with
//!    tasks running for the tasks it found over a limit (`pass/refill.rs`); how many may
//!    start and which go out together in one claim batch is `pass/batching.rs`;
//! 2. [`Pass::next_events`]: wait for the next job to end, and take every other that has;
//! 3. [`Pass::apply`]: account for each event in the report and the in-flight counts;
//! 4. [`Pass::complete`]: send the tasks that succeeded together as one completion
//!    (`pass/completion.rs`).
//!
//! The pass ends when nothing is in flight and nothing more may start.
//!
//! # Oldest first, without a herd
//!
//! A pass claims the unheld tasks of each window in number order, as many at a time as it has
//! free places, in one multi-op. Consumers that start at the same moment all try the oldest
//! tasks; the losers' multi-op fails at the first task the winner holds, and each loser then
//! skips a random distance ahead (up to `JUMP_PER_PLACE` numbers per place of its concurrency),
//! first over the tasks it had probed, then in the walk, so they spread over the head of the
//! queue instead of trailing each other through it window by window. Once its walk has reached
//! the tail, a loser keeps the last task it probed, so a short queue is not given up after one
//! lost race. A probed window whose every task another consumer holds is treated the same way:
//! it is the middle of that consumer's stretch, so the walker jumps instead of probing the
//! windows after it (four drains of 250 tasks each over a queue of 1 000 went from about 240 ms
//! to 145 ms). A batch that lost races jumps once, however many of its tasks turned out held;
//! what it learns first is `queue::stale`'s. Held tasks are passed over without a write: the
//! probe saw their lease.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::Run;
use super::group_order::{Found, GroupOrder};
use super::report::ProcessReport;
use super::send::Sent;
use super::task_steps::{Claims, Ran};
use crate::error::{Error, Result};
use crate::handler::Handler;
mod batching;
mod completion;
mod refill;

use crate::lane::Lane;
use crate::queue::{Lease, Probed, Settled, TaskOutcome, TaskRead, Walk};

/// How far a lost race jumps ahead, at most, per place of the run's concurrency: a window for
/// a scheduled run of one task, 2 048 numbers for a drain of 64. Far enough that consumers
/// draining together each find a stretch of their own, instead of meeting again at the same
/// windows (measured: four drains of 20 000 tasks lose a race about 100 times each at this
/// distance, 190 at a sixteenth of it, and drain 1.8 times faster).
const JUMP_PER_PLACE: usize = 32;

/// Tasks completed in one multi-op, at most.
const COMPLETE_BATCH: usize = 32;

/// What the jobs of a pass report back.
enum Event {
    /// A window of the walk was probed (the walk comes back with it).
    Probed(Box<Walk>, Result<Option<Vec<Probed>>>),
    /// The worker's refill notification came, or the walk became old enough to walk again:
    /// the walk may go on past its old tail. (What is paused was read again with it.)
    Refilled(Result<()>),
    /// The old walk's knowledge was saved to the head, and a new walk starts from it.
    Rewalked(Result<Box<Walk>>),
    /// Tasks the walk found over a limit may be tried again.
    LimitsDue,
    /// A batch of claims was sent: what came of each task.
    Claimed(Result<Claims>),
    /// A task's run ended.
    Ran(Result<Ran>),
    /// A batch of completions was sent: their tasks, and what came of them.
    Completed(Vec<String>, Result<Sent<Vec<(String, Settled)>>>),
}

type Job<'a> = Pin<Box<dyn Future<Output = Event> + Send + 'a>>;

/// Counts of a pass's tasks between start and settlement.
#[derive(Default)]
struct InFlight {
    /// Started: being claimed or run.
    running: usize,
    /// Handler done, completion not yet committed.
    completing: usize,
    /// A refill job waits for a notification.
    refilling: bool,
    /// A job waits until tasks over a limit may be tried again.
    limit_waiting: bool,
}

/// A pass's state.
pub(super) struct Pass<'r, 'a, H> {
    run: &'r Run<'a, H>,
    report: &'r mut ProcessReport,
    /// Tasks found unreadable or paused: counted once, passed over for the rest of the run.
    passed_over: &'r mut HashSet<String>,
    /// The walk; `None` while one of its windows is being probed (or it is being replaced).
    walk: Option<Box<Walk>>,
    /// When the walk started from the head.
    walk_started: Instant,
    /// The soonest moment (ms from when it was met) a task this walk found over a limit may be
    /// tried again; taken when the pass starts waiting for it.
    limited_retry: Option<i64>,
    /// Tasks gone (settled) while the walk was out probing, for it to learn when it is back.
    gone_meanwhile: Vec<String>,
    /// Tasks probed, ready for a free place.
    ready: VecDeque<(String, TaskRead)>,
    jobs: FuturesUnordered<Job<'r>>,
    flight: InFlight,
    first_error: Option<Error>,
    /// How far ahead a lost race jumps, at most.
    jump: usize,
    /// Whether a lost race jumped over tasks this pass did not look at.
    jumped: bool,
    /// Ordered groups: which grouped task may be claimed next.
    groups: GroupOrder,
    /// Whether a window every task of which another consumer holds is walked through rather
    /// than jumped over: after a pass that left groups waiting because it had jumped, so that
    /// a stretch held at the head cannot hold back every group.
    steady: bool,
    /// Whether lanes are weighted (`LANE_WEIGHTS`), not strict.
    weighted: bool,
    /// A window of a lane above the tasks waiting in `ready` is being probed.
    higher_out: bool,
    /// The tasks in `ready` already waited for one more window to fill their claim batch.
    topped_up: bool,
}

/// How a pass ended.
pub(super) struct PassEnd {
    /// A lost race (or a held window) jumped over tasks the pass did not look at.
    pub jumped: bool,
    /// Groups were left to a later pass because the walk had jumped over numbers before them.
    pub gapped: bool,
}

impl<'r, 'a, H: Handler> Pass<'r, 'a, H> {
    /// A pass that walks with `walk` (from the head the run read before it); a `steady` one
    /// walks through held windows.
    pub(super) fn new(
        run: &'r Run<'a, H>,
        report: &'r mut ProcessReport,
        passed_over: &'r mut HashSet<String>,
        walk: Walk,
        steady: bool,
    ) -> Self {
        Pass {
            steady,
            weighted: run.queue().settings().lane_weights.is_some(),
            higher_out: false,
            topped_up: false,
            jump: run.options.concurrency.max(1) * JUMP_PER_PLACE,
            run,
            report,
            passed_over,
            walk: Some(Box::new(walk)),
            walk_started: Instant::now(),
            gone_meanwhile: Vec::new(),
            limited_retry: None,
            jumped: false,
            groups: GroupOrder::default(),
            ready: VecDeque::new(),
            jobs: FuturesUnordered::new(),
            flight: InFlight::default(),
            first_error: None,
        }
    }

    /// Runs the pass to its end; the first error of any job is the pass's error.
    pub(super) async fn drive(mut self) -> Result<PassEnd> {
        loop {
            self.start();
            // Only waits left (a refill, a limit): nothing is in flight, the pass is over.
            let waits = self.flight.refilling as usize + self.flight.limit_waiting as usize;
            if self.jobs.len() == waits {
                break;
            }
            let Some(events) = self.next_events().await else {
                break;
            };
            let succeeded = self.apply(events);
            self.complete(succeeded);
        }
        // Every consumer moves the head past what it saw gone, so it stays near the oldest task.
        if let (Some(walk), None) = (&mut self.walk, &self.first_error) {
            walk.save_head(&self.run.queue()).await?;
        }
        let end = PassEnd {
            jumped: self.jumped,
            gapped: self.groups.gapped(),
        };
        self.first_error.map_or(Ok(end), Err)
    }

    /// Step 1: starts tasks already probed while there is room; else probes the walk's next
    /// window (a whole window ahead: places free up one by one, and one request per free place
    /// would cost a request per task), or waits for a refill once the walk has ended.
    fn start(&mut self) {
        let run = self.run;
        while self.first_error.is_none() && self.room() > 0 {
            // A higher lane woke: its window first (nothing is claimed while it is probed),
            // so that its tasks go out in the next batch.
            let higher = self.walk.as_ref().is_some_and(|walk| walk.higher_waiting());
            if !self.ready.is_empty() && !higher && !self.higher_out && !self.tops_up() {
                self.topped_up = false;
                let batch = self.next_batch();
                self.flight.running += batch.len();
                self.jobs.push(Box::pin(async move {
                    Event::Claimed(run.claim_batch(batch).await)
                }));
                continue;
            }
            let Some(mut walk) = self.walk.take() else {
                return; // a probe is out
            };
            if walk.ended() {
                self.walk = Some(walk);
                self.wait_for_refill();
                self.wait_for_limits();
                return;
            }
            self.higher_out = higher;
            self.topped_up = !self.ready.is_empty();
            self.jobs.push(Box::pin(async move {
                let window = walk.next_window(&run.queue()).await;
                Event::Probed(walk, window)
            }));
            return;
        }
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
                Event::Probed(mut walk, window) => {
                    self.higher_out = false;
                    for name in self.gone_meanwhile.drain(..) {
                        walk.mark_gone(&name);
                    }
                    self.walk = Some(walk);
                    window.map(|found| self.probed(found)).err()
                }
                Event::Refilled(read) => {
                    self.flight.refilling = false;
                    self.refilled();
                    read.err()
                }
                Event::Rewalked(walk) => walk.map(|walk| self.rewalked(walk)).err(),
                Event::LimitsDue => {
                    self.flight.limit_waiting = false;
                    self.limits_due();
                    None
                }
                Event::Claimed(claimed) => claimed.map(|claimed| self.claimed(claimed)).err(),
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

    /// Queues the claimable tasks of a probed window: not held by anyone, readable (an
    /// unreadable one is counted once per run).
    fn probed(&mut self, found: Option<Vec<Probed>>) {
        let (mut held, mut free) = (0, 0);
        let contiguous = self
            .walk
            .as_ref()
            .map_or(0, |walk| walk.contiguous_through());
        for probed in found.into_iter().flatten() {
            // Given back by this run to resume in another: to this run, as if another held it.
            let elsewhere = self.run.resumes_elsewhere(&probed.name);
            if let Some((group, id)) = grouped(&probed.read) {
                let found = Found {
                    group,
                    id,
                    held: probed.lease.is_some() || elsewhere,
                    contiguous: probed.number < contiguous,
                };
                let admitted = self.groups.admit(found, (probed.name, probed.read));
                free += admitted.is_some() as usize;
                if let Some(task) = admitted {
                    self.enqueue(task);
                }
                continue;
            }
            if probed.lease.is_some() {
                held += 1;
                continue;
            }
            if elsewhere || self.passed_over.contains(&probed.name) {
                continue;
            }
            if let TaskRead::Unreadable(_) = probed.read {
                self.passed_over.insert(probed.name.clone());
            }
            self.enqueue((probed.name, probed.read));
            free += 1;
        }
        // A window whose every task another consumer holds is the middle of its stretch: the
        // next windows are likely its too. Jump as after a lost race instead of probing them.
        if held > 0 && free == 0 && self.ready.is_empty() && !self.steady {
            self.lost_race();
        }
    }

    /// Queues a task probed for a free place: in strict lanes, ahead of the tasks of lower
    /// lanes probed before it (a walk that went back up for a high task claims it next);
    /// with weighted lanes, in the order the walk found them.
    fn enqueue(&mut self, task: (String, TaskRead)) {
        if self.weighted {
            self.ready.push_back(task);
            return;
        }
        let rank = |name: &str| Lane::of_name(name).priority().rank();
        let mine = rank(&task.0);
        let after = self.ready.iter().rposition(|(name, _)| rank(name) <= mine);
        self.ready.insert(after.map_or(0, |i| i + 1), task);
    }

    /// Accounts for a batch of claims: runs the tasks claimed, puts those not tried back at
    /// the front of the line, and counts the rest.
    fn claimed(&mut self, claims: Claims) {
        let (run, at) = (self.run, claims.at);
        let mut settled = Vec::new();
        for (name, outcome) in claims.outcomes {
            match outcome {
                TaskOutcome::Claimed(lease) => self.jobs.push(Box::pin(async move {
                    Event::Ran(run.run_claimed(*lease, at).await)
                })),
                outcome => settled.push((outcome, name)),
            }
        }
        let untried = claims.untried;
        self.flight.running -= settled.len() + untried.len();
        for task in untried.into_iter().rev() {
            self.ready.push_front(task);
        }
        // A batch that lost races lost them to one stretch of another consumer's: one jump.
        let raced = settled.iter().any(|(o, _)| matches!(o, TaskOutcome::Taken));
        for (outcome, name) in settled {
            self.account(outcome, false, &name);
        }
        if raced {
            self.lost_race();
        }
    }

    /// Accounts for one task whose claim and run ended.
    fn ran(&mut self, ran: Ran, succeeded: &mut Vec<Lease>) {
        match ran {
            Ran::Succeeded(lease) => {
                self.report.claimed += 1;
                self.flight.completing += 1;
                succeeded.push(*lease);
            }
            Ran::Settled(outcome, claimed, name) => self.ended(outcome, claimed, &name),
        }
    }

    /// Accounts for task `name`, settled (or never claimed) with `outcome`; a lost race
    /// jumps ahead.
    fn ended(&mut self, outcome: TaskOutcome, claimed: bool, name: &str) {
        let raced = matches!(outcome, TaskOutcome::Taken);
        self.account(outcome, claimed, name);
        if raced {
            self.lost_race();
        }
    }

    /// Accounts for task `name`, settled (or never claimed) with `outcome`, without jumping.
    fn account(&mut self, outcome: TaskOutcome, claimed: bool, name: &str) {
        self.report.claimed += claimed as u32;
        match &outcome {
            TaskOutcome::Paused => {
                self.passed_over.insert(name.to_string());
            }
            TaskOutcome::Limited { retry_in_ms } => {
                self.run.limited(name, *retry_in_ms);
                let soonest = self
                    .limited_retry
                    .map_or(*retry_in_ms, |r| r.min(*retry_in_ms));
                self.limited_retry = Some(soonest);
            }
            _ => {}
        }
        let owner = match &outcome {
            TaskOutcome::GroupBusy { owner } => owner.clone(),
            _ => None,
        };
        // The holder of the group's lock, when the walk saw it waiting, goes first.
        if let Some(holder) = self.groups.stopped(name, owner) {
            self.ready.push_front(holder);
        }
        if outcome.left_lane() {
            self.mark_gone(name);
        }
        self.report.count(&outcome);
    }

    /// After a lost race, jumps a random distance ahead, so that consumers that started
    /// together spread over the head of the queue instead of trailing each other through
    /// it (whoever won a batch holds the tasks probed with it). The jump passes over tasks
    /// probed and waiting first, then goes on in the walk; once the walk has ended, it never
    /// drops the last task probed: a short queue is not given up after one lost race.
    fn lost_race(&mut self) {
        // Within what is left of the queue: a short queue is not jumped clean over.
        let left = self.ready.len() + self.walk.as_ref().map_or(0, |walk| walk.left());
        let skip = fastrand::usize(0..=self.jump.min(left));
        let ended = self.walk.as_ref().is_some_and(|walk| walk.ended());
        let keep = usize::from(ended).min(self.ready.len());
        let dropped = skip.min(self.ready.len() - keep);
        self.ready.drain(..dropped);
        self.jumped |= skip > 0;
        if let (Some(walk), true) = (&mut self.walk, self.ready.is_empty()) {
            walk.skip(skip - dropped);
        }
    }

    /// Task `name` is gone for good: its lane's head may pass it.
    fn mark_gone(&mut self, name: &str) {
        match &mut self.walk {
            Some(walk) => walk.mark_gone(name),
            None => self.gone_meanwhile.push(name.to_string()),
        }
    }
}

/// The group and id of a task read, when it is grouped.
fn grouped(read: &TaskRead) -> Option<(String, String)> {
    match read {
        TaskRead::Found { body, .. } => crate::task::group_of(body),
        _ => None,
    }
}
