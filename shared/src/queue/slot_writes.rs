//! Writing slots (see `slots`): freeing the shares of tasks whose handlers ended, finding a
//! slot's name after a write whose answer never came, and taking back the slots of a claim
//! whose answer never came.

use crate::queue::Gates;
use zookeeper_client as zk;

use super::Queue;
use super::gate_cache::Freeing;
use super::ops::{Failed, Landed, Multi};
use super::slots::{self, Rename, Shrink, SlotShare, push_rename};
use super::write::{Next, Read, Tries, Write};
use crate::error::{Error, Result};

/// How often a slot write lost with the link is tried again, and how many times at most (the
/// session, whose end deletes the slot anyway, is over well before).
const SLOT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const SLOT_TRIES: usize = 120;

impl Gates<'_> {
    /// The writes that free `shares`, a slot at a time (locked in name order until each write
    /// is answered). A slot in doubt is found among its gate's children first, one read per
    /// gate; a share already freed (by a clone of its lease, say) or whose slot is gone writes
    /// nothing.
    pub(super) async fn shrinks(self, shares: &[SlotShare]) -> Result<Vec<Shrink>> {
        let mut locked = slots::lock(shares).await;
        let mut listed: Vec<(String, Vec<String>)> = Vec::new();
        for slot in locked.iter_mut().filter(|l| l.in_doubt()) {
            let gate = slot.gate().to_string();
            if !listed.iter().any(|(g, _)| *g == gate) {
                let children = match self.client().list_children(&gate).await {
                    Ok(children) => children,
                    Err(zk::Error::NoNode) => Vec::new(),
                    Err(e) => return Err(Error::zk("list", gate, e)),
                };
                listed.push((gate.clone(), children));
            }
            let (_, children) = listed.iter().find(|(g, _)| *g == gate).expect("listed");
            slot.resolve(children);
        }
        Ok(locked.into_iter().filter_map(|l| l.shrink()).collect())
    }

    /// What `shrinks` write (each slot's rename, in their order) and the frees they send,
    /// under what this process knows of their gates (see `gate_cache`).
    pub(super) fn slot_frees(&self, shrinks: &[Shrink]) -> (Vec<Rename>, Vec<Freeing>) {
        let renames = shrinks.iter().map(Shrink::rename).collect();
        let frees: Vec<(String, usize)> = (shrinks.iter())
            .map(|s| (s.gate().to_string(), s.freed()))
            .collect();
        (renames, self.memory.gates.freeing(&frees))
    }

    /// Frees the shares `shares` held in slots while their handlers ran: each slot renamed to
    /// the tasks it has left, or deleted with its last. A write lost with the link (a leader
    /// change, a dropped connection) is sent again in the background every `SLOT_RETRY`
    /// until it lands or the session ends (which deletes the slot anyway): a share left held
    /// would shrink its gate for as long as the session lives, which for a worker is as long
    /// as it runs.
    pub async fn free_slots(self, shares: &[SlotShare]) {
        if shares.is_empty() || self.try_free_slots(shares).await {
            return;
        }
        let (queue, shares) = (Queue::clone(&self), shares.to_vec());
        tokio::spawn(async move {
            for _ in 0..SLOT_TRIES {
                tokio::time::sleep(SLOT_RETRY).await;
                if queue.session_over() || queue.gates().try_free_slots(&shares).await {
                    return;
                }
            }
            tracing::warn!(?shares, "slot left to its session's end");
        });
    }

    /// One multi-op freeing `shares`: whether it is settled (landed, the slot gone, or not
    /// worth another try).
    async fn try_free_slots(self, shares: &[SlotShare]) -> bool {
        let shrinks = match self.shrinks(shares).await {
            Ok(shrinks) => shrinks,
            Err(e) => {
                tracing::warn!(error = %e, "slot not freed yet: its gate unread; again soon");
                return false;
            }
        };
        let free = FreeSlots {
            shrinks,
            renames: Vec::new(),
            freeing: Vec::new(),
        };
        match super::write::run(&self, free).await {
            Ok(settled) => settled,
            Err(e) => {
                tracing::warn!(error = %e, "slot not freed yet: the link dropped; again soon");
                false
            }
        }
    }

    /// Takes back the slots `paths` that a claim whose answer never came may have made: had
    /// it landed, its tasks' leases are nobody's (they expire, and the tasks run again), but
    /// the slots would hold their shares for the session's life. Deleted in the background
    /// (a session's requests are answered in order, so after the claim), again every
    /// [`SLOT_RETRY`] while the link is down.
    pub(super) fn unmake_slots(&self, paths: Vec<String>) {
        if paths.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queue = Queue::clone(self);
        runtime.spawn(async move {
            for _ in 0..SLOT_TRIES {
                if queue.session_over() || queue.gates().try_unmake_slots(&paths).await {
                    return;
                }
                tokio::time::sleep(SLOT_RETRY).await;
            }
            tracing::warn!(?paths, "a claim's slots left to their session's end");
        });
    }

    /// Deletes `paths` where they exist: whether every one was answered.
    async fn try_unmake_slots(self, paths: &[String]) -> bool {
        for path in paths {
            match self.client().delete(path, None).await {
                Ok(()) => tracing::info!(slot = %path, "slot of a claim in doubt taken back"),
                Err(zk::Error::NoNode) => {}
                Err(e) => {
                    tracing::warn!(slot = %path, error = %e, "slot of a claim in doubt not taken back yet");
                    return false;
                }
            }
        }
        true
    }
}

/// The renames that free a handler's shares, its slots locked throughout (see
/// [`Gates::free_slots`]). A slot gone with the session that made it (one replaced while the
/// handler ran) fails the multi-op: it is left out, and the rest is sent again.
struct FreeSlots {
    shrinks: Vec<Shrink>,
    /// This try's renames, and the frees they send.
    renames: Vec<Rename>,
    freeing: Vec<Freeing>,
}

impl Write for FreeSlots {
    type Tag = usize;
    type Out = bool;
    const WHAT: &'static str = "free slot";
    const TRIES: Tries = Tries::Answers;

    async fn read(&mut self, queue: &Queue) -> Result<Read<bool>> {
        if self.shrinks.is_empty() {
            return Ok(Read::Stop(true));
        }
        (self.renames, self.freeing) = queue.gates().slot_frees(&self.shrinks);
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, usize>) {
        for (k, rename) in self.renames.iter().enumerate() {
            push_rename(multi, k, rename);
        }
    }

    async fn landed(self, queue: &Queue, _: Landed<usize>) -> Result<bool> {
        queue.memory.gates.freed(&self.freeing);
        self.shrinks.into_iter().for_each(Shrink::done);
        Ok(true)
    }

    async fn failed(&mut self, _: &Queue, failed: Failed<usize>) -> Result<Next<bool>> {
        let shrink = self.shrinks.remove(failed.tag);
        if failed.error != zk::Error::NoNode {
            tracing::warn!(slot = %shrink.from, error = %failed.error, "slot left to its session's end");
        }
        shrink.gone();
        Ok(Next::Again)
    }

    fn exhausted(&self) -> Result<bool> {
        unreachable!("each failed try leaves a slot out")
    }
}
