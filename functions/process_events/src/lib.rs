//! `process_events`: claims pending tasks oldest first and runs them, as an AWS Lambda
//! function and as a Vercel function. The work itself is [`event_bridge::process::run`]; this
//! crate reads what an invocation asks for, gives it a deadline, and shapes the reply.
//!
//! # Layout
//!
//! - [`run`]: one run for a [`Trigger`] within the time left; the report is the reply.
//! - [`lambda`]: the Lambda handler (EventBridge schedule, manual `{"mode":"drain"}`, Function
//!   URL). The binary is `src/main.rs`.
//! - [`vercel`]: the Vercel handler (cron with `CRON_SECRET`, `?drain=1`). The binary is
//!   `api/process_events_vercel.rs`, where Vercel's builder looks for it.
//! - [`platform`]: what both functions share: the ZooKeeper session kept across invocations,
//!   error labels, HTTP replies. `reap_leases` uses it too.

pub mod lambda;
pub mod platform;
pub mod vercel;

use std::time::Duration;

use event_bridge::trigger::Trigger;
use event_bridge::{Error, ProcessReport, RunOptions, process};
use tokio::time::Instant;

use crate::platform::Session;

/// Runs what `trigger` asks for, finishing within `time_left`, delivering through `ROUTES` when
/// set, else with the handler `EVENT_BRIDGE_HANDLER` names. A session found over is replaced ([`Session::run`]).
pub async fn run(
    session: &Session,
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
    let (options, handler) = (&options, session.delivery());
    session
        .run(|queue| async move { process::run(&queue, handler, options).await })
        .await
}
