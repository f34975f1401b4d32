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
    let mut report = run_once(session, handler, &options).await?;
    // A kicked drain (kicks on, see `event_bridge::kick`) clears the kick node once it has
    // drained, so the next publish kicks again, and runs once more within its cap: a task that
    // landed while the node stood (its publisher did not kick) is run by this invocation.
    if config.kick.is_some() && matches!(trigger, Trigger::Drain { .. }) {
        match event_bridge::kick::clear(&session.queue()).await {
            Ok(()) if report.claimed < options.max_tasks => {
                let rest = RunOptions {
                    max_tasks: options.max_tasks - report.claimed,
                    ..options
                };
                report.absorb(run_once(session, handler, &rest).await?);
            }
            Ok(()) => {}
            Err(error) => tracing::warn!(
                %error,
                "kick node not cleared; the next publisher takes it over once stale"
            ),
        }
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
) -> Result<ProcessReport, Error> {
    session
        .run(|_| async move { process::run_on(session, handler, options).await })
        .await
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
