//! A held task: what its holder needs to settle it ([`Lease`]), and whether a holder's write
//! took effect ([`Settled`]). The claim makes a lease (`claim`); extending, completing,
//! releasing and burying take it (`holder`, `complete`, `bury`).

use super::group_lock::HeldLock;
use super::slots::SlotShare;
use crate::handler::Delivered;
use crate::task::Task;

/// A claimed task and what its holder needs to settle it. A clone settles nothing twice: the
/// second write finds the versions moved on and reports [`super::Settled::LeaseLost`].
#[derive(Clone, Debug)]
pub struct Lease {
    /// The task as its handler sees it.
    pub task: Task,
    pub(super) task_version: i32,
    pub(super) lease_version: i32,
    /// The group's lock, for a grouped task.
    pub(super) group_lock: Option<HeldLock>,
    /// What the handler's delivery came to, for the completion record.
    pub(super) delivered: Option<Delivered>,
    /// The places the task holds while its handler runs: in its route's gate, in its
    /// concurrency key's (each in the slot of the claim that took it).
    pub(super) slots: Vec<SlotShare>,
}

impl Lease {
    /// The places the task holds in gates.
    pub fn slots(&self) -> &[SlotShare] {
        &self.slots
    }

    /// Takes the places the task holds in gates (see [`super::Gates::free_slots`]).
    pub fn take_slots(&mut self) -> Vec<SlotShare> {
        std::mem::take(&mut self.slots)
    }

    /// The lease of a task whose delivery came to `delivered` (kept in its completion record
    /// when `KEEP_DONE` is set).
    pub fn delivered(self, delivered: Delivered) -> Self {
        Lease {
            delivered: Some(delivered),
            ..self
        }
    }
}

/// Whether a holder's write took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// It took effect.
    Done,
    /// The lease is no longer ours (expired and reaped, perhaps claimed again): nothing changed.
    LeaseLost,
    /// Nothing changed, because what the write would have done is done: the task is gone (or,
    /// for a release, already released). Sent after an earlier try of the same write whose
    /// reply was lost, this is that try having landed; otherwise another holder settled the
    /// task after our lease passed on.
    Gone,
    /// Nothing changed: the task was cancelled while held, so it may not be given back for
    /// another run (its holder buries it instead). Only a release says so.
    Cancelled,
    /// Nothing changed: a task we did not hold was taken, or changed, since it was read. Only
    /// a bury of a task nobody held, or of a waiting one, says so.
    Moved,
    /// Nothing changed: a write a feature added to a release failed (a signal consumed by
    /// another, a signal sent to a key a wait was about to register under). Only
    /// [`super::Queue::release`] with a feature's writes says so; its caller reads again.
    Raced,
}
