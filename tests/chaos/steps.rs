//! Stepped tasks: a resumable Rust handler's progress is never lost. `chaos-stepper` (its own
//! binary, `stepper/main.rs`) runs on a queue root of its own in the same ensemble, under the
//! same faults, one short `process` run after another (`TIME_BUDGET_MS`); every run does one
//! new step of a task and then either stops it (`Err(steps.stop())`) or is cut at its deadline
//! in the middle of the next step. With [`MAX_INTERRUPTIONS`] cuts in a row allowed, a task
//! whose runs each made progress used to go to the dead letters as "did not finish within a
//! run's time"; and a step recorded done must never run again.
//!
//! Judged from the stepper's log, in its order (one stepper runs at a time, so its log is the
//! order of events): each `step ran` against the steps the task's record held at every earlier
//! release (`released to resume in another run`) and cut (`cut at the run's deadline`), both
//! with `steps_done`; and each cut: one whose run made progress counts no interruption, so no
//! task that made progress in each run dies of interruptions. The stepper's releases also go
//! to `reclaims` (a Rust handler's stop, beside the webhooks').

use std::collections::HashMap;
use std::time::Duration;

use event_bridge::inspect::Status;
use event_bridge::{Config, Envelope, Queue};
use tokio::time::Instant;

use crate::consumers::{Launcher, Loop, Program};
use crate::logs::{Cut, Released, StepRan};

/// The stepped tasks' event type, and how many are published, one every [`EVERY`].
const STEPPED_TYPE: &str = "chaos.stepped";
const TASKS: usize = 10;
const EVERY: Duration = Duration::from_secs(2);
/// A stepper run's time: enough for one step, and a second one that never ends.
const TIME_BUDGET: Duration = Duration::from_millis(2_500);
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);
/// Cuts in a row without progress that send a task to the dead letters (a stepped task is cut
/// twice: it would go at its second cut, were its progress not counted).
pub const MAX_INTERRUPTIONS: u64 = 2;
/// Between two stepper runs, and two reaps of the stepped root.
const PAUSE: Duration = Duration::from_millis(200);
const REAP_PAUSE: Duration = Duration::from_secs(1);
/// How long the stepped tasks are given to finish once publishing is over (a hang guard).
const FINISH_GUARD: Duration = Duration::from_secs(120);

/// The stepper's log: its role.
pub const LOG: &str = "stepper";

/// The stepped tasks' queue: the run's, at a root of its own.
pub fn config(main: &Config) -> Config {
    let mut config = main.clone();
    config.root = format!("{}-stepped", main.root);
    config
}

/// The stepped root's consumers: the stepper's loop and a reap loop of its own (a stepper
/// run that lost its session under a leader kill leaves its leases to it).
pub struct Stepper {
    runs: Loop,
    reaper: Loop,
}

/// Starts the stepped root's consumers.
pub fn start(launcher: std::sync::Arc<Launcher>, config: &Config) -> Stepper {
    let root = ("EVENT_BRIDGE_ROOT", config.root.clone());
    let program = Program {
        binary: std::path::PathBuf::from(env!("CARGO_BIN_EXE_chaos-stepper")),
        args: Vec::new(),
        env: vec![
            root.clone(),
            ("TIME_BUDGET_MS", TIME_BUDGET.as_millis().to_string()),
            (
                "DEADLINE_MARGIN_MS",
                DEADLINE_MARGIN.as_millis().to_string(),
            ),
            ("MAX_INTERRUPTIONS", MAX_INTERRUPTIONS.to_string()),
            (
                "RUST_LOG",
                format!("{},chaos_stepper=info", crate::consumers::RUST_LOG),
            ),
        ],
    };
    let mut reap = launcher.event_bridge(&["reap"]);
    reap.env.push(root);
    Stepper {
        runs: Loop::program(launcher.clone(), LOG, program, PAUSE),
        reaper: Loop::program(launcher, "reap-stepped", reap, REAP_PAUSE),
    }
}

impl Stepper {
    /// Lets the runs in progress end, and starts no other.
    pub async fn stop(&mut self) {
        self.runs.stop().await;
        self.reaper.stop().await;
    }
}

/// Publishes [`TASKS`] stepped tasks from `start`, one every [`EVERY`]; their ids.
pub async fn publish(config: Config, start: Instant) -> Vec<String> {
    let queue = connect(&config).await;
    queue
        .ensure_paths()
        .await
        .expect("the stepped root's paths");
    let mut ids = Vec::new();
    for n in 0..TASKS {
        harness::real_time(start + EVERY * n as u32, "a stepped task a tick").await;
        let envelope = Envelope::new(STEPPED_TYPE, serde_json::json!({ "n": n }));
        let mut tries =
            harness::Tries::every(Duration::from_secs(60), crate::producer::RETRY_PAUSE);
        let mut queue = queue.clone();
        while tries.again().await {
            match queue.publish_many(std::slice::from_ref(&envelope)).await {
                Ok(_) => break,
                Err(_) if queue.session_over() => queue = connect(&config).await,
                Err(_) => {}
            }
        }
        ids.push(envelope.id);
    }
    ids
}

async fn connect(config: &Config) -> Queue {
    crate::producer::new_queue(config, "stepped")
        .await
        .expect("a session on the stepped root")
}

/// Waits until every one of `ids` completed or is dead (a hang guard of [`FINISH_GUARD`]);
/// how many completed, and how many are dead (a task whose runs made no progress
/// [`MAX_INTERRUPTIONS`] times in a row, as a leader kill can make them).
pub async fn finished(config: &Config, ids: &[String]) -> (usize, usize) {
    let queue = connect(config).await;
    let mut tries = harness::Tries::within(FINISH_GUARD);
    let (mut completed, mut dead) = (0, 0);
    while tries.again().await {
        let Ok(now) = queue.server_time().await else {
            continue;
        };
        let (mut done, mut over) = (0, 0);
        for id in ids {
            match event_bridge::inspect::status(&queue, &now, id).await {
                Ok(Status::Completed { .. }) => (done, over) = (done + 1, over + 1),
                Ok(Status::Dead { .. }) => over += 1,
                _ => {}
            }
        }
        (completed, dead) = (done, over - done);
        if over == ids.len() {
            break;
        }
    }
    (completed, dead)
}

#[derive(Debug, Default)]
pub struct StepFigures {
    pub tasks: usize,
    pub completed: usize,
    pub dead: usize,
    pub steps_ran: usize,
    /// Cuts at a run's deadline, and those whose run made progress.
    pub cuts: usize,
    pub progressed: usize,
    /// Recorded steps run again, and progress counted as an interruption.
    pub ran_again: Vec<String>,
    pub progress_lost: Vec<String>,
}

impl StepFigures {
    /// Whether the run broke the guarantee, left a task neither completed nor dead, or never
    /// put it to the test (no run cut with progress, no task completed).
    pub fn failed(&self) -> bool {
        !self.ran_again.is_empty()
            || !self.progress_lost.is_empty()
            || self.completed + self.dead < self.tasks
            || self.progressed == 0
            || self.completed == 0
    }
}

/// Judges the stepper's log (see the module's documentation): its steps run, its releases and
/// its cuts, each with its place in the log.
pub fn judge(ran: &[StepRan], released: &[Released], cuts: &[Cut]) -> StepFigures {
    let mut f = StepFigures {
        steps_ran: ran.len(),
        cuts: cuts.len(),
        progressed: cuts.iter().filter(|c| c.progressed).count(),
        ..Default::default()
    };
    // What each task's record held, at each place in the log it was read out.
    let mut held: HashMap<&str, Vec<(usize, u64)>> = HashMap::new();
    let released = released.iter().map(|r| (&r.task, r.at.line, r.steps_done));
    let cut = cuts.iter().map(|c| (&c.task, c.at.line, c.steps_done));
    for (task, line, done) in released.chain(cut) {
        held.entry(task.as_str()).or_default().push((line, done));
    }
    for step in ran {
        let before = held.get(step.task.as_str()).map_or(&[][..], Vec::as_slice);
        if let Some((line, done)) = before
            .iter()
            .find(|(line, done)| *line < step.at.line && *done > step.step)
        {
            f.ran_again.push(format!(
                "{} step {} ran (line {}) after line {line} said {done} steps were done",
                step.task, step.step, step.at.line
            ));
        }
    }
    for cut in cuts.iter().filter(|c| c.progressed && c.interruptions > 0) {
        f.progress_lost.push(format!(
            "{} cut (line {}) after progress in its run {}, counted as interruption {}{}",
            cut.task,
            cut.at.line,
            cut.run,
            cut.interruptions,
            match cut.interruptions >= MAX_INTERRUPTIONS {
                true => ": dead-lettered as not finishing within a run's time",
                false => "",
            }
        ));
    }
    f
}

/// After one more reap of the stepped root (the stepper stopped): the step folders left whose
/// task is not dead (a dead letter keeps its folder for a redrive). A completed task's folder
/// is dropped by the run that completed it, or, when that run stopped first, marked by the
/// completion and swept by a reap; none may stay.
pub async fn stray_folders(config: &Config, ids: &[String]) -> Vec<String> {
    let queue = connect(config).await;
    let mut tries = harness::Tries::every(FINISH_GUARD, Duration::from_secs(1));
    while tries.again().await {
        if event_bridge::reap::reap(&queue).await.is_ok() {
            break;
        }
    }
    let now = queue.server_time().await.expect("ZooKeeper's time");
    let mut stray = Vec::new();
    for id in ids {
        let folder = queue.layout().steps_of(id);
        let raw = event_bridge::session::connect(config)
            .await
            .expect("a session");
        if raw.check_stat(&folder).await.expect("stat").is_none() {
            continue;
        }
        match event_bridge::inspect::status(&queue, &now, id).await {
            Ok(Status::Dead { .. }) => {}
            other => stray.push(format!("{id}: its folder stays, the task {other:?}")),
        }
    }
    stray
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::At;

    fn at(line: usize) -> At {
        At {
            log: LOG.into(),
            line,
        }
    }

    fn ran(line: usize, step: u64) -> StepRan {
        StepRan {
            at: at(line),
            task: "t".into(),
            step,
        }
    }

    fn cut(line: usize, steps_done: u64, progressed: bool, interruptions: u64) -> Cut {
        Cut {
            at: at(line),
            task: "t".into(),
            run: "r".into(),
            progressed,
            interruptions,
            steps_done,
        }
    }

    /// A task as the stepper runs it: a step and a cut, a step and a release, and so on; the
    /// step a cut stopped runs again in the next run (it was never recorded).
    #[test]
    fn steps_run_once_and_progress_is_no_interruption() {
        let steps = [
            ran(1, 0),
            ran(2, 1),
            ran(4, 1),
            ran(7, 2),
            ran(8, 3),
            ran(10, 3),
        ];
        let released = [Released {
            at: at(5),
            at_ms: 0,
            task: "t".into(),
            run: "r2".into(),
            steps_done: 2,
        }];
        let cuts = [cut(3, 1, true, 0), cut(9, 3, true, 0)];
        let f = judge(&steps, &released, &cuts);
        assert!(f.ran_again.is_empty(), "{:?}", f.ran_again);
        assert!(f.progress_lost.is_empty());
    }

    /// A recorded step run again, and a cut after progress counted as an interruption (the
    /// task then dead-lettered), are each found.
    #[test]
    fn a_recorded_step_run_again_or_progress_counted_lost_is_a_violation() {
        let again = judge(&[ran(1, 0), ran(5, 0)], &[], &[cut(3, 1, true, 0)]);
        assert_eq!(again.ran_again.len(), 1);
        let lost = judge(&[ran(1, 0)], &[], &[cut(3, 1, true, 1)]);
        assert_eq!(lost.progress_lost.len(), 1);
        assert!(lost.failed());
    }
}
