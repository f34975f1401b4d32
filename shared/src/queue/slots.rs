//! Slots: the places tasks hold in a gate that caps tasks in flight (see `gate`). The tasks
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
//! taken in name order), so each write knows the name the slot has.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// A slot this process holds: its tasks still running, under one znode.
pub struct Slot {
    gate: String,
    /// The name's part after the count: `<tag>.<lead>`.
    tag: String,
    held: Arc<Mutex<Held>>,
}

/// A slot's tasks still running; `gone` once its znode went without us (a session replaced).
struct Held {
    tasks: BTreeSet<String>,
    gone: bool,
}

impl Slot {
    /// The slot `tag` (see [`new_tag`]) in `gate`, for `tasks`.
    pub(super) fn new(gate: &str, tag: String, tasks: &[String]) -> Arc<Slot> {
        Arc::new(Slot {
            gate: gate.to_string(),
            tag,
            held: Arc::new(Mutex::new(Held {
                tasks: tasks.iter().cloned().collect(),
                gone: false,
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
}

/// The path of a slot of `count` tasks named `tag` in `gate`.
pub(super) fn slot_path(gate: &str, count: usize, tag: &str) -> String {
    format!("{gate}/{count}.{tag}")
}

/// A new slot's name part after its count (see [`Slot`]), for a claim led by task `lead`.
pub(super) fn new_tag(lead: &str) -> String {
    format!("{:08x}.{lead}", fastrand::u32(..))
}

/// One task's place in a slot.
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

    /// The gate the place is in.
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
/// and the name it gets (none when no task is left).
pub(super) struct Shrink {
    slot: Arc<Slot>,
    tasks: Vec<String>,
    pub(super) from: String,
    pub(super) to: Option<String>,
    held: OwnedMutexGuard<Held>,
}

impl Shrink {
    /// How many tasks it frees.
    pub(super) fn freed(&self) -> usize {
        self.tasks.len()
    }

    pub(super) fn gate(&self) -> &str {
        self.slot.gate()
    }

    /// The write landed: the slot stands for the tasks left.
    pub(super) fn done(mut self) {
        for task in &self.tasks {
            self.held.tasks.remove(task);
        }
    }

    /// The slot's znode is gone (its session was replaced): nothing of it is held any more.
    pub(super) fn gone(mut self) {
        self.held.tasks.clear();
        self.held.gone = true;
    }
}

/// The writes that free `shares`, a slot at a time, their locks taken in name order. A share
/// already freed (by a clone of its lease, say) or whose slot is gone writes nothing.
pub(super) async fn shrinks(shares: &[SlotShare]) -> Vec<Shrink> {
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
    let mut shrinks = Vec::with_capacity(by_slot.len());
    for (slot, mut tasks) in by_slot {
        let held = slot.held.clone().lock_owned().await;
        tasks.retain(|task| held.tasks.contains(task));
        tasks.dedup();
        if held.gone || tasks.is_empty() {
            continue;
        }
        let left = held.tasks.len() - tasks.len();
        shrinks.push(Shrink {
            from: slot.path(held.tasks.len()),
            to: (left > 0).then(|| slot.path(left)),
            slot,
            tasks,
            held,
        });
    }
    shrinks
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
