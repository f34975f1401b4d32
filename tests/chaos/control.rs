//! The operator's part, by the `event-bridge` command as an operator types it: the
//! every-minute schedule added before publishing starts (and paused once it ends, so that no
//! slot fires while the queue settles), and the pausable type paused and resumed mid-run.

use std::time::Duration;

use tokio::time::Instant;

use crate::consumers::Launcher;
use crate::producer::{PAUSABLE_TYPE, SCHEDULED_TYPE};
use crate::receiver::wall_ms;

pub const SCHEDULE_NAME: &str = "chaos-tick";

/// When the schedule was added, and when it was paused (wall clock, ms: ZooKeeper's servers
/// run on this machine, so their clock is this one).
#[derive(Clone, Copy, Debug, Default)]
pub struct ScheduleSpan {
    /// Just before `schedule add` started, and when it returned: a slot after `added_ms` must
    /// fire; one between the two may or may not.
    pub adding_ms: i64,
    pub added_ms: i64,
    /// Just before `schedule pause` started, and when it returned.
    pub pausing_ms: i64,
    pub paused_ms: i64,
}

/// One pause of the pausable type: when `pause` returned and when `resume` was started.
#[derive(Clone, Copy, Debug)]
pub struct PauseWindow {
    pub paused: Instant,
    pub resuming: Instant,
}

/// Runs `event-bridge <args>` until it exits 0 (a leader change may fail it), for a minute at
/// most; the stdout of the run that worked.
async fn must(launcher: &Launcher, name: &str, args: &[&str]) -> String {
    let mut tries = harness::Tries::within(Duration::from_secs(60));
    let mut status = None;
    while tries.again().await {
        let (ended, out) = launcher.run(name, args).await;
        if ended.is_some_and(|s| s.success()) {
            return out;
        }
        status = ended;
    }
    panic!(
        "`event-bridge {}` kept failing ({status:?}): see {name}.log",
        args.join(" ")
    );
}

/// `schedule add chaos-tick --cron "* * * * *"`: a task of type `chaos.tick` every minute.
pub async fn add_schedule(launcher: &Launcher) -> ScheduleSpan {
    let adding_ms = wall_ms();
    let args = [
        "schedule",
        "add",
        SCHEDULE_NAME,
        "--cron",
        "* * * * *",
        "--type",
        SCHEDULED_TYPE,
        "--payload",
        r#"{"kind":"tick"}"#,
    ];
    must(launcher, "control", &args).await;
    ScheduleSpan {
        adding_ms,
        added_ms: wall_ms(),
        ..ScheduleSpan::default()
    }
}

/// `schedule pause chaos-tick`.
pub async fn pause_schedule(launcher: &Launcher, span: &mut ScheduleSpan) {
    span.pausing_ms = wall_ms();
    must(launcher, "control", &["schedule", "pause", SCHEDULE_NAME]).await;
    span.paused_ms = wall_ms();
}

/// Pauses the pausable type at each `(at, length)` from `start`, by `event-bridge pause
/// --type`, and resumes it `length` later by `event-bridge resume --type`.
pub async fn pause_type(
    launcher: &Launcher,
    start: Instant,
    windows: &[(Duration, Duration)],
) -> Vec<PauseWindow> {
    let mut done = Vec::new();
    for &(at, length) in windows {
        harness::real_time(start + at, "the type is paused at its planned moment").await;
        must(launcher, "control", &["pause", "--type", PAUSABLE_TYPE]).await;
        let paused = Instant::now();
        let why = "the type stays paused while traffic flows";
        harness::real_time(start + at + length, why).await;
        let resuming = Instant::now();
        must(launcher, "control", &["resume", "--type", PAUSABLE_TYPE]).await;
        done.push(PauseWindow { paused, resuming });
    }
    done
}
