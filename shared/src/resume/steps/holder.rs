//! What the holder of a resumable task does with its [`Steps`] handle: binds it to the run,
//! writes the record the handler changed (in the lease's extension), reads the step znodes back
//! at a claim, ends or retracts a wait, and learns at the handler's end whether it suspended,
//! progressed or failed. The handler's side is in the parent module.

use super::{Binding, Steps, Suspend, Written};
use crate::resume::record::{Entry, WaitOutcome};
use crate::resume::store::Unwritten;

/// What the holder does with the handle.
impl Steps {
    /// Binds the handle to the run that holds the task.
    pub(crate) fn bind(&self, binding: Binding) {
        self.lock().bound = Some(binding);
    }

    /// The write of the record, when a change is not written yet.
    pub(crate) fn unwritten(&self) -> Option<Unwritten> {
        let inner = self.lock();
        let written = match *self.0.written.borrow() {
            Written::Upto(n) => n,
            Written::Lost => return None,
        };
        (inner.changes > written).then(|| Unwritten::of(inner.changes, &inner.record))
    }

    /// The holder made `write`: its chunk is stored, the record written as of its change.
    pub(crate) fn wrote(&self, write: &Unwritten) {
        {
            let mut inner = self.lock();
            // Once: a write the holder learns of twice (its reply lost) moves nothing again.
            if inner.record.stored == write.first && !write.chunk.is_empty() {
                let count = write.chunk.len();
                inner.record = inner.record.after_storing(count);
                inner.earlier.extend(write.chunk.iter().cloned());
            }
        }
        let n = write.change;
        self.0.written.send_modify(|w| {
            if let Written::Upto(m) = w {
                *m = (*m).max(n);
            }
        });
    }

    /// The holder lost the lease: no write will come.
    pub(crate) fn lost(&self) {
        self.lock().stopping = true;
        self.0.written.send_replace(Written::Lost);
    }

    /// Resolves once the handler is resumable ([`Steps::used`]): at once, or at its first ask.
    pub(crate) async fn resumable(&self) {
        let first = self.0.first_used.notified();
        tokio::pin!(first);
        first.as_mut().enable();
        if self.used() {
            return;
        }
        first.await;
    }

    /// Whether the task had a record when claimed, or its handler asked for anything: a
    /// resumable handler.
    pub(crate) fn used(&self) -> bool {
        self.lock().used
    }

    /// Tells the handler to stop ([`Steps::stopping`]).
    pub(crate) fn set_stopping(&self) {
        self.lock().stopping = true;
    }

    /// Resolves when the handler asks for a write.
    pub(crate) async fn write_asked(&self) {
        self.0.flush.notified().await;
    }

    /// The write of the record as it stands, for the body of a release: none when the task
    /// never had one.
    pub(crate) fn record(&self) -> Option<Unwritten> {
        let inner = self.lock();
        inner
            .used
            .then(|| Unwritten::of(inner.changes, &inner.record))
    }

    /// How many entries the record keeps in step znodes that this handle has not read back:
    /// the claim's record has some, and they must be read before the handler runs.
    pub fn to_read_back(&self) -> usize {
        let inner = self.lock();
        inner.record.stored.saturating_sub(inner.earlier.len())
    }

    /// How many of the record's entries are in step znodes.
    pub(crate) fn stored(&self) -> usize {
        self.lock().record.stored
    }

    /// The record's stored entries, read back from their znodes (`resume::store::join`).
    pub fn read_back(&self, earlier: Vec<Entry>) {
        self.lock().earlier = earlier;
    }

    /// Sets how the wait the handler suspended in ended (none: not yet), before the release
    /// that writes it.
    pub(crate) fn end_wait(&self, ended: Option<WaitOutcome>) {
        let mut inner = self.lock();
        if let Some(Entry::Wait { outcome, .. }) = inner.record.done.last_mut() {
            *outcome = ended;
        }
    }

    /// Takes back the wait the handler suspended in, with the checkpoint it came with (a
    /// webhook's checkpoint says which step comes next, and that step is the wait): it asks
    /// for the wait again on its next run. A wait the record was in already, which this run
    /// suspended the task in again without running its handler ([`Self::suspended_until`]),
    /// stays: no handler asked for it in this run, so none would ask again, and the next run
    /// suspends the task in it again.
    pub(crate) fn retract_wait(&self) {
        let mut inner = self.lock();
        if inner.again {
            return;
        }
        if matches!(inner.record.done.last(), Some(Entry::Wait { .. })) {
            inner.record.done.pop();
            if let Some(before) = inner.before_wait.take() {
                inner.record.checkpoint = before;
                inner.changes += 1;
            }
        }
    }

    /// Why the handler suspended, if it did.
    pub(crate) fn suspended(&self) -> Option<Suspend> {
        self.lock().suspend.clone()
    }

    /// Whether this run recorded a step or kept a checkpoint: a run cut at its deadline after
    /// that made progress, and is no interruption.
    pub(crate) fn progressed(&self) -> bool {
        self.lock().progressed
    }

    /// The sleep or wait the task's record is in, when it has not ended by `now_ms`: the task
    /// came back before its time (a redrive of the dead letter it became when cancelled). The
    /// handle is suspended in it again, as it was, so that the handler is not run: the sleep
    /// goes on until its end, the wait until its timeout (a signal kept meanwhile ends it).
    pub(crate) fn suspended_until(&self, now_ms: i64) -> Option<Suspend> {
        let mut inner = self.lock();
        let again = match inner.record.suspended_in()? {
            Entry::Sleep { until_ms } if *until_ms > now_ms => Suspend::Sleep {
                until_ms: *until_ms,
            },
            Entry::Wait {
                keys,
                until_ms,
                outcome: None,
            } if *until_ms > now_ms => Suspend::Wait {
                keys: keys.clone(),
                until_ms: *until_ms,
            },
            _ => return None,
        };
        inner.suspend = Some(again.clone());
        inner.again = true;
        Some(again)
    }

    /// A handler that ended another way than with [`crate::HandlerError::Suspended`] (`suspended`
    /// false) after a sleep or wait suspended it swallowed that error (`let _ =
    /// steps.sleep(…)`): the sleep would be skipped, so the task cannot go on
    /// ([`Steps::failed`]).
    pub(crate) fn check_returned(&self, suspended: bool) {
        let asleep = self.lock().suspend.as_ref().and_then(Suspend::holds_time);
        if let (false, Some(asleep)) = (suspended, asleep) {
            self.fatal(format!(
                "the handler ended without the error a {asleep} gave it: return that error \
                 (`?`), or the {asleep} would be skipped"
            ));
        }
    }

    /// Why the task cannot go on (a non-deterministic resume, a record over the cap).
    pub(crate) fn failed(&self) -> Option<String> {
        self.lock().fatal.clone()
    }
}
