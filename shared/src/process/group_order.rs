//! Ordered groups within a pass: which grouped task the pass may claim, and when.
//!
//! The group's lock (see `queue::group_lock`) keeps two tasks of a group from running at once; the
//! pass keeps them in publish order. It claims a grouped task only when its walk has seen every
//! number from the head up to it (a walk that jumped after a lost race has not), and only the
//! first task of its group it saw; the group's later tasks queue in the pass, in number order,
//! and the next is claimed when the one before it completed. Any other end (a retry, a lost
//! race, a busy or paused group, a dead letter) leaves the group to a later pass, except the
//! task holding the group's lock (a retry come back at the tail, a task whose consumer died),
//! which may still be claimed: when the walk already saw it queued behind the task whose claim
//! met the lock, it is claimed at once, and the rest of its group waits for the next pass.
//!
//! A walk that jumped (after a lost race, or over a window another consumer holds whole) leaves
//! the groups beyond the jump to a later pass. So that a stretch held at the head (slow tasks,
//! or a dead consumer's until the reaper frees them) cannot hold back every group, the pass after
//! one that left groups so walks through held windows instead of jumping (`Gates::gapped`).

use std::collections::{HashMap, VecDeque};

use crate::queue::TaskRead;

/// A task probed, a candidate for a claim.
type Candidate = (String, TaskRead);

/// A grouped task queued in the pass behind its group's running task, with its envelope id.
type Queued = (String, Candidate);

/// What the pass knows of one group.
enum GroupState {
    /// A task of the group is being claimed or run by this pass; the group's later tasks it
    /// saw are queued here, oldest first.
    Running(VecDeque<Queued>),
    /// The holder of the group's lock runs, out of the walk's order: the rest of the group is
    /// left to the next pass, which starts from the head again.
    Holder,
    /// Not for this pass, except the task with this id (the holder of the group's lock).
    Blocked(Option<String>),
}

/// The groups of one pass.
#[derive(Default)]
pub(super) struct GroupOrder {
    groups: HashMap<String, GroupState>,
    /// The group of each grouped task the pass claims or runs, by task name.
    running: HashMap<String, String>,
    /// Whether a group was left to a later pass because the walk had jumped over numbers
    /// before its task (see [`GroupOrder::gapped`]).
    gapped: bool,
}

/// A grouped task the walk found.
pub(super) struct Found {
    pub group: String,
    pub id: String,
    pub held: bool,
    /// Whether the walk saw every number from the head up to it.
    pub contiguous: bool,
}

impl GroupOrder {
    /// A grouped task the walk found: `Some` to claim it now; `None` when it waits (later in
    /// this pass, or for another pass).
    pub(super) fn admit(&mut self, found: Found, task: Candidate) -> Option<Candidate> {
        let Found {
            group,
            id,
            held,
            contiguous,
        } = found;
        let admitted = match self.groups.get_mut(&group) {
            None if held || !contiguous => {
                self.gapped |= !contiguous;
                self.groups.insert(group, GroupState::Blocked(None));
                return None;
            }
            None => task,
            Some(GroupState::Running(queued)) => {
                if !held && contiguous {
                    queued.push_back((id, task));
                }
                return None;
            }
            Some(GroupState::Holder) => return None,
            // The holder of the lock, come back at the tail after the task whose claim met
            // it: it runs alone, and the rest of its group waits for the next pass (tasks
            // found behind it here are later than the ones that pass already blocked).
            Some(GroupState::Blocked(Some(owner))) if *owner == id && !held => {
                self.running.insert(task.0.clone(), group.clone());
                self.groups.insert(group, GroupState::Holder);
                return Some(task);
            }
            Some(GroupState::Blocked(_)) => return None,
        };
        self.running.insert(admitted.0.clone(), group.clone());
        self.groups
            .insert(group, GroupState::Running(VecDeque::new()));
        Some(admitted)
    }

    /// Task `name` completed: the next task of its group the pass saw, to claim now.
    pub(super) fn completed(&mut self, name: &str) -> Option<Candidate> {
        let group = self.running.remove(name)?;
        let queued = match self.groups.get_mut(&group) {
            Some(GroupState::Running(queued)) => queued,
            Some(GroupState::Holder) => {
                self.groups.insert(group, GroupState::Blocked(None));
                return None;
            }
            _ => return None,
        };
        match queued.pop_front() {
            Some((_, next)) => {
                self.running.insert(next.0.clone(), group);
                Some(next)
            }
            None => {
                // Every task of the group seen so far ran: a later one found in this pass
                // comes next.
                self.groups.remove(&group);
                None
            }
        }
    }

    /// Whether a group was left to a later pass because the walk had jumped over numbers
    /// before its task: the next walk should not jump over held windows, or a stretch held at
    /// the head (slow tasks, a dead consumer's until the reaper frees them) would hold back
    /// every group.
    pub(super) fn gapped(&self) -> bool {
        self.gapped
    }

    /// A new walk from the head starts: groups left to a later pass are open again, and the
    /// tasks queued behind a running task are dropped, to be found again in order.
    pub(super) fn rewalk(&mut self) {
        self.gapped = false;
        self.groups
            .retain(|_, state| !matches!(state, GroupState::Blocked(_)));
        for state in self.groups.values_mut() {
            if let GroupState::Running(queued) = state {
                queued.clear();
            }
        }
    }

    /// Task `name` ended otherwise (or was not claimed): its group is left to a later pass,
    /// except the task with id `owner`, which holds the group's lock. When that task already
    /// waits in the pass (a retry come back at the tail, seen in the same window), it is
    /// returned, to claim now.
    pub(super) fn stopped(&mut self, name: &str, owner: Option<String>) -> Option<Candidate> {
        let group = self.running.remove(name)?;
        let previous = self
            .groups
            .insert(group.clone(), GroupState::Blocked(owner.clone()));
        let (Some(GroupState::Running(queued)), Some(owner)) = (previous, owner) else {
            return None;
        };
        let (_, holder) = queued.into_iter().find(|(id, _)| *id == owner)?;
        self.running.insert(holder.0.clone(), group.clone());
        self.groups.insert(group, GroupState::Holder);
        Some(holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(group: &str, id: &str) -> Found {
        Found {
            group: group.into(),
            id: id.into(),
            held: false,
            contiguous: true,
        }
    }

    fn task(name: &str) -> Candidate {
        (name.into(), TaskRead::Gone)
    }

    fn name(admitted: Option<Candidate>) -> Option<String> {
        admitted.map(|(name, _)| name)
    }

    #[test]
    fn a_group_runs_its_tasks_one_after_the_other_in_the_order_seen() {
        let mut gates = GroupOrder::default();
        assert_eq!(
            name(gates.admit(found("g", "a"), task("t1"))),
            Some("t1".into())
        );
        assert_eq!(name(gates.admit(found("g", "b"), task("t2"))), None);
        assert_eq!(
            name(gates.admit(found("h", "c"), task("t3"))),
            Some("t3".into())
        );
        assert_eq!(name(gates.admit(found("g", "d"), task("t4"))), None);
        assert_eq!(name(gates.completed("t1")), Some("t2".into()));
        assert_eq!(name(gates.completed("t2")), Some("t4".into()));
        assert_eq!(name(gates.completed("t4")), None);
        // All seen ran: a later task of the group is next.
        assert_eq!(
            name(gates.admit(found("g", "e"), task("t5"))),
            Some("t5".into())
        );
    }

    #[test]
    fn a_held_task_or_a_gap_in_the_walk_leaves_the_group_to_another_pass() {
        let mut gates = GroupOrder::default();
        let held = Found {
            held: true,
            ..found("g", "a")
        };
        assert!(gates.admit(held, task("t1")).is_none());
        assert!(gates.admit(found("g", "b"), task("t2")).is_none());
        let past_a_gap = Found {
            contiguous: false,
            ..found("h", "c")
        };
        assert!(gates.admit(past_a_gap, task("t3")).is_none());
        assert!(gates.admit(found("h", "d"), task("t4")).is_none());
    }

    #[test]
    fn a_stopped_group_still_lets_the_holder_of_its_lock_run() {
        let mut gates = GroupOrder::default();
        assert!(gates.admit(found("g", "a"), task("t1")).is_some());
        assert!(gates.admit(found("g", "b"), task("t2")).is_none());
        // t1's claim met the lock of task "r", a retry that came back at the tail.
        assert!(gates.stopped("t1", Some("r".into())).is_none());
        assert!(gates.completed("t1").is_none());
        assert!(gates.admit(found("g", "b"), task("t2")).is_none());
        assert_eq!(
            name(gates.admit(found("g", "r"), task("t9"))),
            Some("t9".into())
        );
    }

    #[test]
    fn the_holder_of_the_lock_seen_behind_its_group_runs_alone_in_the_pass() {
        let mut gates = GroupOrder::default();
        assert!(gates.admit(found("g", "b"), task("t1")).is_some());
        assert!(gates.admit(found("g", "c"), task("t2")).is_none());
        // "r" came back from its backoff at the tail, behind the rest of its group.
        assert!(gates.admit(found("g", "r"), task("t9")).is_none());
        // t1's claim met r's lock: r runs now, and nothing else of the group in this pass.
        assert_eq!(
            name(gates.stopped("t1", Some("r".into()))),
            Some("t9".into())
        );
        assert!(gates.admit(found("g", "d"), task("t10")).is_none());
        assert!(gates.completed("t9").is_none());
        assert!(gates.admit(found("g", "e"), task("t11")).is_none());
    }

    #[test]
    fn the_holder_of_the_lock_found_after_its_group_was_blocked_runs_alone() {
        let mut gates = GroupOrder::default();
        assert!(gates.admit(found("g", "b"), task("t1")).is_some());
        assert!(gates.admit(found("g", "c"), task("t2")).is_none());
        // t1's claim met the lock of "r", not seen yet; then the walk finds r, then a later
        // task of the group.
        assert!(gates.stopped("t1", Some("r".into())).is_none());
        assert_eq!(
            name(gates.admit(found("g", "r"), task("t9"))),
            Some("t9".into())
        );
        assert!(gates.admit(found("g", "d"), task("t10")).is_none());
        // r completed: nothing of the group jumps ahead of t1 and t2 in this pass.
        assert!(gates.completed("t9").is_none());
        assert!(gates.admit(found("g", "e"), task("t11")).is_none());
    }

    #[test]
    fn a_group_blocked_by_a_gap_in_the_walk_says_so() {
        let mut gates = GroupOrder::default();
        let held = Found {
            held: true,
            ..found("g", "a")
        };
        assert!(gates.admit(held, task("t1")).is_none());
        assert!(!gates.gapped(), "a held task is no gap");
        let past_a_gap = Found {
            contiguous: false,
            ..found("h", "c")
        };
        assert!(gates.admit(past_a_gap, task("t3")).is_none());
        assert!(gates.gapped());
        gates.rewalk();
        assert!(!gates.gapped());
    }
}
