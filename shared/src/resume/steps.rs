//! [`Steps`]: the handle a handler resumes through, on its [`Task`](crate::task::Task).
//!
//! The handler asks for its work in order: [`Steps::step`], [`Steps::sleep`],
//! [`Steps::wait_for`], [`Steps::patched`]. Each ask is replayed against the task's record
//! ([`super::record`]): what is recorded answers at once; what is new runs and is recorded.
//!
//! A step's result is written before `step` returns: the handle asks the holder for an early
//! lease extension, and that extension's multi-op stores the new entry in a step znode of its
//! own and rewrites the task's body with the record's tail ([`super::store`]; checked at the
//! lease's version, so only the holder's write lands). One write per step, and it is the
//! extension too; its size does not grow with the steps before it. A sleep, a wait or a stop
//! ends the handler with [`HandlerError::Suspended`]; the holder then releases the task with
//! its record ([`crate::process`]).

mod holder;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::order::{Fate, Order};
use super::record::{Ask, Entry, Record, Replayed, WaitOutcome};
use crate::clock::ZkTime;
use crate::handler_error::HandlerError;

/// The most keys one wait may name.
pub const MAX_WAIT_KEYS: usize = 16;

/// The handle a handler resumes through; clones share one record.
#[derive(Clone, Debug, Default)]
pub struct Steps(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    /// The handler asks the holder for a write.
    flush: Notify,
    /// The handler asked for something for the first time.
    first_used: Notify,
    /// Entries held for the steps asked before them went to the record, or were dropped.
    recorded: Notify,
    /// What the holder wrote: the record as of change n, or the lease lost.
    written: watch::Sender<Written>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            inner: Mutex::default(),
            flush: Notify::new(),
            first_used: Notify::new(),
            recorded: Notify::new(),
            written: watch::channel(Written::Upto(0)).0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    Upto(u64),
    Lost,
}

#[derive(Debug, Default)]
struct Inner {
    /// The record as the envelope keeps it, with the entries recorded since the last write.
    record: Record,
    /// Its `stored` entries, read back from their znodes at the claim or stored by this run.
    earlier: Vec<Entry>,
    /// Whether the task had a record, or the handler asked for anything.
    used: bool,
    /// The next position to replay, or to take for new work.
    cursor: usize,
    /// New work asked for and not yet in the record, in the order asked ([`super::order`]).
    order: Order,
    /// Whether this run recorded a step or kept a checkpoint: progress.
    progressed: bool,
    /// Changes made to the record so far.
    changes: u64,
    suspend: Option<Suspend>,
    /// The checkpoint a wait asked for with [`Steps::suspend_with`] replaced: what the record
    /// goes back to when the wait is taken back.
    before_wait: Option<Option<Value>>,
    /// Whether this run suspended the task again in the sleep or wait its record was in,
    /// without running its handler: that wait is never taken back.
    again: bool,
    fatal: Option<String>,
    stopping: bool,
    bound: Option<Binding>,
}

/// What the holder tells the handle when it starts the handler.
#[derive(Clone, Debug)]
pub struct Binding {
    /// ZooKeeper's clock, for a sleep's and a wait's end.
    pub now: ZkTime,
    /// From then on the handler should stop ([`Steps::stopping`]).
    pub stop_at: Instant,
    /// The largest record it may write (`CHECKPOINT_MAX_BYTES`): the envelope's part of it
    /// with the entries not yet stored.
    pub max_bytes: usize,
    /// The handler's version (`EVENT_BRIDGE_HANDLER_VERSION`).
    pub version: Option<String>,
}

/// When a handler suspended with [`Steps::suspend_with`] resumes.
#[derive(Clone, Debug, PartialEq)]
pub enum Then {
    /// At once, in another run.
    Now,
    /// After this long.
    In(Duration),
    /// When any one of `keys` is signalled, or `timeout` passed.
    WaitFor {
        /// The signal keys, any one of which resumes it.
        keys: Vec<String>,
        /// How long to wait before resuming without a signal.
        timeout: Duration,
    },
}

/// Why a handler suspended.
#[derive(Clone, Debug, PartialEq)]
pub enum Suspend {
    /// Stopping: to resume at once, in another run.
    Now,
    /// Asleep until this ZooKeeper time.
    Sleep {
        /// When it wakes.
        until_ms: i64,
    },
    /// Waiting for any one of `keys` until this ZooKeeper time.
    Wait {
        /// The keys, any one of which ends the wait.
        keys: Vec<String>,
        /// When the wait times out.
        until_ms: i64,
    },
}

impl Suspend {
    /// What holds the task for a time (`sleep`, `wait`); none for a stop.
    fn holds_time(&self) -> Option<&'static str> {
        match self {
            Suspend::Now => None,
            Suspend::Sleep { .. } => Some("sleep"),
            Suspend::Wait { .. } => Some("wait"),
        }
    }
}

impl PartialEq for Steps {
    /// Every handle compares equal: the record is part of the envelope, not of the handle.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Steps {
    /// The handle of a task claimed with `record` (none: it never asked for anything). A
    /// record with stored entries needs them read back ([`Steps::read_back`]) before its
    /// handler runs.
    pub fn resumed(record: Option<Record>) -> Self {
        let steps = Steps::default();
        if let Some(record) = record {
            let mut inner = steps.lock();
            inner.record = record;
            inner.used = true;
        }
        steps
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.inner.lock().expect("steps lock")
    }

    /// Runs `work` once: on every later attempt its recorded result is returned without
    /// running it. The result is written before this returns. When the run is stopping, a new
    /// step does not start: the handler is suspended, to resume in another run.
    ///
    /// Steps awaited together (`tokio::join!`) are recorded in the order they were called,
    /// whichever finishes first, so a replay meets them in the same order: one that finishes
    /// before a step called earlier returns once that one is recorded too. When a step called
    /// earlier fails (or is dropped), the steps called after it are not recorded in this run.
    ///
    /// # Errors
    /// - what `work` returned (nothing is recorded);
    /// - [`HandlerError::Suspended`] when stopping;
    /// - [`HandlerError::Permanent`] for a non-deterministic resume (another step where a
    ///   recorded one should come), a recorded result that no longer reads as `T`, or a result
    ///   that takes the envelope's part of the record over `CHECKPOINT_MAX_BYTES`: the task
    ///   goes to the dead letters with that reason.
    pub async fn step<T, F>(&self, name: &str, work: F) -> Result<T, HandlerError>
    where
        T: Serialize + DeserializeOwned,
        F: Future<Output = Result<T, HandlerError>>,
    {
        if let Some(Entry::Step { result, .. }) = self.ask(&Ask::Step(name))? {
            return serde_json::from_value(result).map_err(|e| {
                self.fatal(format!(
                    "step {name:?} recorded a result that does not read as its type now: {e}"
                ))
            });
        }
        if self.stopping() {
            return Err(self.stop());
        }
        // Its place in the record is taken now, when it is asked for, whenever it finishes.
        let slot = self.reserve();
        let value = work.await?;
        let result = serde_json::to_value(&value)
            .map_err(|e| self.fatal(format!("step {name:?} returned what is not JSON: {e}")))?;
        let name = name.to_string();
        let id = slot.fill(Entry::Step { name, result })?;
        match self.recorded(id).await {
            // A step asked before it ended without a result: this one runs again next time.
            Fate::Dropped => {}
            _ => self.written().await?,
        }
        Ok(value)
    }

    /// Sleeps for `duration` holding no lease: the task is released with that delay and its
    /// record, and the handler resumes after it.
    ///
    /// # Errors
    /// [`HandlerError::Suspended`] the first time (return it), a mismatch as for `step`.
    #[must_use = "a sleep suspends the handler: return the error it gives (`steps.sleep(d).await?`)"]
    pub async fn sleep(&self, duration: Duration) -> Result<(), HandlerError> {
        if self.ask(&Ask::Sleep)?.is_some() {
            return Ok(());
        }
        let until_ms = self.now_ms().saturating_add(crate::clock::millis(duration));
        self.append(Entry::Sleep { until_ms })?;
        Err(self.suspend(Suspend::Sleep { until_ms }))
    }

    /// Waits until any one of `keys` is signalled ([`crate::queue::Signals::signal`]), or `timeout`
    /// passes, holding no lease. A signal sent before the wait is kept and consumed by it.
    ///
    /// # Errors
    /// [`HandlerError::Suspended`] until the wait ended (return it); a mismatch as for
    /// `step`; keys that cannot be waited for ([`HandlerError::Permanent`]).
    #[must_use = "a wait suspends the handler: return the error it gives (`steps.wait_for(..).await?`)"]
    pub async fn wait_for<K: AsRef<str>>(
        &self,
        keys: &[K],
        timeout: Duration,
    ) -> Result<WaitOutcome, HandlerError> {
        let keys: Vec<String> = keys.iter().map(|k| k.as_ref().to_string()).collect();
        if let Err(problem) = check_keys(&keys) {
            return Err(self.fatal(problem));
        }
        match self.ask(&Ask::Wait(&keys))? {
            Some(Entry::Wait {
                outcome: Some(outcome),
                ..
            }) => return Ok(outcome),
            // Back in the queue without a signal: its timeout passed.
            Some(Entry::Wait { .. }) => return Ok(self.timed_out()),
            _ => {}
        }
        let until_ms = self.now_ms().saturating_add(crate::clock::millis(timeout));
        let wait = Entry::Wait {
            keys: keys.clone(),
            until_ms,
            outcome: None,
        };
        self.append(wait)?;
        Err(self.suspend(Suspend::Wait { keys, until_ms }))
    }

    /// Whether the handler takes the new path of change `id`: true for a task that reaches
    /// this point after the change was deployed, false for one that had passed it before.
    pub fn patched(&self, id: &str) -> bool {
        let mut inner = self.lock();
        self.use_it(&mut inner);
        let position = inner.cursor;
        match inner
            .record
            .replay(&inner.earlier, position, &Ask::Patch(id))
        {
            Ok(Replayed::Recorded(_)) => {
                inner.cursor += 1;
                true
            }
            Ok(Replayed::New) => {
                drop(inner);
                self.append(Entry::Patch { id: id.into() }).is_ok()
            }
            Ok(Replayed::Unpatched) | Err(_) => false,
        }
    }

    /// Keeps `value` as the task's checkpoint and writes it before returning.
    ///
    /// # Errors
    /// [`HandlerError::Permanent`] when it is not JSON or the record grows over the cap.
    pub async fn checkpoint<T: Serialize>(&self, value: &T) -> Result<(), HandlerError> {
        let value = serde_json::to_value(value)
            .map_err(|e| self.fatal(format!("checkpoint is not JSON: {e}")))?;
        {
            let mut inner = self.lock();
            self.use_it(&mut inner);
            inner.record.checkpoint = Some(value);
            inner.changes += 1;
            inner.progressed = true;
        }
        self.check_size("checkpoint")?;
        self.written().await
    }

    /// The last checkpoint kept, if any (and readable as `T`).
    pub fn checkpointed<T: DeserializeOwned>(&self) -> Option<T> {
        let value = self.lock().record.checkpoint.clone()?;
        serde_json::from_value(value).ok()
    }

    /// Whether the handler should save and return: the run's deadline is near, its stop
    /// signal came, the lease was lost, or the task was cancelled or its type (or the queue)
    /// paused (the run looks every half second while a resumable handler runs).
    pub fn stopping(&self) -> bool {
        let inner = self.lock();
        inner.stopping
            || inner
                .bound
                .as_ref()
                .is_some_and(|b| Instant::now() >= b.stop_at)
    }

    /// Suspends the handler to resume at once in another run: return what this returns. The
    /// run that stopped it does not claim it again.
    #[must_use = "stop suspends the handler only when its error is returned (`Err(steps.stop())`)"]
    pub fn stop(&self) -> HandlerError {
        self.suspend(Suspend::Now)
    }

    /// Suspends with `checkpoint` (none: the last one stays) to resume as `then` says: the
    /// lower-level way in, for a handler that keeps its own state in its checkpoint rather
    /// than in named steps (the HTTP sink answers a webhook's `202` with it). The sleep or
    /// wait is recorded without a replay check. Return what this returns.
    #[must_use = "a suspension takes effect only when its error is returned"]
    pub fn suspend_with(&self, checkpoint: Option<Value>, then: Then) -> HandlerError {
        let (entry, suspend) = {
            let now_ms = self.now_ms();
            let end = |d: Duration| now_ms.saturating_add(crate::clock::millis(d));
            match then {
                Then::Now => (None, Suspend::Now),
                Then::In(after) => {
                    let until_ms = end(after);
                    (Some(Entry::Sleep { until_ms }), Suspend::Sleep { until_ms })
                }
                Then::WaitFor { keys, timeout } => {
                    if let Err(problem) = check_keys(&keys) {
                        return self.fatal(problem);
                    }
                    let until_ms = end(timeout);
                    let entry = Entry::Wait {
                        keys: keys.clone(),
                        until_ms,
                        outcome: None,
                    };
                    (Some(entry), Suspend::Wait { keys, until_ms })
                }
            }
        };
        {
            let mut inner = self.lock();
            self.use_it(&mut inner);
            if let Some(checkpoint) = checkpoint {
                let before = inner.record.checkpoint.replace(checkpoint);
                if matches!(entry, Some(Entry::Wait { .. })) {
                    inner.before_wait = Some(before);
                }
                inner.changes += 1;
            }
        }
        let appended = match entry {
            Some(entry) => self.append(entry),
            None => self.check_size("checkpoint"),
        };
        match appended {
            Ok(()) => self.suspend(suspend),
            Err(e) => e,
        }
    }

    /// How long until the handler should stop ([`Steps::stopping`]); none when no run holds
    /// the task.
    pub fn time_left(&self) -> Option<Duration> {
        let inner = self.lock();
        let bound = inner.bound.as_ref()?;
        Some(bound.stop_at.saturating_duration_since(Instant::now()))
    }

    /// The largest part of the record the envelope may keep (`CHECKPOINT_MAX_BYTES`: a
    /// checkpoint, a step's result); none when no run holds the task.
    pub fn max_bytes(&self) -> Option<usize> {
        self.lock().bound.as_ref().map(|b| b.max_bytes)
    }

    /// The record as a delivery shows it: a wait that ended without a signal reads as timed
    /// out. None when the task never had one.
    pub fn delivered_record(&self) -> Option<Record> {
        let mut inner = self.lock();
        if !inner.used {
            return None;
        }
        if let Some(Entry::Wait { outcome, .. }) = inner.record.done.last_mut()
            && outcome.is_none()
        {
            *outcome = Some(WaitOutcome::Timeout);
            inner.changes += 1;
        }
        Some(inner.record.clone())
    }

    /// The handler version the task started with.
    pub fn started_with(&self) -> Option<String> {
        self.lock().record.version.clone()
    }

    /// Steps done so far (recorded or run now).
    pub fn steps_done(&self) -> usize {
        self.lock().record.steps_done()
    }

    /// Notes that the handler asked for something (`inner`: the handle's state, locked).
    fn use_it(&self, inner: &mut Inner) {
        if !inner.used {
            inner.used = true;
            self.0.first_used.notify_waiters();
        }
    }

    /// Answers `ask` from the record: the entry recorded there, or none for new work.
    fn ask(&self, ask: &Ask<'_>) -> Result<Option<Entry>, HandlerError> {
        let mut inner = self.lock();
        self.use_it(&mut inner);
        if let Some(asleep) = inner.suspend.as_ref().and_then(Suspend::holds_time) {
            drop(inner);
            return Err(self.fatal(format!(
                "{} asked after a {asleep} suspended the handler: return the error the {asleep} \
                 gave (`?`) instead of going on",
                ask.label()
            )));
        }
        let position = inner.cursor;
        match inner.record.replay(&inner.earlier, position, ask) {
            Ok(Replayed::Recorded(entry)) => {
                let entry = entry.clone();
                inner.cursor += 1;
                Ok(Some(entry))
            }
            Ok(_) => Ok(None),
            Err(mismatch) => {
                drop(inner);
                Err(self.fatal(mismatch.to_string()))
            }
        }
    }

    /// Records new work asked for now: after the steps asked before it that still run.
    fn append(&self, entry: Entry) -> Result<(), HandlerError> {
        self.reserve().fill(entry).map(drop)
    }

    /// Takes the next place in the record for new work.
    fn reserve(&self) -> Slot<'_> {
        let mut inner = self.lock();
        let id = inner.order.reserve();
        inner.cursor = inner.record.len() + inner.order.pending();
        Slot {
            steps: self,
            id,
            filled: false,
        }
    }

    /// Resolves once the entry of slot `id`, filled, is in the record or dropped.
    async fn recorded(&self, id: u64) -> Fate {
        loop {
            let notified = self.0.recorded.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let fate = self.lock().order.fate(id);
            match fate {
                Fate::Held => notified.await,
                fate => return fate,
            }
        }
    }

    /// Gives slot `id` up unfilled (its step failed or was dropped), with the slots after it.
    fn give_up(&self, id: u64) {
        let Ok(mut inner) = self.0.inner.lock() else {
            return;
        };
        let lost = inner.order.give_up(id);
        inner.cursor = inner.record.len() + inner.order.pending();
        drop(inner);
        self.0.recorded.notify_waiters();
        // A sleep or wait the handler suspended in can no longer be recorded.
        if let Some(lost) = lost
            .iter()
            .find(|e| !matches!(e, Entry::Step { .. } | Entry::Patch { .. }))
        {
            self.fatal(format!(
                "{} was asked while a step asked before it still ran, and that step ended \
                 without a result: await steps before a sleep or a wait",
                lost.label()
            ));
        }
    }

    fn check_size(&self, what: &str) -> Result<(), HandlerError> {
        let inner = self.lock();
        let max = inner.bound.as_ref().map_or(usize::MAX, |b| b.max_bytes);
        let size = inner.record.size();
        drop(inner);
        if size > max {
            return Err(self.fatal(format!(
                "checkpoint after {what} is {size} bytes, over the {max}-byte cap \
                 (CHECKPOINT_MAX_BYTES)"
            )));
        }
        Ok(())
    }

    /// Waits until the holder wrote every change so far; at once when no holder writes.
    async fn written(&self) -> Result<(), HandlerError> {
        let changes = {
            let inner = self.lock();
            if inner.bound.is_none() {
                return Ok(());
            }
            inner.changes
        };
        self.0.flush.notify_one();
        let mut written = self.0.written.subscribe();
        let done = written
            .wait_for(|w| *w == Written::Lost || matches!(w, Written::Upto(n) if *n >= changes))
            .await
            .map(|w| *w);
        match done {
            Ok(Written::Upto(_)) => Ok(()),
            _ => Err(HandlerError::Retryable(
                "the lease was lost before the checkpoint was written".into(),
            )),
        }
    }

    fn timed_out(&self) -> WaitOutcome {
        let mut inner = self.lock();
        let position = (inner.cursor - 1).checked_sub(inner.record.stored);
        let entry = position.and_then(|at| inner.record.done.get_mut(at));
        if let Some(Entry::Wait { outcome, .. }) = entry {
            *outcome = Some(WaitOutcome::Timeout);
        }
        inner.changes += 1;
        WaitOutcome::Timeout
    }

    fn suspend(&self, suspend: Suspend) -> HandlerError {
        let mut inner = self.lock();
        inner.suspend.get_or_insert(suspend);
        HandlerError::Suspended
    }

    fn fatal(&self, reason: String) -> HandlerError {
        let mut inner = self.lock();
        inner.fatal.get_or_insert(reason.clone());
        HandlerError::Permanent(reason)
    }

    fn now_ms(&self) -> i64 {
        let inner = self.lock();
        inner
            .bound
            .as_ref()
            .map_or_else(|| chrono::Utc::now().timestamp_millis(), |b| b.now.now_ms())
    }
}

/// A place in the record taken by new work ([`super::order`]); given up when dropped unfilled.
struct Slot<'s> {
    steps: &'s Steps,
    id: u64,
    filled: bool,
}

impl Slot<'_> {
    /// Fills the place with `entry`: into the record with every entry now ready, or held until
    /// the work asked before it is done. Its id.
    ///
    /// # Errors
    /// [`HandlerError::Permanent`] when the record grows over the cap.
    fn fill(mut self, entry: Entry) -> Result<u64, HandlerError> {
        self.filled = true;
        let steps = self.steps;
        let label = entry.label();
        {
            let mut inner = steps.lock();
            let ready = inner.order.fill(self.id, entry);
            if ready.is_empty() {
                return Ok(self.id);
            }
            if inner.record.version.is_none() {
                inner.record.version = inner.bound.as_ref().and_then(|b| b.version.clone());
            }
            for entry in ready {
                inner.progressed |= matches!(entry, Entry::Step { .. });
                inner.record.done.push(entry);
                inner.changes += 1;
            }
            inner.cursor = inner.record.len() + inner.order.pending();
        }
        steps.0.recorded.notify_waiters();
        steps.check_size(&label).map(|()| self.id)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.filled {
            self.steps.give_up(self.id);
        }
    }
}

/// Refuses keys a wait cannot name.
fn check_keys(keys: &[String]) -> Result<(), String> {
    if keys.is_empty() {
        return Err("a wait names no key".into());
    }
    if keys.len() > MAX_WAIT_KEYS {
        return Err(format!(
            "a wait names {} keys, over the {MAX_WAIT_KEYS} it may",
            keys.len()
        ));
    }
    for key in keys {
        super::check_signal_key(key)?;
    }
    Ok(())
}
