//! The shares a claim's tasks take in the slots of the gates they go through (see
//! `slots`): one slot per gate for the tasks it admits, and the slots of a claim whose
//! answer never came.

use std::sync::Arc;

use super::Take;
use crate::queue::Queue;
use crate::queue::gate::GateWrite;
use crate::queue::slots::{Slot, SlotShare, slot_path};

/// The slots a claim's multi-op creates, while it is not answered: dropped so (the link
/// went, or the claim's caller dropped it), they are taken back in the background
/// (`Gates::unmake_slots`), since nobody would free them before the session ends.
pub(super) struct SlotsInDoubt {
    queue: Option<Queue>,
    paths: Vec<String>,
}

impl SlotsInDoubt {
    /// The slots `slots` (per gate, its path and tasks; none for a gate without one).
    pub(super) fn new(queue: &Queue, slots: &[(String, Vec<String>)]) -> Self {
        let paths: Vec<String> = (slots.iter())
            .filter(|(_, tasks)| !tasks.is_empty())
            .map(|(path, _)| path.clone())
            .collect();
        SlotsInDoubt {
            queue: (!paths.is_empty()).then(|| queue.clone()),
            paths,
        }
    }

    /// The multi-op was answered (landed, or failed and changed nothing).
    pub(super) fn answered(mut self) {
        self.queue = None;
    }
}

impl Drop for SlotsInDoubt {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.gates().unmake_slots(std::mem::take(&mut self.paths));
        }
    }
}

/// Per gate, the path of the slot its admitted tasks among `takes` hold together, and their
/// names (none for a gate that does not cap tasks in flight, or whose tasks all left).
pub(super) fn slots_of(gates: &[GateWrite], takes: &[(usize, Take)]) -> Vec<(String, Vec<String>)> {
    (gates.iter())
        .map(|gate| {
            let Some(tag) = &gate.slot_tag else {
                return (String::new(), Vec::new());
            };
            let tasks: Vec<String> = (takes.iter())
                .filter(|(_, t)| t.slots.contains(&gate.path))
                .map(|(_, t)| t.name.clone())
                .collect();
            (slot_path(&gate.path, tasks.len(), tag), tasks)
        })
        .collect()
}

/// The slots a landed claim holds, per gate.
pub(super) fn held_slots(
    gates: &[GateWrite],
    slots: Vec<(String, Vec<String>)>,
) -> Vec<Option<Arc<Slot>>> {
    (gates.iter().zip(slots))
        .map(|(gate, (_, tasks))| {
            let tag = gate.slot_tag.clone().filter(|_| !tasks.is_empty())?;
            Some(Slot::new(&gate.path, tag, &tasks))
        })
        .collect()
}

/// The shares `take` holds in the slots `held` of `gates`.
pub(super) fn shares_of(
    gates: &[GateWrite],
    held: &[Option<Arc<Slot>>],
    take: &Take,
) -> Vec<SlotShare> {
    (gates.iter().zip(held))
        .filter(|(gate, _)| take.slots.contains(&gate.path))
        .filter_map(|(_, slot)| Some(SlotShare::new(slot.clone()?, &take.name)))
        .collect()
}
