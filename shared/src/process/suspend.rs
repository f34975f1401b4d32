//! A resumable handler that suspended ([`HandlerError::Suspended`](crate::HandlerError)) is
//! given back with its record, no attempt counted:
//!
//! - stopping: in place, to resume at once in another run: the run that gave it back claims
//!   it no more (another run, or the next invocation, takes it at once);
//! - asleep: under `delayed/` until the sleep ends;
//! - waiting for signals: a signal already kept for one of its keys is consumed in the
//!   release's multi-op, with a note of it for its signaller, and the task stays in place
//!   with it; otherwise it waits under
//!   `delayed/` until its timeout, registered under each key in the same multi-op, which also
//!   checks each key's version as read (a signal sent meanwhile fails it, and it reads again).

use tokio::time::Instant;

use super::Run;
use super::send::Sent;
use super::task_steps::Ran;
use super::task_steps::outcome;
use crate::error::Result;
use crate::layout::delay_bucket_of;
use crate::queue::{
    CANCELLED, Extra, GiveBack, Lease, Look, Queue, Settled, TaskOutcome, Tries, Waiter,
    taken_note, waiter_name, waiting_name,
};
use crate::resume::{Suspend, WaitOutcome};

/// How long a refilling run (a worker's drain) leaves a task it stopped to another run before
/// it takes it again itself: as long as an idle worker waits between drains
/// (`worker::WORKER_IDLE_CHECK`, which a test holds equal).
pub(crate) const TAKE_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

impl<H> Run<'_, H> {
    /// Gives back a task whose handler suspended, as its handle says.
    pub(super) async fn suspend(&self, lease: Lease) -> Result<TaskOutcome> {
        let now_ms = self.now.now_ms();
        let back = |due_ms: Option<i64>| GiveBack {
            due_ms,
            ..GiveBack::default()
        };
        let (lease, back) = match lease.task.steps.suspended().unwrap_or(Suspend::Now) {
            Suspend::Now => return self.stop(lease).await,
            Suspend::Sleep { until_ms } => (lease, back(Some(until_ms.max(now_ms + 1)))),
            Suspend::Wait { keys, until_ms } => return self.wait(lease, &keys, until_ms).await,
        };
        let raced = "a release without a feature's writes cannot race";
        Ok(self.give_back(lease, back).await?.expect(raced))
    }

    /// Gives back a task claimed before the sleep or wait its record is in ended (`again`):
    /// suspended in it again without running its handler.
    pub(super) async fn suspend_again(&self, mut lease: Lease, again: Suspend) -> Result<Ran> {
        let name = lease.task.name.clone();
        let (until_ms, keys) = match &again {
            Suspend::Sleep { until_ms } => (*until_ms, None),
            Suspend::Wait { keys, until_ms } => (*until_ms, Some(keys.join(","))),
            Suspend::Now => (0, None),
        };
        tracing::info!(task = %name, run = %self.id, until_ms, keys, now_ms = self.now.now_ms(),
            "back before its sleep or wait ended: suspended in it again, its handler not run");
        self.queue().gates().free_slots(&lease.take_slots()).await;
        let outcome = self.suspend(lease).await?;
        Ok(Ran::Settled(outcome, true, name))
    }

    /// Gives back in place a task whose handler stopped, to resume at once in another run.
    async fn stop(&self, lease: Lease) -> Result<TaskOutcome> {
        let name = lease.task.name.clone();
        let steps_done = lease.task.steps.steps_done();
        let raced = "a release without a feature's writes cannot race";
        let outcome = self
            .give_back(lease, GiveBack::default())
            .await?
            .expect(raced);
        self.for_another_run(&name, "stopped", steps_done, &outcome);
        Ok(outcome)
    }

    /// Notes that task `name`, given back with `outcome` in place to resume at once, is for
    /// another run to claim (`why`: what gave it back).
    fn for_another_run(&self, name: &str, why: &str, steps_done: usize, outcome: &TaskOutcome) {
        if !matches!(outcome, TaskOutcome::Suspended) {
            return;
        }
        tracing::info!(task = %name, run = %self.id, consumer = %self.queue().consumer_id(),
            reason = why, steps_done, "released to resume in another run");
        let mut elsewhere = self.resume_elsewhere.lock().expect("not poisoned");
        elsewhere.insert(name.to_string(), Instant::now());
    }

    /// Whether this run gave task `name` back to resume in another run, and leaves it to one.
    /// A refilling run (a worker's drain) lasts while tasks keep coming, so its "another run"
    /// is a pass after [`TAKE_AGAIN_AFTER`]: not starved for the drain's life.
    pub(super) fn resumes_elsewhere(&self, name: &str) -> bool {
        let mut elsewhere = self.resume_elsewhere.lock().expect("not poisoned");
        let Some(since) = elsewhere.get(name) else {
            return false;
        };
        if self.refill.is_some() && since.elapsed() >= TAKE_AGAIN_AFTER {
            elsewhere.remove(name);
            return false;
        }
        true
    }

    /// Gives back a task that waits for any one of `keys` until `until_ms`.
    async fn wait(&self, lease: Lease, keys: &[String], until_ms: i64) -> Result<TaskOutcome> {
        for _ in 0..Tries::Few.most() {
            let looks = match self.look(keys).await {
                Ok(looks) => looks,
                Err(error) => {
                    tracing::warn!(task = %lease.task.name, %error, "signals not read: the wait is asked for again on the next run");
                    break;
                }
            };
            let kept = keys.iter().zip(&looks).find_map(|(key, look)| {
                let (path, payload) = look.oldest.clone()?;
                Some((key.clone(), path, payload))
            });
            let back = match kept {
                Some((key, path, payload)) => {
                    lease
                        .task
                        .steps
                        .end_wait(Some(WaitOutcome::Signal { key, payload }));
                    // A note of it for its signaller, who may not have answered yet.
                    let (note, data) = taken_note(&path, &lease.task.name);
                    GiveBack {
                        extra: vec![Extra::Delete(path), Extra::Create(note, data)],
                        ..GiveBack::default()
                    }
                }
                None => {
                    lease.task.steps.end_wait(None);
                    let versions = looks.iter().map(|l| l.version);
                    self.registered(&lease, keys.iter().zip(versions), until_ms)?
                }
            };
            if let Some(outcome) = self.give_back(lease.clone(), back).await? {
                return Ok(outcome);
            }
        }
        // Signals kept racing the registration, or could not be read: it asks for the wait
        // again on its next run.
        lease.task.steps.retract_wait();
        let (name, steps_done) = (lease.task.name.clone(), lease.task.steps.steps_done());
        let back = GiveBack::default();
        let outcome = (self.give_back(lease, back).await?).unwrap_or(TaskOutcome::LeaseLost);
        self.for_another_run(&name, "wait taken back", steps_done, &outcome);
        Ok(outcome)
    }

    /// What each of `keys` holds: its version and its oldest signal.
    async fn look(&self, keys: &[String]) -> Result<Vec<Look>> {
        let queue = self.queue();
        let mut looks = Vec::with_capacity(keys.len());
        for key in keys {
            looks.push(queue.signals().look(key).await?);
        }
        Ok(looks)
    }

    /// The release of a task that waits until `until_ms`, registered under each key (with the
    /// version it was read at).
    fn registered<'k>(
        &self,
        lease: &Lease,
        keys: impl Iterator<Item = (&'k String, i32)>,
        until_ms: i64,
    ) -> Result<GiveBack> {
        let now_ms = self.now.now_ms();
        let due = until_ms.max(now_ms + 1);
        let layout = self.queue().layout().clone();
        let name = &lease.task.name;
        let keys: Vec<(&String, i32)> = keys.collect();
        let waiter = Waiter {
            waiting: layout.delayed_task(delay_bucket_of(due), &waiting_name(due, name)),
            keys: keys.iter().map(|(k, _)| (*k).clone()).collect(),
        };
        let data = serde_json::to_vec(&waiter)?;
        let registration = waiter_name(now_ms, name);
        let mut extra = Vec::with_capacity(keys.len() * 2);
        for (key, version) in keys {
            let key_path = layout.signal_key(key);
            extra.push(Extra::Create(
                format!("{key_path}/{registration}"),
                data.clone(),
            ));
            extra.push(Extra::Check(key_path, version));
        }
        Ok(GiveBack {
            due_ms: Some(due),
            extra,
            ..GiveBack::default()
        })
    }

    /// Gives `lease` back as `back` says, no attempt counted; a task cancelled meanwhile is
    /// buried instead. `None` when one of `back.extra` failed: nothing changed.
    async fn give_back(&self, lease: Lease, back: GiveBack) -> Result<Option<TaskOutcome>> {
        let name = lease.task.name.clone();
        let write = |queue: Queue| {
            let (lease, back) = (lease.clone(), back.clone());
            async move { queue.release(lease, back).await }
        };
        Ok(Some(match self.settle(write).await? {
            Sent::Answered(Settled::Cancelled, _) => self.bury(lease, CANCELLED, None).await?,
            Sent::Answered(Settled::Raced, _) => return Ok(None),
            sent => outcome(sent, TaskOutcome::Suspended, &name),
        }))
    }
}
