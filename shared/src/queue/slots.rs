//! Slots: the shares tasks hold in a gate that caps tasks in flight (see `gate`). The tasks
//! one claim admits through a gate hold one ephemeral znode together,
//! `<gate>/<n>.<tag>.<lead>`: `n` is how many of them still run, `tag` eight random hex digits
//! that keep the name unique, `lead` the name of the claim's first task (for a person reading
//! the tree). A gate's tasks in flight are the sum of its slots' `n`; a name without a count
//! (an older consumer's slot, one per task, named by the task) counts one.
//!
//! When some of a slot's tasks end, the slot is renamed to the smaller count in one multi-op
//! (delete, create): in the completion's multi-op for tasks that succeeded, on its own for
//! the others. When the last ends, it is deleted; ZooKeeper deletes it with its session. A
//! claim batch of 32 tasks through a gate thus costs two operations where one per task cost
//! 64. Only this process writes its slots, one write to a slot at a time (a lock per slot,
//! taken in name order), so each write knows the name the slot has, but for one whose answer
//! never came (the link dropped, the call was dropped): the slot is then in doubt, and the
//! next write to it first finds its name among the gate's children (see [`Locked::resolve`]).
//!
//! A slot says which claim it belongs to, so that the audit can tell one that counts tasks
//! no longer held: the claim's multi-op creates it with its leases, so its `czxid` is their
//! fencing token; a rename (a create in a later multi-op) writes that token as its data.
//!
//! A free lost with the link is sent again every second in the background until it lands or
//! the session ends (the contract checker found slots left for the rest of a worker's session,
//! which shrank the route for as long as the worker ran). A claim whose answer never came may
//! have made its slot with leases nobody will run on: that slot is deleted in the background (a
//! session's requests are answered in order, so after the claim), and the leases expire. A
//! consumer whose session is replaced while its handlers run loses their slots at once, so until
//! those handlers end the gate may let in up to its cap again beside them.
//!
//! # Costs
//!
//! One slot per task cost two operations a task (a `create` in the claim, a `delete` in the
//! completion): 40% more operations than an unlimited drain's five, and ZooKeeper's CPU for a
//! drain rose by as much (measured with `/proc/<pid>/stat` over the `make bench` drains). A slot
//! per claim costs two operations per claim batch and about two per completion batch. A limited
//! route costs its gate's rewrite and its slot in the claim's multi-op, the slots' renames in the
//! completion's, and a gate read shared by the claim batch when the gate is not known; unlimited
//! routes cost nothing. `make bench` measures a drain through a route with `max_in_flight`
//! against one without.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use tokio::sync::{Mutex, OwnedMutexGuard};

use super::ops::{Multi, Op};

/// A slot this process holds: its tasks still running, under one znode.
pub struct Slot {
    gate: String,
    /// The name's part after the count: `<tag>.<lead>`.
    tag: String,
    /// The fencing token of the claim that made it (its leases' `czxid`), once it landed.
    token: AtomicI64,
    held: Arc<Mutex<Held>>,
}

/// A slot's tasks still running; `gone` once its znode went without us (a session replaced).
struct Held {
    tasks: BTreeSet<String>,
    gone: bool,
    /// The tasks a write whose answer never came would have freed: it may have landed.
    doubt: Option<Vec<String>>,
}

impl Slot {
    /// The slot `tag` (see [`new_tag`]) in `gate`, for `tasks`.
    pub(super) fn new(gate: &str, tag: String, tasks: &[String]) -> Arc<Slot> {
        Arc::new(Slot {
            gate: gate.to_string(),
            tag,
            token: AtomicI64::new(0),
            held: Arc::new(Mutex::new(Held {
                tasks: tasks.iter().cloned().collect(),
                gone: false,
                doubt: None,
            })),
        })
    }

    /// The slot's path while it stands for `count` tasks.
    pub(super) fn path(&self, count: usize) -> String {
        slot_path(&self.gate, count, &self.tag)
    }

    pub(super) fn gate(&self) -> &str {
        &self.gate
    }

    /// The claim that made it landed with fencing token `token`.
    pub(super) fn landed(&self, token: i64) {
        self.token.store(token, Relaxed);
    }

    /// What a rename writes as the slot's data: its claim's fencing token.
    fn data(&self) -> Vec<u8> {
        match self.token.load(Relaxed) {
            0 => Vec::new(),
            token => token.to_string().into_bytes(),
        }
    }
}

/// The fencing token of the claim a slot belongs to, from its `data` and `czxid` (see the
/// module's doc). (A slot an earlier version renamed has empty data and a rename's `czxid`:
/// it reads as a claim with no lease.)
pub fn claim_token(data: &[u8], czxid: i64) -> i64 {
    (std::str::from_utf8(data).ok())
        .and_then(|data| data.parse().ok())
        .unwrap_or(czxid)
}

/// The path of a slot of `count` tasks named `tag` in `gate`.
pub(super) fn slot_path(gate: &str, count: usize, tag: &str) -> String {
    format!("{gate}/{count}.{tag}")
}

/// A new slot's name part after its count (see [`Slot`]), for a claim led by task `lead`.
pub(super) fn new_tag(lead: &str) -> String {
    format!("{:08x}.{lead}", fastrand::u32(..))
}

/// One task's share of a slot.
#[derive(Clone)]
pub struct SlotShare {
    slot: Arc<Slot>,
    task: String,
}

impl SlotShare {
    pub(super) fn new(slot: Arc<Slot>, task: &str) -> Self {
        SlotShare {
            slot,
            task: task.to_string(),
        }
    }

    /// The gate the share is in.
    pub fn gate(&self) -> &str {
        &self.slot.gate
    }
}

impl std::fmt::Debug for SlotShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotShare")
            .field("gate", &self.slot.gate)
            .field("tag", &self.slot.tag)
            .field("task", &self.task)
            .finish()
    }
}

/// The tasks a slot's name stands for: its leading count, or one for a name without one.
pub fn tasks_in(name: &str) -> usize {
    (name.split_once('.'))
        .and_then(|(count, _)| count.parse().ok())
        .filter(|count| *count > 0)
        .unwrap_or(1)
}

/// The tasks the slots `names` stand for together.
pub fn tasks_in_all(names: &[String]) -> usize {
    names.iter().map(|name| tasks_in(name)).sum()
}

/// What freeing some of a slot's tasks writes, with the slot's lock held: the name it has,
/// and the name it gets (none when no task is left). One dropped without being told what came
/// of its write leaves the slot in doubt.
pub(super) struct Shrink {
    slot: Arc<Slot>,
    tasks: Vec<String>,
    pub(super) from: String,
    pub(super) to: Option<String>,
    held: OwnedMutexGuard<Held>,
    answered: bool,
}

impl Drop for Shrink {
    fn drop(&mut self) {
        if !self.answered {
            self.held.doubt = Some(std::mem::take(&mut self.tasks));
        }
    }
}

impl Shrink {
    /// Its write: the name the slot has, and the one it gets.
    pub(super) fn rename(&self) -> Rename {
        Rename {
            from: self.from.clone(),
            to: self.to.clone(),
            data: self.slot.data(),
        }
    }

    /// How many tasks it frees.
    pub(super) fn freed(&self) -> usize {
        self.tasks.len()
    }

    pub(super) fn gate(&self) -> &str {
        self.slot.gate()
    }

    /// The write landed: the slot stands for the tasks left.
    pub(super) fn done(mut self) {
        for task in std::mem::take(&mut self.tasks) {
            self.held.tasks.remove(&task);
        }
        self.answered = true;
    }

    /// The write failed and changed nothing (its multi-op failed elsewhere).
    pub(super) fn unchanged(mut self) {
        self.answered = true;
    }

    /// The slot's znode is gone (its session was replaced): nothing of it is held any more.
    pub(super) fn gone(mut self) {
        self.held.tasks.clear();
        self.held.gone = true;
        self.answered = true;
    }
}

/// A slot's write: the name it has, and the one it gets (none: deleted) with its claim's
/// token as data.
pub(super) struct Rename {
    from: String,
    to: Option<String>,
    data: Vec<u8>,
}

/// Adds `rename` to `multi` under `tag`: a delete of the name the slot has, and a create of
/// the one it gets.
pub(super) fn push_rename<'a, T>(multi: &mut Multi<'a, T>, tag: T, rename: &'a Rename)
where
    T: Copy + PartialEq,
{
    multi.push(tag, Op::Delete(&rename.from, -1));
    if let Some(to) = &rename.to {
        multi.push(tag, Op::CreateEphemeral(to, &rename.data));
    }
}

/// A slot locked for a write, with the tasks of it that are to be freed.
pub(super) struct Locked {
    slot: Arc<Slot>,
    tasks: Vec<String>,
    held: OwnedMutexGuard<Held>,
}

impl Locked {
    /// Whether a write to the slot may have landed unseen: its name is to be found first.
    pub(super) fn in_doubt(&self) -> bool {
        self.held.doubt.is_some()
    }

    pub(super) fn gate(&self) -> &str {
        self.slot.gate()
    }

    /// Settles the doubt from `children`, the gate's as read after that write (a session's
    /// requests are answered in order): the slot under the count the write gave means it
    /// landed, under the count before means it did not, and no slot of this tag means it
    /// landed as the delete of its last task or went with its session.
    pub(super) fn resolve(&mut self, children: &[String]) {
        let Some(doubt) = self.held.doubt.take() else {
            return;
        };
        let before = self.held.tasks.len();
        let freed: Vec<String> = (doubt.into_iter())
            .filter(|t| self.held.tasks.contains(t))
            .collect();
        let after = before - freed.len();
        let suffix = format!(".{}", self.slot.tag);
        let found = (children.iter())
            .find(|name| name.ends_with(&suffix))
            .map(|name| tasks_in(name));
        let landed = match found {
            Some(count) if count == before => false,
            Some(count) if count == after => true,
            Some(count) => {
                let slot = self.slot.path(count);
                tracing::warn!(%slot, expected = before, "a slot's count is not this process's");
                false
            }
            None if after == 0 => true,
            None => {
                self.held.tasks.clear();
                self.held.gone = true;
                return;
            }
        };
        if landed {
            for task in freed {
                self.held.tasks.remove(&task);
            }
        }
    }

    /// The write that frees its tasks, unless none of them is held any more (freed already,
    /// by a clone of its lease, say, or the slot gone).
    pub(super) fn shrink(mut self) -> Option<Shrink> {
        let held = &self.held;
        self.tasks.retain(|task| held.tasks.contains(task));
        self.tasks.sort();
        self.tasks.dedup();
        if self.held.gone || self.tasks.is_empty() {
            return None;
        }
        let left = self.held.tasks.len() - self.tasks.len();
        Some(Shrink {
            from: self.slot.path(self.held.tasks.len()),
            to: (left > 0).then(|| self.slot.path(left)),
            slot: self.slot,
            tasks: self.tasks,
            held: self.held,
            answered: false,
        })
    }
}

/// The slots of `shares`, each locked, their locks taken in name order, with the tasks of the
/// shares in it.
pub(super) async fn lock(shares: &[SlotShare]) -> Vec<Locked> {
    let mut by_slot: Vec<(Arc<Slot>, Vec<String>)> = Vec::new();
    for share in shares {
        match by_slot
            .iter_mut()
            .find(|(s, _)| Arc::ptr_eq(s, &share.slot))
        {
            Some((_, tasks)) => tasks.push(share.task.clone()),
            None => by_slot.push((share.slot.clone(), vec![share.task.clone()])),
        }
    }
    by_slot.sort_by(|(a, _), (b, _)| (&a.gate, &a.tag).cmp(&(&b.gate, &b.tag)));
    let mut locked = Vec::with_capacity(by_slot.len());
    for (slot, tasks) in by_slot {
        let held = slot.held.clone().lock_owned().await;
        locked.push(Locked { slot, tasks, held });
    }
    locked
}

/// The writes that free `shares` (see [`lock`]), for slots in no doubt. For tests.
#[cfg(test)]
async fn shrinks(shares: &[SlotShare]) -> Vec<Shrink> {
    let locked = lock(shares).await;
    assert!(locked.iter().all(|l| !l.in_doubt()));
    locked.into_iter().filter_map(Locked::shrink).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_name_says_how_many_tasks_it_stands_for() {
        assert_eq!(tasks_in("3.0a1b2c3d.task-0000000042"), 3);
        assert_eq!(tasks_in("1.0a1b2c3d.key.tenant.0000000001"), 1);
        // An older consumer's slot is named by its one task.
        assert_eq!(tasks_in("task-0000000042"), 1);
        assert_eq!(tasks_in("key.tenant-7.0000000001"), 1);
        assert_eq!(tasks_in("0.x.task-1"), 1, "no slot stands for nothing");
        let names = ["2.a.t".to_string(), "task-9".to_string()];
        assert_eq!(tasks_in_all(&names), 3);
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("task-{i:010}")).collect()
    }

    #[tokio::test]
    async fn freeing_renames_a_slot_to_what_is_left_and_deletes_it_with_its_last_task() {
        let tasks = names(3);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        let share = |i: usize| SlotShare::new(slot.clone(), &tasks[i]);
        let full = slot.path(3);
        assert!(full.starts_with("/q/limits/r/3.") && full.ends_with(".task-0000000000"));

        let two = shrinks(&[share(0), share(2)]).await;
        assert_eq!(two.len(), 1);
        assert_eq!(
            (&two[0].from, two[0].to.clone()),
            (&full, Some(slot.path(1)))
        );
        assert_eq!(two[0].freed(), 2);
        two.into_iter().for_each(Shrink::done);

        // A share freed already (a clone of its lease) writes nothing.
        assert!(shrinks(&[share(0)]).await.is_empty());
        let last = shrinks(&[share(1), share(1)]).await;
        assert_eq!((&last[0].from, &last[0].to), (&slot.path(1), &None));
        assert_eq!(last[0].freed(), 1);
    }

    /// The slot's name under `gate`, as a listing of the gate gives it.
    fn child(slot: &Slot, count: usize) -> String {
        slot.path(count).rsplit('/').next().unwrap().to_string()
    }

    /// What freeing `task` of `slot` writes, after `children` settled any doubt.
    async fn write_after(slot: &Arc<Slot>, task: &str, children: &[String]) -> Option<Shrink> {
        let mut locked = lock(&[SlotShare::new(slot.clone(), task)]).await;
        assert!(locked[0].in_doubt());
        locked[0].resolve(children);
        locked.pop().unwrap().shrink()
    }

    #[tokio::test]
    async fn a_write_never_answered_is_settled_by_the_name_the_gate_lists() {
        let tasks = names(3);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        let other = "1.0000beef.task-0000000077".to_string();
        // The free of task 0 was sent and never answered.
        drop(shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await);
        // It landed: the slot is listed under the count it gave.
        let landed = [other.clone(), child(&slot, 2)];
        let next = write_after(&slot, &tasks[1], &landed).await.unwrap();
        assert_eq!((&next.from, &next.to), (&slot.path(2), &Some(slot.path(1))));
        drop(next);
        // That one did not land: the slot is still listed under the count before it.
        let next = write_after(&slot, &tasks[1], &[child(&slot, 2)])
            .await
            .unwrap();
        assert_eq!((&next.from, &next.to), (&slot.path(2), &Some(slot.path(1))));
        next.done();
        // The last task's delete, never answered, then no slot of this tag: it landed.
        drop(shrinks(&[SlotShare::new(slot.clone(), &tasks[2])]).await);
        assert!(write_after(&slot, &tasks[2], &[other]).await.is_none());
    }

    #[tokio::test]
    async fn a_slot_in_doubt_not_listed_went_with_its_session() {
        let tasks = names(3);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        drop(shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await);
        assert!(write_after(&slot, &tasks[1], &[]).await.is_none());
        assert!(shrinks(&[SlotShare::new(slot, &tasks[2])]).await.is_empty());
    }

    #[tokio::test]
    async fn a_write_that_failed_elsewhere_leaves_no_doubt() {
        let tasks = names(2);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        let first = shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await;
        first.into_iter().for_each(Shrink::unchanged);
        let again = shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await;
        assert_eq!(again[0].from, slot.path(2), "still under its count");
    }

    #[tokio::test]
    async fn a_gone_slot_frees_nothing_more() {
        let tasks = names(2);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        let first = shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await;
        first.into_iter().for_each(Shrink::gone);
        assert!(shrinks(&[SlotShare::new(slot, &tasks[1])]).await.is_empty());
    }

    #[tokio::test]
    async fn one_write_to_a_slot_at_a_time() {
        use futures::FutureExt;
        let tasks = names(2);
        let slot = Slot::new("/q/limits/r", new_tag(&tasks[0]), &tasks);
        let held = shrinks(&[SlotShare::new(slot.clone(), &tasks[0])]).await;
        let other = [SlotShare::new(slot, &tasks[1])];
        assert!(
            shrinks(&other).now_or_never().is_none(),
            "waits for the lock"
        );
        held.into_iter().for_each(Shrink::done);
        let next = shrinks(&other).now_or_never().expect("the lock is free");
        assert_eq!(next[0].to, None, "the first free landed: one task was left");
    }
}
