//! `process_events`' work: claim tasks oldest first, run them, settle them.
//!
//! A run walks the queue from its head ([`crate::queue::Walk`]) with up to `concurrency` tasks
//! in flight, in passes. Tasks are read 32 to a request ahead of their claims, claimed in
//! batches (one multi-op for as many as there are free places), run, and settled; tasks whose
//! handlers succeed together are completed together in one multi-op. When a pass reaches the
//! tail the run starts another from the head, until a pass claims nothing, the cap is
//! reached, or the deadline is near. A scheduled run of one task makes three requests for it:
//! read, claim, complete.
//!
//! Consumers that start together would all try the oldest tasks first. A consumer that loses a
//! claim jumps a random distance ahead, so after the first collision they spread over the
//! queue instead of meeting again at the same windows; a pass that jumped and then claimed
//! nothing is followed by a few more from the head before the run calls the queue empty. A
//! single consumer never loses, so it claims strictly oldest first.

mod attempt_trace;
mod group_order;
mod hold;
mod pass;
mod report;
mod send;
mod source;
mod suspend;
#[cfg(test)]
pub(crate) use suspend::TAKE_AGAIN_AFTER;
mod task_steps;

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub use report::ProcessReport;

use crate::clock::ZkTime;
use crate::error::Result;
use crate::handler::Handler;
use crate::limit::RouteLimits;
use crate::queue::{Lanes, Queue, Restraints, Start, Walk};
use crate::queue::{Recovery, recovery};
use crate::session::Session;
use crate::task::OnDeadPolicy;
use pass::{Pass, PassEnd};
use source::Source;

/// Due tasks a run moves back from `delayed/` to the queue before it walks, at most.
const PROMOTE_PER_RUN: usize = 256;

/// Passes in a row that may fail on a session or link fault before the run stops early.
const PASS_FAILURES: u32 = 2;

/// How long a run waits before its next pass after a dropped link.
const AFTER_DROPPED_LINK: Duration = Duration::from_millis(200);

/// A claim batch reads what is paused and cancelled again when its copy is older than this,
/// so a pause stops every running consumer's claims within a second.
const RESTRAINTS_FRESH_FOR: Duration = Duration::from_millis(500);

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

/// Runs up to `options.max_tasks` tasks with `handler` on `queue`. When its session ends
/// mid-run, what it holds is left to the reaper; [`run_on`] goes on on a new session instead.
pub async fn run<H: Handler>(
    queue: &Queue,
    handler: &H,
    options: &RunOptions,
) -> Result<ProcessReport> {
    let stop = watch::channel(false).1;
    run_with(Source::Fixed(queue), handler, options, Mode::plain(&stop)).await
}

/// As [`run`], judging what is due (delayed tasks, debounced publishes, schedules) and
/// timing backoffs at `now` instead of reading ZooKeeper's clock: for a caller that drives
/// the clock itself, such as a test that runs a moment after a delay ends without waiting
/// for it (as [`crate::reap::reap_at`] does for leases).
pub async fn run_at<H: Handler>(
    queue: &Queue,
    handler: &H,
    options: &RunOptions,
    now: &ZkTime,
) -> Result<ProcessReport> {
    let stop = watch::channel(false).1;
    let mode = Mode {
        clock: Some(*now),
        ..Mode::plain(&stop)
    };
    run_with(Source::Fixed(queue), handler, options, mode).await
}

/// As [`run`], on `session`'s queue: when the session ends mid-run, extensions and settling
/// writes go on on a new one (fencing makes that safe), so a task whose handler succeeded is
/// completed rather than left to wait out its lease and run again.
pub async fn run_on<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
) -> Result<ProcessReport> {
    run_live(session, handler, options, Summary::Logged).await
}

/// As [`run_on`], without the run's summary event: one of the runs that make up a single
/// invocation (a kicked drain that lingers runs again and again), whose caller logs one
/// summary of their sum ([`ProcessReport::log`]) when the invocation ends.
pub async fn run_on_unlogged<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
) -> Result<ProcessReport> {
    run_live(session, handler, options, Summary::ByCaller).await
}

/// A run on `session`'s queue that nothing stops early, its summary logged as `summary` says.
async fn run_live<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
    summary: Summary,
) -> Result<ProcessReport> {
    let stop = watch::channel(false).1;
    let source = Source::Live(session);
    let mode = Mode {
        summary,
        ..Mode::plain(&stop)
    };
    run_with(source, handler, options, mode).await
}

/// Who logs a run's summary event.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Summary {
    /// The run, as it ends: it is the invocation.
    Logged,
    /// Its caller, once for the invocation the run is part of.
    ByCaller,
}

/// As [`run_on`], and stops early when `stop` turns true: no more claims, and tasks in flight
/// get `options.margin` to finish before they are released. When `refill` is given, a pass
/// that has run out of candidates while tasks are still in flight waits for `refill` to be
/// notified (the worker notifies it on every change under `tasks/`) and takes a new snapshot,
/// so a task published meanwhile need not wait for the slowest task in flight.
pub async fn run_refilling<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
    stop: &watch::Receiver<bool>,
    refill: Option<&Notify>,
) -> Result<ProcessReport> {
    let mode = Mode {
        refill,
        ..Mode::plain(stop)
    };
    run_with(Source::Live(session), handler, options, mode).await
}

/// How a run goes besides its source, handler and options: what stops it early, what tells it
/// of new tasks, the clock it judges by (ZooKeeper's, read by the run, when none), and who
/// logs its summary.
struct Mode<'a> {
    stop: &'a watch::Receiver<bool>,
    refill: Option<&'a Notify>,
    clock: Option<ZkTime>,
    summary: Summary,
}

impl<'a> Mode<'a> {
    /// Stopped by `stop` only, on ZooKeeper's clock, its summary logged.
    fn plain(stop: &'a watch::Receiver<bool>) -> Self {
        Mode {
            stop,
            refill: None,
            clock: None,
            summary: Summary::Logged,
        }
    }
}

async fn run_with<H: Handler>(
    source: Source<'_>,
    handler: &H,
    options: &RunOptions,
    Mode {
        stop,
        refill,
        clock,
        summary,
    }: Mode<'_>,
) -> Result<ProcessReport> {
    let started = Instant::now();
    let queue = source.queue();
    let mut report = ProcessReport {
        consumer_id: queue.consumer_id().to_string(),
        ..Default::default()
    };
    // What is held, the lanes' heads and whether anything waits to join them, in one request.
    // A run on an idle queue ends there, having written nothing; any other run reads the
    // clock next. (A head read early is only more cautious: it never moves back.)
    let (watched, folder_of) = crate::run_hook::watched(crate::run_hooks_watch(), queue.layout());
    let mut start = queue.read_start_watching(&watched).await?;
    let hooked = Hooked {
        folder_of,
        has_children: std::mem::take(&mut start.watched),
    };
    // Key lanes exist: listed and read now (two requests, no write), so that a run over
    // empty ones is idle too; the first walk starts from what they say.
    if !start.lanes.key_lanes_listed {
        start.lanes = queue.probes().with_key_lanes(start.lanes).await?;
    }
    let idle = start.idle();
    let limits = handler.limits();
    // The gates' recipe only when a route limits concurrency keys.
    if limits.limits_keys() {
        queue.gates().prefetch_key_gates(&limits);
    }
    let (restraints, head) = restraints_from(start, handler.on_dead_policy(), limits);
    if idle {
        report.queue_paused = restraints.found.holds_all();
        report.remaining_depth = Some(0);
        report.duration_ms = started.elapsed().as_millis() as u64;
        if summary == Summary::Logged {
            report.log();
        }
        return Ok(report);
    }
    let now = match clock {
        Some(now) => now,
        None => queue.server_time().await?,
    };
    let run = Run {
        source,
        handler,
        options,
        now,
        stop,
        refill,
        settle_by: options.deadline - options.margin / 4,
        restraints: std::sync::RwLock::new((restraints, Instant::now())),
        limited: std::sync::Mutex::new(Limited::default()),
        id: (0..8).map(|_| fastrand::alphanumeric()).collect(),
        resume_elsewhere: std::sync::Mutex::default(),
    };
    let (promoted, fired, failed) = run.before_passes(&hooked).await?;
    (report.schedules_fired, report.schedules_failed) = (fired, failed);
    let mut passes = Passes {
        passed_over: HashSet::new(),
        idle_jumps: 0,
        first_head: Some(head),
        created: promoted > 0 || fired > 0,
        failures: 0,
        gapped: false,
    };
    while let Some(end) = passes.next(&run, &mut report).await? {
        if !passes.goes_on(&run, &mut report, end).await {
            break;
        }
    }
    report.limited = run.limited.lock().expect("not poisoned").names.len() as u32;
    report.remaining_depth = run.remaining_depth().await;
    report.duration_ms = started.elapsed().as_millis() as u64;
    if summary == Summary::Logged {
        report.log();
    }
    Ok(report)
}

/// How a pass ended, and what the run had claimed before it.
struct Passed {
    end: PassEnd,
    claimed_before: u32,
}

/// What a run's passes keep from one to the next.
struct Passes {
    /// Tasks found unreadable: counted once and not tried again in this run.
    passed_over: HashSet<String>,
    /// Passes that claimed nothing after jumping over tasks, in a row.
    idle_jumps: u32,
    /// The head the first pass starts from (read with the run's start).
    first_head: Option<Lanes>,
    /// Tasks this run put in the lanes after it read them (due ones, fired schedules): the
    /// next walk looks at every lane.
    created: bool,
    /// Failed passes in a row.
    failures: u32,
    /// Whether the last pass left groups waiting because it had jumped over numbers: the next
    /// one walks through held windows.
    gapped: bool,
}

impl Passes {
    /// Makes the next pass: how it ended and what the run had claimed before it; `None` when
    /// the run ends here (the queue paused, a failure the run cannot go on from).
    async fn next<H: Handler>(
        &mut self,
        run: &Run<'_, H>,
        report: &mut ProcessReport,
    ) -> Result<Option<Passed>> {
        loop {
            // Read again before every pass but the first (a worker's run may last for
            // hours), with the head the pass starts from.
            let head = match self.first_head.take() {
                Some(head) => Ok(head),
                None => run.before_pass().await,
            };
            let pass = match head {
                Ok(head) => {
                    report.queue_paused = run.queue_paused();
                    if report.queue_paused {
                        return Ok(None);
                    }
                    let claimed_before = report.claimed;
                    let weights = run.queue().settings().lane_weights;
                    let mut walk = Walk::from_lanes(head).weighted(weights);
                    if std::mem::take(&mut self.created) {
                        walk.reopen_all();
                    }
                    let pass = Pass::new(run, report, &mut self.passed_over, walk, self.gapped);
                    pass.drive().await.map(|end| Passed {
                        end,
                        claimed_before,
                    })
                }
                Err(e) => Err(e),
            };
            match pass {
                Ok(done) => {
                    self.failures = 0;
                    return Ok(Some(done));
                }
                // A pass that failed mid-run (or could not start) is followed by another, on
                // a new session when the old one is over: the run keeps its cap and report.
                Err(e) => {
                    self.failures += 1;
                    match run.recover(e, self.failures).await {
                        Ok(()) if may_claim(report, run.options) && !*run.stop.borrow() => {}
                        Ok(()) => return Ok(None),
                        Err(e) if report.claimed == 0 => return Err(e),
                        Err(e) => {
                            tracing::warn!(error = %e, claimed = report.claimed, "run ended early");
                            report.ended_early = Some(e.to_string());
                            return Ok(None);
                        }
                    }
                }
            }
        }
    }

    /// Whether another pass follows the one that `passed`; waits first for a route's limit to
    /// let tasks through.
    async fn goes_on<H: Handler>(
        &mut self,
        run: &Run<'_, H>,
        report: &mut ProcessReport,
        Passed {
            end,
            claimed_before,
        }: Passed,
    ) -> bool {
        let options = run.options;
        let idle = report.claimed == claimed_before;
        self.gapped = end.gapped;
        // Groups left waiting for a gap are worth another look too, walking through.
        let jumped = end.jumped || self.gapped;
        let claimed = report.claimed - claimed_before;
        tracing::debug!(
            claimed,
            jumped = end.jumped,
            gapped = self.gapped,
            "pass over"
        );
        // Tasks over their route's limit wait within the run for it to let them through.
        let retry_in = run.limited.lock().expect("not poisoned").retry_in_ms.take();
        let waits = idle && may_claim(report, options) && !*run.stop.borrow();
        if let Some(wait) = retry_in.filter(|_| waits) {
            let until = options.deadline - options.margin;
            let wake = tokio::time::Instant::now() + Duration::from_millis(wait as u64);
            tokio::time::sleep_until(wake.min(until)).await;
            self.idle_jumps = 0;
            return true;
        }
        self.idle_jumps = if idle && jumped {
            self.idle_jumps + 1
        } else {
            0
        };
        // A pass that jumped over tasks after a lost race may have passed the last free ones
        // (or left groups waiting behind the gap): a few more passes look again from the head
        // before the run calls the queue empty.
        let look_again = idle && jumped && self.idle_jumps <= IDLE_JUMPS;
        (look_again || !idle) && may_claim(report, options) && !*run.stop.borrow()
    }
}

/// The restraints in a [`Start`], and where its lanes start.
fn restraints_from(
    start: Start,
    on_dead: OnDeadPolicy,
    limits: RouteLimits,
) -> (Restraints, Lanes) {
    let restraints = Restraints {
        found: start.found,
        on_dead,
        limits,
    };
    (restraints, start.lanes)
}

/// What a run must not run: what is paused, and what features asked the start read to list
/// (the marks of tasks cancelled while held);
/// with what groups do when a task dies (`on_dead`, the handler's). Read as a pass's start
/// is (one request), the lanes left aside.
async fn read_restraints(
    queue: &Queue,
    on_dead: OnDeadPolicy,
    limits: RouteLimits,
) -> Result<Restraints> {
    let start = queue.read_start().await?;
    Ok(restraints_from(start, on_dead, limits).0)
}

/// Tasks a run found over their route's limit: each counted once, and the soonest moment one
/// may be tried again.
#[derive(Default)]
struct Limited {
    names: HashSet<String>,
    retry_in_ms: Option<i64>,
}

/// The run's hooks' folders as its start read found them: for each hook the index of its
/// folder (`None`: it watches none), and whether each folder has children.
struct Hooked {
    folder_of: Vec<Option<usize>>,
    has_children: Vec<bool>,
}

/// Passes in a row that may claim nothing after jumping over tasks before a run ends.
const IDLE_JUMPS: u32 = 3;

fn may_claim(report: &ProcessReport, options: &RunOptions) -> bool {
    report.claimed < options.max_tasks && Instant::now() + options.margin < options.deadline
}

/// One run's fixed parts.
struct Run<'a, H> {
    source: Source<'a>,
    handler: &'a H,
    options: &'a RunOptions,
    now: ZkTime,
    stop: &'a watch::Receiver<bool>,
    /// When set, a pass short of candidates waits on it for a new snapshot.
    refill: Option<&'a Notify>,
    /// Settling writes give up at this instant, so the run returns by its deadline.
    settle_by: Instant,
    /// What is paused and what was cancelled, and when it was read (at the start of each
    /// pass, and by claim batches when older than [`RESTRAINTS_FRESH_FOR`]).
    restraints: std::sync::RwLock<(Restraints, Instant)>,
    /// Tasks found over their route's limit.
    limited: std::sync::Mutex<Limited>,
    /// The run's own id, in its log events (a consumer's id may serve many runs).
    id: String,
    /// Tasks this run gave back to resume at once in another run, and when: it claims them no
    /// more (a refilling run, for a while: `suspend.rs`).
    resume_elsewhere: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
}

impl<H> Run<'_, H> {
    /// The routes' limits.
    fn limits(&self) -> RouteLimits {
        self.restraints
            .read()
            .expect("not poisoned")
            .0
            .limits
            .clone()
    }

    /// Before a pass but the first: what is held, read again (a worker's run may last for
    /// hours), and the head the pass starts from, together.
    async fn before_pass(&self) -> Result<Lanes> {
        let start = self.queue().read_start().await?;
        let (fresh, head) = restraints_from(start, self.on_dead(), self.limits());
        self.set_restraints(fresh);
        Ok(head)
    }

    /// After the `failures`-th pass in a row failed with `error`: whether the run may go on,
    /// as the one retry policy says (after a pause on a dropped link, on a new session when
    /// the old one is over), up to [`PASS_FAILURES`] in a row.
    async fn recover(&self, error: crate::Error, failures: u32) -> Result<()> {
        let queue = self.queue();
        match recovery(&error, queue.session_over()) {
            _ if failures > PASS_FAILURES => Err(error),
            Recovery::GiveUp => Err(error),
            Recovery::SameSession => {
                tracing::warn!(%error, "a pass failed on a dropped link; the next one goes on");
                tokio::time::sleep(AFTER_DROPPED_LINK).await;
                Ok(())
            }
            Recovery::NewSession => {
                tracing::warn!(%error, "a pass failed: the session is over; the next one goes on a new one");
                self.source.renew(&queue, error).await.map(drop)
            }
        }
    }

    /// What is held, as last read.
    fn restraints(&self) -> Restraints {
        self.restraints.read().expect("not poisoned").0.clone()
    }

    /// Keeps `restraints`, read just now.
    fn set_restraints(&self, restraints: Restraints) {
        *self.restraints.write().expect("not poisoned") = (restraints, Instant::now());
    }

    /// Whether the run claims nothing, as last read: a feature's read holds everything (the
    /// whole queue paused).
    fn queue_paused(&self) -> bool {
        let restraints = self.restraints.read().expect("not poisoned");
        restraints.0.found.holds_all()
    }

    /// What is held now: read again first when the copy is older than [`RESTRAINTS_FRESH_FOR`]
    /// (one `getData` and one `getChildren`), so that a pause reaches a drain in progress. A
    /// read that fails keeps the old copy (the claim that follows meets the same fault) and is
    /// tried again by the next batch.
    async fn fresh_restraints(&self) -> Restraints {
        let read_at = self.restraints.read().expect("not poisoned").1;
        if read_at.elapsed() >= RESTRAINTS_FRESH_FOR {
            match read_restraints(&self.queue(), self.on_dead(), self.limits()).await {
                Ok(restraints) => self.set_restraints(restraints),
                Err(e) => tracing::warn!(error = %e, "what is paused not read again; as before"),
            }
        }
        self.restraints()
    }

    /// Notes that task `name` waits for its route's limit, worth a try in `retry_in_ms`.
    fn limited(&self, name: &str, retry_in_ms: i64) {
        let mut limited = self.limited.lock().expect("not poisoned");
        limited.names.insert(name.to_string());
        limited.retry_in_ms = Some(
            limited
                .retry_in_ms
                .map_or(retry_in_ms, |r| r.min(retry_in_ms)),
        );
    }

    /// What groups do when one of their tasks goes to the dead letters.
    fn on_dead(&self) -> OnDeadPolicy {
        self.restraints
            .read()
            .expect("not poisoned")
            .0
            .on_dead
            .clone()
    }

    /// The queue to send the next request on.
    fn queue(&self) -> Queue {
        self.source.queue()
    }

    /// Before the first pass, together: moves due tasks back from `delayed/`, and calls the
    /// run's hooks (`crate::run_hook`: the debounced publishes and the schedules' slots that
    /// are due; a hook that fails never stops the tasks). Returns the tasks moved back (by the
    /// hooks too), the tasks the hooks made, and the things they could not do.
    async fn before_passes(&self, hooked: &Hooked) -> Result<(usize, u32, u32)> {
        let queue = self.queue();
        let now_ms = self.now.now_ms();
        let promote = queue.delays().promote_due(&self.now, PROMOTE_PER_RUN);
        let hooks = crate::run_hooks();
        if hooked.has_children.iter().all(|has| !has)
            && hooked.folder_of.iter().all(Option::is_some)
        {
            return promote.await.map(|promoted| (promoted, 0, 0));
        }
        let (folder_of, has_children) = (&hooked.folder_of, &hooked.has_children);
        let hooked = crate::run_hook::at_run_start(hooks, folder_of, has_children, &queue, now_ms);
        let (promoted, made) = tokio::join!(promote, hooked);
        Ok((promoted? + made.moved as usize, made.tasks, made.failed))
    }

    /// Tasks pending now, leased ones included; `None` when ZooKeeper does not answer before
    /// the settling deadline.
    async fn remaining_depth(&self) -> Option<usize> {
        let queue = self.queue();
        let count = crate::stats::counters(&queue);
        match tokio::time::timeout_at(self.settle_by, count).await {
            Ok(Ok(counters)) => Some(counters.depth),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "remaining depth unknown");
                None
            }
            Err(_) => None,
        }
    }
}

/// Resolves once `stop` is true; never, if its sender is gone while it is false.
async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
