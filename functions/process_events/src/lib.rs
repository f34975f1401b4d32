//! `process_events`: claims pending tasks oldest first and runs them, as an AWS Lambda
//! function and as a Vercel function. The work itself is [`event_bridge::process::run`]; this
//! crate reads what an invocation asks for, gives it a deadline, and shapes the reply.
//!
//! # Layout
//!
//! - [`App`]: what a warm instance keeps: the session, and the sinks tasks are delivered to.
//! - [`run`]: one run for a [`Trigger`] within the time left; the report is the reply.
//! - [`intake`]: publishing over HTTP (`POST`, all or nothing, answered `202`) and a task's
//!   status (`GET ?status=`), for both platforms' HTTP entries.
//! - `lambda` (feature `lambda`): the Lambda handler (EventBridge schedule, manual
//!   `{"mode":"drain"}`, Function URL). The binary is `src/main.rs`.
//! - `vercel` (feature `vercel`): the Vercel handler (cron with `CRON_SECRET`, `?drain=1`).
//!   The binary is `api/process_events_vercel.rs`, where Vercel's builder looks for it.
//!
//! # The functions at the edge
//!
//! `functions/process_events` and `functions/reap_leases` are each a small library (the handlers)
//! and thin binaries: `process_events` / `reap_leases` for Lambda, `process_events_vercel` /
//! `reap_leases_vercel` for Vercel. `functions/platform` holds what both share at the edge:
//!
//! - **The session across invocations** is the library's `Session`, the same type the worker and
//!   the CLI use. A function connects at cold start and keeps it. A sandbox frozen longer than the
//!   session timeout thaws with an expired session; `Session::run` replaces a session the client
//!   knows is over before the work, and when the work fails, runs it once more as the one retry
//!   policy (`session::recovery`) says: on the same session after a dropped link, on a new session
//!   after an expiry, not at all after any other error. Running it again is safe: every holder
//!   write is fenced. A run fails only before it claimed anything: once it has, a pass that fails
//!   on a dropped link or an ended session is followed by another (after a pause, or on a new
//!   session: `Run::recover`, twice in a row at most), and a failure it cannot get past ends the
//!   run with its report (`ended_early`), so a run never starts again from the start and claims
//!   past its cap (`MAX_TASKS_PER_RUN`).
//! - **Error labels** for Lambda's `errorType`: `ConfigError`, `ZooKeeperUnreachable`,
//!   `ZooKeeperError`, `ZooKeeperTimeout`, `TaskTooLarge`, `JsonError`, `BadEvent`, and
//!   `EventBridgeError` for any other error, given only here.
//! - **HTTP**: Vercel requests and Function URL events get JSON replies. A run (`GET`, a `POST`
//!   without a body or with `drain=`) needs `CRON_SECRET` on Vercel; with none set, every request
//!   is refused unless `ALLOW_UNAUTHENTICATED` is (the cold start logs which: `access`).
//! - **Metrics**: with `METRICS_EMF` (on by default on Lambda) each Lambda invocation prints one
//!   CloudWatch Embedded Metric Format line on stdout, built by `platform::metrics` (pure) from
//!   the run's report; `process_events` adds, after the run, a `clock` write and one
//!   `stats::collect` for `Leased`, `Dead`, `Waiting` and `OldestTaskAge` (the reaper's report has
//!   them already). That look sends its requests in turn: the counters' multi-read, the list of
//!   `delayed/` and a stat per waiting bucket, the head and a probe, `paused`, and the list of
//!   `groups/` with a read per 32 locks; it grows with the waiting buckets and the groups, not with
//!   the backlog. Vercel has no CloudWatch, so nothing is printed there by default.
//! - **Publishing over HTTP** (`platform::intake`, `process_events::intake`): a `POST` with a
//!   body is read as one task or JSON lines (all items checked before anything is written: size,
//!   JSON, `type` and `payload`), published with `AllOrNothing::publish_batch` (every task and its key
//!   in one multi-op: all or nothing; keys already taken are looked up first and answered with
//!   their task), and answered `202` with status URLs (`?status=<task>`, or `?status=<id>` for a
//!   debounced item, answered from
//!   `inspect::status`: pending, leased, waiting, dead, completed with `KEEP_DONE`, by id also a
//!   debounced publish still pending, or 404).
//!   Vercel checks `PUBLISH_SECRET`, a secret of its own so that whoever may publish may not
//!   also trigger drains; on Lambda the Function URL's IAM authorization admits the caller. It
//!   lives in `process_events` rather than a third function because that function already has a
//!   warm session, a Function URL and a Vercel entry: a third would add a cold start, a session
//!   per instance, and deploy entries, for a handler of a few dozen lines. A publish is sent once
//!   (no retry on a dropped link: it may have landed, and a second send would duplicate it).
//!
//! Vercel takes function entries from `api/` only. For an entry `api/x.rs` its Rust builder runs
//! `cargo locate-project` in `api/`, looks there for a `[[bin]]` whose path is the entry, and
//! otherwise builds `cargo build --bin x`; from `api/` it finds our virtual root manifest, which
//! declares no binaries, so an entry file's name is its binary's name. We chose thin entry files
//! over the legacy `builds` key (which cannot be combined with `functions` settings such as
//! `maxDuration`, and needs hand-written routes): `api/process_events_vercel.rs` and `api/reap_leases_vercel.rs` are declared as
//! `[[bin]]`s of the function crates (`path = "../../api/…"`), named differently from the Lambda
//! binaries so the two never collide in `target/`. A test resolves every cron path in
//! `vercel.json` to such a binary.

pub mod intake;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "vercel")]
pub mod vercel;

use std::time::Duration;

use event_bridge::sink::{Delivery, dead_letter_sink};
use event_bridge::{Config, Error, Handler, ProcessReport, RunOptions, Session, process};
use platform::trigger::Trigger;
use tokio::time::Instant;

/// A warm instance's state: the ZooKeeper session and the sinks, built once at cold start.
pub struct App {
    pub session: Session,
    /// What runs tasks: the routes' sinks, or the built-in handler.
    pub delivery: Delivery,
}

impl App {
    /// Connects (failing fast, naming the address), creates the base paths and builds the
    /// sinks (a bad route stops it, naming `ROUTES` and the route). `platform` starts the
    /// consumer id (`lambda-…`, `vercel-…`).
    pub async fn open(config: Config, platform: &str) -> Result<Self, Error> {
        let delivery = Delivery::from_config(&config).await?;
        let dead_letters = dead_letter_sink(&config).await?;
        let session = Session::open(config, platform, dead_letters).await?;
        Ok(App { session, delivery })
    }
}

/// Runs what `trigger` asks for, finishing within `time_left`. A session found over is
/// replaced ([`Session::run`]).
pub async fn run(app: &App, trigger: Trigger, time_left: Duration) -> Result<ProcessReport, Error> {
    run_with(&app.session, &app.delivery, trigger, time_left).await
}

/// As [`run`], with a handler of one's own: what a Rust user's own function binary built on
/// this crate calls (resumable tasks' steps are such a handler's).
pub async fn run_with<H: Handler>(
    session: &Session,
    handler: &H,
    trigger: Trigger,
    time_left: Duration,
) -> Result<ProcessReport, Error> {
    let config = session.config();
    let options = RunOptions {
        max_tasks: trigger.max_tasks(config),
        concurrency: trigger.concurrency(config),
        deadline: Instant::now() + time_left,
        margin: config.deadline_margin,
    };
    let started = Instant::now();
    let kick = (config.kick.as_ref()).filter(|_| matches!(trigger, Trigger::Drain { .. }));
    let Some(kick) = kick else {
        return run_once(session, handler, &options, Summary::Logged).await;
    };
    // A kicked drain runs several times: one summary event for the invocation, at its end.
    let report = run_once(session, handler, &options, Summary::ByCaller).await?;
    // On the heap: its runs beside the first would double the future's size on the stack.
    let linger_until = started + kick.linger;
    let mut report = Box::pin(after_kick(session, handler, &options, report, linger_until)).await?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.log();
    Ok(report)
}

/// How often a kicked drain that lingers looks for tasks again.
const LINGER_POLL: Duration = Duration::from_millis(100);

/// What a kicked drain (kicks on, see `event_bridge::kick`) does once it has drained: it
/// lingers until `linger_until` (`KICK_LINGER_MS` after it began; within the run's time and
/// cap), draining again every [`LINGER_POLL`], so the tasks that publishers land meanwhile
/// (which do not kick: the kick node stands) run in this invocation; then it clears the kick
/// node, so the next publish kicks again, and runs once more: a task that landed just before
/// the node went is run by this invocation too.
async fn after_kick<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
    mut report: ProcessReport,
    linger_until: Instant,
) -> Result<ProcessReport, Error> {
    let linger_until = linger_until.min(options.deadline - options.margin);
    let rest = |report: &ProcessReport| RunOptions {
        max_tasks: options.max_tasks.saturating_sub(report.claimed),
        ..*options
    };
    while Instant::now() < linger_until && report.claimed < options.max_tasks {
        tokio::time::sleep_until((Instant::now() + LINGER_POLL).min(linger_until)).await;
        report.absorb(run_once(session, handler, &rest(&report), Summary::ByCaller).await?);
    }
    match event_bridge::kick::clear(&session.queue()).await {
        Ok(()) if report.claimed < options.max_tasks => {
            report.absorb(run_once(session, handler, &rest(&report), Summary::ByCaller).await?);
        }
        Ok(()) => {}
        Err(error) => tracing::warn!(
            %error,
            "kick node not cleared; the next publisher takes it over once stale"
        ),
    }
    Ok(report)
}

/// One run on `session`: a session found over before the run is replaced, and a run that
/// fails on a session fault runs once more; within a run, held tasks go on on a new session
/// by themselves.
async fn run_once<H: Handler>(
    session: &Session,
    handler: &H,
    options: &RunOptions,
    summary: Summary,
) -> Result<ProcessReport, Error> {
    session
        .run(|_| async move {
            match summary {
                Summary::Logged => process::run_on(session, handler, options).await,
                Summary::ByCaller => process::run_on_unlogged(session, handler, options).await,
            }
        })
        .await
}

/// Whether a run logs its summary event, or leaves it to the invocation it is part of.
#[derive(Clone, Copy)]
enum Summary {
    Logged,
    ByCaller,
}

/// The run's CloudWatch Embedded Metric Format line, with the queue's state after it, when
/// `METRICS_EMF` is on (the state costs one look at the queue, which reads ZooKeeper's clock
/// only when there are tasks to age: `stats::collect_with`).
pub async fn metrics_line(app: &App, report: &ProcessReport) -> Option<serde_json::Value> {
    let config = app.session.config();
    if !config.metrics_emf {
        return None;
    }
    let queue = app.session.queue();
    let stats = event_bridge::stats::collect_with(&queue, None).await.ok();
    let metrics = platform::metrics::process_metrics(report, stats.as_ref());
    let now = platform::metrics::now_ms();
    Some(platform::metrics::document(
        config,
        "process_events",
        &metrics,
        now,
    ))
}
