//! Sleeps and waits end on time, a redrive in the middle of one included. Some resumable tasks
//! (those of pairs that get no signal) are cancelled while they wait for a signal, and their
//! dead letters redriven at once, before the wait's timeout: the task is back in its lane long
//! before its wait ends. (A redrive used to deliver such a task at once, its wait ended "by
//! timeout" before its timeout.)
//!
//! Judged over every resumable delivery (`judge`), redriven or not: a delivery whose record
//! ends in a sleep, or in a wait that ended by its timeout, arrives no sooner than that sleep's
//! or wait's `until_ms`. Its consumer decided it was over by ZooKeeper's time, which it never
//! reads ahead of the server, and the servers stamp times with this machine's clock, the
//! receiver's: a delivery on time arrives at or after `until_ms` however slow the machine is;
//! one before is early by the order of events, with no margin. A wait a signal ended may end
//! before its timeout.

use std::time::Duration;

use event_bridge::cancel::Cancelled;
use event_bridge::inspect::Status;
use event_bridge::{Config, Queue};

use crate::receiver::Delivery;
use crate::resumable::Ended;

/// How long a redrive waits for its task to be found waiting for its signal (a hang guard).
const WAITING_GUARD: Duration = Duration::from_secs(60);
/// Between two looks at a task's status, and two tries of a cancel or a redrive.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// How long a cancel or a redrive is sent again while the link or the session fails under it
/// (a hang guard: a leader kill's election takes seconds).
const RUN_AGAIN_GUARD: Duration = Duration::from_secs(60);

/// Whether resumable task `i` of pair `pair` is cancelled in its wait and redriven: the first
/// of each pair that gets no signal (see `resumable::publish`).
pub fn redriven(pair: usize, i: usize) -> bool {
    pair.is_multiple_of(3) && i == 0
}

/// What became of one task's cancel and redrive.
#[derive(Clone, Debug)]
pub struct Redrive {
    pub id: String,
    /// The wait's end (ZooKeeper ms), as the task was found waiting.
    pub until_ms: Option<i64>,
    /// ZooKeeper's time just before the redrive, when it was redriven.
    pub redriven_ms: Option<i64>,
    /// What went otherwise (never found waiting, the cancel answered otherwise, an error).
    pub trouble: Option<String>,
}

impl Redrive {
    /// Redriven before its wait's end: back in its lane while its wait goes on.
    pub fn in_time(&self) -> bool {
        matches!((self.redriven_ms, self.until_ms), (Some(at), Some(until)) if at < until)
    }
}

/// Waits until task `id` waits for its signal, cancels it and redrives its dead letter, on a
/// session of its own.
pub async fn cancel_and_redrive(config: Config, id: String) -> Redrive {
    let mut redrive = Redrive {
        id: id.clone(),
        until_ms: None,
        redriven_ms: None,
        trouble: None,
    };
    if let Err(trouble) = steps(&config, &mut redrive).await {
        redrive.trouble = Some(trouble);
    }
    redrive
}

async fn steps(config: &Config, redrive: &mut Redrive) -> Result<(), String> {
    let mut queue = crate::producer::new_queue(config, "redriver")
        .await
        .map_err(|e| e.to_string())?;
    redrive.until_ms = Some(waiting(&queue, &redrive.id).await?);
    let name = cancel_again(config, &mut queue, &redrive.id).await?;
    let now = queue.server_time().await.map_err(|e| e.to_string())?;
    redrive.redriven_ms = Some(now.now_ms());
    if let Err(trouble) = redrive_again(config, &mut queue, &name).await {
        redrive.redriven_ms = None;
        return Err(trouble);
    }
    Ok(())
}

/// Whether `error` is one an operator answers by running the command again (a link dropped
/// or a session lost under the request, as a leader kill does): its request may have landed.
/// A session that is over is replaced first, as the command's next run opens its own.
async fn run_again(config: &Config, queue: &mut Queue, error: &event_bridge::Error) -> bool {
    use event_bridge::queue::{Recovery, recovery};
    match recovery(error, queue.session_over()) {
        Recovery::SameSession => true,
        Recovery::NewSession => {
            if let Ok(fresh) = crate::producer::new_queue(config, "redriver").await {
                *queue = fresh;
            }
            true
        }
        Recovery::GiveUp => false,
    }
}

/// Cancels task `id` (waiting, so nobody holds it): the name of its dead letter. Sent again
/// while the link or the session fails under it, as an operator would; an attempt whose
/// answer was lost may have landed, and the next then finds the dead letter.
async fn cancel_again(config: &Config, queue: &mut Queue, id: &str) -> Result<String, String> {
    let mut tries = harness::Tries::every(RUN_AGAIN_GUARD, LOOK_EVERY);
    let mut lost = false;
    while tries.again().await {
        match event_bridge::cancel::cancel(queue, id).await {
            Ok(Cancelled::Cancelled { name }) => return Ok(name),
            Ok(Cancelled::Dead { name }) if lost => return Ok(name),
            Ok(other) => return Err(format!("the cancel answered {other:?}")),
            Err(e) if run_again(config, queue, &e).await => lost = true,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("the cancel kept failing for {RUN_AGAIN_GUARD:?}"))
}

/// Redrives dead letter `name`, sent again while the link or the session fails under it; an
/// attempt whose answer was lost may have landed, and the next then finds no dead letter of
/// that name (nothing redriven, nothing skipped).
async fn redrive_again(config: &Config, queue: &mut Queue, name: &str) -> Result<(), String> {
    let names = [name.to_string()];
    let mut tries = harness::Tries::every(RUN_AGAIN_GUARD, LOOK_EVERY);
    let mut lost = false;
    while tries.again().await {
        match event_bridge::dead::redrive(queue, &names).await {
            Ok(report) if report.redriven.len() == 1 => return Ok(()),
            Ok(report) if lost && report.redriven.is_empty() && report.skipped.is_empty() => {
                return Ok(());
            }
            Ok(report) => return Err(format!("not redriven: {report:?}")),
            Err(e) if run_again(config, queue, &e).await => lost = true,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("the redrive kept failing for {RUN_AGAIN_GUARD:?}"))
}

/// The end of task `id`'s wait for a signal, once it is found waiting for one.
async fn waiting(queue: &Queue, id: &str) -> Result<i64, String> {
    let mut tries = harness::Tries::every(WAITING_GUARD, LOOK_EVERY);
    while tries.again().await {
        let Ok(now) = queue.server_time().await else {
            continue;
        };
        if let Ok(Status::AwaitingSignal { task }) =
            event_bridge::inspect::status(queue, &now, id).await
            && let Some(until_ms) = task.envelope.as_ref().and_then(|e| e.retry_at)
        {
            return Ok(until_ms);
        }
    }
    Err(format!("never found waiting within {WAITING_GUARD:?}"))
}

#[derive(Debug, Default)]
pub struct WaitFigures {
    /// Deliveries after a sleep, or after a wait that timed out.
    pub after_sleep: usize,
    pub after_timeout: usize,
    /// Tasks redriven, those redriven while their wait went on, and what went otherwise.
    pub redriven: usize,
    pub in_time: usize,
    pub trouble: Vec<String>,
    /// Claims of a redriven task before its wait ended, suspended again (the logs).
    pub back_early: usize,
    /// Deliveries before their sleep or wait ended.
    pub early: Vec<String>,
}

/// Judges the resumable deliveries (see the module's documentation) and the redrives.
pub fn judge<'a>(
    deliveries: impl IntoIterator<Item = &'a Delivery>,
    redrives: &[Redrive],
    back_early: usize,
) -> WaitFigures {
    let mut f = WaitFigures {
        redriven: redrives.iter().filter(|r| r.redriven_ms.is_some()).count(),
        in_time: redrives.iter().filter(|r| r.in_time()).count(),
        trouble: (redrives.iter())
            .filter_map(|r| Some(format!("{}: {}", r.id, r.trouble.as_ref()?)))
            .collect(),
        back_early,
        ..Default::default()
    };
    for d in deliveries {
        let Some(ended) = d.resume.as_ref().and_then(|r| r.ended.as_ref()) else {
            continue;
        };
        let until_ms = match ended {
            Ended::Sleep { until_ms } => {
                f.after_sleep += 1;
                *until_ms
            }
            Ended::Timeout { until_ms } => {
                f.after_timeout += 1;
                *until_ms
            }
            Ended::Signal => continue,
        };
        if d.arrived_ms < until_ms {
            f.early.push(format!(
                "{} ({}, token {}) arrived at {} after {ended:?}, {} ms before it ended",
                d.id,
                d.task,
                d.token,
                crate::receiver::clock(d.arrived_ms),
                until_ms - d.arrived_ms
            ));
        }
    }
    f
}

impl WaitFigures {
    /// Whether the run broke the guarantee, or never put it to the test (no redrive landed
    /// while its wait went on).
    pub fn failed(&self) -> bool {
        !self.early.is_empty() || self.in_time == 0 || self.after_timeout == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receiver::Answer;
    use crate::resumable::Resumed;

    fn delivery(arrived_ms: i64, ended: Ended) -> Delivery {
        let now = tokio::time::Instant::now();
        Delivery {
            id: "id".into(),
            task: "task".into(),
            event_type: crate::resumable::RESUMABLE_TYPE.into(),
            group: None,
            seq: None,
            key: None,
            slot_ms: None,
            attempt: 1,
            token: 1,
            arrived: now,
            arrived_ms,
            answer: Answer::Ok,
            answered: now,
            resume: Some(Resumed {
                step: 3,
                from_token: None,
                outcome: None,
                ended: Some(ended),
            }),
        }
    }

    /// A delivery after a sleep, or after a wait that timed out, before its `until_ms` is
    /// early; at or after it, or after a signal, it is not.
    #[test]
    fn a_delivery_before_its_sleep_or_wait_ended_is_early() {
        let on_time = [
            delivery(1_000, Ended::Timeout { until_ms: 1_000 }),
            delivery(2_000, Ended::Sleep { until_ms: 1_500 }),
            delivery(10, Ended::Signal),
        ];
        assert!(judge(&on_time, &[], 0).early.is_empty());
        let redriven_at_once = [delivery(999, Ended::Timeout { until_ms: 6_000 })];
        assert_eq!(judge(&redriven_at_once, &[], 0).early.len(), 1);
        let woke_early = [delivery(999, Ended::Sleep { until_ms: 1_000 })];
        assert_eq!(judge(&woke_early, &[], 0).early.len(), 1);
    }

    /// A run where no redrive landed while its wait went on did not test the guarantee.
    #[test]
    fn a_run_without_a_redrive_in_a_wait_fails() {
        let on_time = [delivery(1_000, Ended::Timeout { until_ms: 1_000 })];
        let late = Redrive {
            id: "id".into(),
            until_ms: Some(1_000),
            redriven_ms: Some(1_200),
            trouble: None,
        };
        assert!(judge(&on_time, std::slice::from_ref(&late), 0).failed());
        let in_time = Redrive {
            redriven_ms: Some(400),
            ..late
        };
        assert!(!judge(&on_time, &[in_time], 1).failed());
    }
}
