//! The order a handler's new work is recorded in: the order it was asked for, not the order it
//! finished. Steps awaited together (`tokio::join!`) are asked for in call order (each is
//! first polled in turn) and may finish in any order; a replay asks for them in call order
//! again, so that is the order the record must keep.
//!
//! Each new step takes a *slot* when it is asked for; its entry fills the slot when its work
//! is done. The record takes filled slots from the front only: a step that finished before
//! one asked for earlier waits, its entry held, until that one is filled too. A slot given up
//! unfilled (its work failed, or its future was dropped) takes every slot after it along:
//! those entries are never recorded in this run (their steps run again on the next attempt),
//! so no later entry moves into a position a replay would ask another step for.

use std::collections::{HashSet, VecDeque};

use super::record::Entry;

/// Slots of work asked for and not yet in the record, in the order asked.
#[derive(Debug, Default)]
pub(super) struct Order {
    next_id: u64,
    slots: VecDeque<Slot>,
    /// Slots taken along by one given up before them, not yet told so.
    dropped: HashSet<u64>,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    entry: Option<Entry>,
}

/// Where a filled slot's entry is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// In the record.
    Recorded,
    /// Held until the slots before it are filled.
    Held,
    /// Never to be recorded in this run: a slot before it was given up.
    Dropped,
}

impl Order {
    /// Takes the next slot; its id.
    pub(super) fn reserve(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.slots.push_back(Slot { id, entry: None });
        id
    }

    /// Slots taken and not yet in the record.
    pub(super) fn pending(&self) -> usize {
        self.slots.len()
    }

    /// Fills slot `id` with `entry`; the entries now ready for the record, in order (none when
    /// a slot before it is still open, or it was dropped).
    pub(super) fn fill(&mut self, id: u64, entry: Entry) -> Vec<Entry> {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.id == id) {
            slot.entry = Some(entry);
        }
        let mut ready = Vec::new();
        while let Some(Slot { entry: Some(_), .. }) = self.slots.front() {
            ready.extend(self.slots.pop_front().and_then(|s| s.entry));
        }
        ready
    }

    /// Gives slot `id` up unfilled, with every slot after it; the entries of those already
    /// filled (never to be recorded).
    pub(super) fn give_up(&mut self, id: u64) -> Vec<Entry> {
        let Some(at) = self.slots.iter().position(|s| s.id == id) else {
            return Vec::new();
        };
        let after = self.slots.split_off(at);
        let mut lost = Vec::new();
        for slot in after.into_iter().filter(|s| s.id != id) {
            self.dropped.insert(slot.id);
            lost.extend(slot.entry);
        }
        lost
    }

    /// Where the entry of slot `id`, filled, is now.
    pub(super) fn fate(&mut self, id: u64) -> Fate {
        if self.slots.iter().any(|s| s.id == id) {
            return Fate::Held;
        }
        match self.dropped.remove(&id) {
            true => Fate::Dropped,
            false => Fate::Recorded,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn step(name: &str) -> Entry {
        Entry::Step {
            name: name.into(),
            result: json!(1),
        }
    }

    #[test]
    fn a_step_that_finishes_first_waits_for_the_one_asked_before_it() {
        let mut order = Order::default();
        let (a, b) = (order.reserve(), order.reserve());
        assert_eq!(order.fill(b, step("b")), []);
        assert_eq!(order.fate(b), Fate::Held);
        assert_eq!(order.fill(a, step("a")), [step("a"), step("b")]);
        assert_eq!(
            (order.fate(a), order.fate(b)),
            (Fate::Recorded, Fate::Recorded)
        );
        assert_eq!(order.pending(), 0);
    }

    #[test]
    fn a_slot_given_up_takes_the_ones_after_it_along() {
        let mut order = Order::default();
        let (a, b, c, d) = (
            order.reserve(),
            order.reserve(),
            order.reserve(),
            order.reserve(),
        );
        assert_eq!(order.fill(a, step("a")), [step("a")]);
        assert_eq!(order.fill(c, step("c")), []);
        assert_eq!(order.give_up(b), [step("c")]);
        assert_eq!(order.fate(c), Fate::Dropped);
        // Still running when it was taken along: it finds out when it is done.
        assert_eq!(order.fill(d, step("d")), []);
        assert_eq!(order.fate(d), Fate::Dropped);
        let e = order.reserve();
        assert_eq!(order.fill(e, step("e")), [step("e")]);
        assert_eq!(order.pending(), 0);
    }

    #[test]
    fn one_step_at_a_time_is_recorded_as_it_finishes() {
        let mut order = Order::default();
        let a = order.reserve();
        assert_eq!(order.fill(a, step("a")), [step("a")]);
        let b = order.reserve();
        assert_eq!(order.give_up(b), []);
        assert_eq!(order.pending(), 0);
    }
}
