//! What this process knows of the gates its claims go through (see `gate`): a claim through a
//! gate this process wrote last needs no read of it first, and claims of one process through
//! one gate take turns instead of racing each other to its version.
//!
//! Every admission, by any consumer, moves a gate's data version; slots go without moving it
//! (a handler's end, a session's). So while the version known is still the gate's, its bucket
//! is exactly the one known and it holds at most the slots known: an admission worked out
//! from that never lets in more than the gate allows, and one through a gate written by
//! someone else since fails at its version and reads the gate again (`claim`).
//!
//! A gate's version is only its own while the gate stands: the reaper deletes a key's gate
//! that nobody wrote for [`KEY_GATE_IDLE_MS`], and the next claim makes it again at version
//! 0, so an old version could come round again with others' slots under it. Knowledge is
//! therefore used only while the gate was written (by its last read's `mtime`, or by this
//! process's own admission) less than half that long ago: the reaper cannot have deleted it.
//!
//! Tasks this process frees from its slots come off the count. A read made while a free was on its way may
//! already lack that slot, so a free counts only against the knowledge it was sent under (its
//! epoch, which every read renews): an uncounted free leaves the count too high, which costs a
//! read when it would refuse a task, never a slot too many.
//!
//! Within one process, claims through the same gate take turns from their read to their
//! multi-op's answer (a lock per gate, taken in name order) instead of failing each other at the
//! version: the `make bench` drain over 100 concurrency keys lost 40-90 of its 2 000 tasks to
//! that race per run before, each waiting 100 ms. A process forgets the gates nobody is waiting
//! at once it knows 4 096 (a worker meeting new keys would otherwise keep every one).
//!
//! Issue 34 weighed this against the same build with it switched off (`make bench`,
//! `BENCH_ONLY=semantics`, which counts the requests ZooKeeper received per task beside the
//! rate): without it the drain over 100 concurrency keys took 1.72-1.79x the requests of plain,
//! with it 1.17-1.19x, and its rate fell from 0.90-0.98x to 0.78-0.82x; the route with
//! `max_in_flight` took 1.32x the requests without it and 1.01x with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::turns::{Held, Turn, Turns};
use crate::limit::Bucket;

/// How long a key's gate stays after its last admission with nothing in it, at least: a key
/// whose tasks come steadily keeps its gate instead of making it again and again. The sweep
/// (`key_gates`) deletes none younger; what this process knows of a gate rests on that.
pub const KEY_GATE_IDLE_MS: i64 = 60_000;

/// A gate as this process last knew it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Known {
    /// The data version; `None` for a gate not made yet.
    pub(super) version: Option<i32>,
    /// Slots held, at most.
    pub(super) in_flight: usize,
    pub(super) bucket: Option<Bucket>,
    /// When the gate was last written as far as this process knows (ZooKeeper time, ms).
    written_ms: i64,
    /// The read this knowledge comes from.
    epoch: u64,
}

/// How long after a gate's last known write what is known of it is used: half the idle time
/// after which the reaper may delete a key's gate (see the module's comment).
const FRESH_MS: i64 = KEY_GATE_IDLE_MS / 2;

/// The gates of one queue's claims (shared by its clones).
#[derive(Default)]
pub(super) struct GateCache {
    /// Each gate's turn, held by the claim going through it from its read to its multi-op's
    /// answer, and what is known of it (let go with the turn: a gate met again costs a read).
    entries: Turns<Mutex<Option<Known>>>,
    epochs: AtomicU64,
    /// The routes that limit concurrency keys, as the last run said: a probe of a key's lane
    /// reads that key's gates with its window (see [`GateCache::prefetched`]).
    key_routes: Mutex<Vec<String>>,
}

/// Routes whose key gates a probe reads along, at most.
const PREFETCH_ROUTES: usize = 4;

/// A free sent under what was known of its gate: the gate, the tasks freed, the epoch.
pub(super) type Freeing = (String, usize, Option<u64>);

impl GateCache {
    fn entry(&self, gate: &str) -> Arc<Turn<Mutex<Option<Known>>>> {
        self.entries.turn(gate)
    }

    /// Waits for the turn of every gate of `gates`, in name order (see `turns`).
    pub(super) async fn turns(&self, gates: &[String]) -> Held {
        self.entries.take(gates).await
    }

    /// What is known of `gate` at `now_ms`, if anything: nothing once its last known write is
    /// [`FRESH_MS`] old (a gate not made yet stays so until a claim's create says otherwise).
    pub(super) fn known(&self, gate: &str, now_ms: i64) -> Option<Known> {
        let known = *self.entry(gate).kept.lock().expect("not poisoned");
        known.filter(|k| k.version.is_none() || now_ms < k.written_ms + FRESH_MS)
    }

    /// The routes whose gates of a key a probe of that key's lane reads along.
    pub(super) fn key_routes(&self) -> Vec<String> {
        self.key_routes.lock().expect("not poisoned").clone()
    }

    pub(super) fn set_key_routes(&self, mut routes: Vec<String>) {
        routes.truncate(PREFETCH_ROUTES);
        *self.key_routes.lock().expect("not poisoned") = routes;
    }

    /// `gate` was read along with a probe, by no claim's turn: known from now on unless
    /// something is known of it already (a claim's knowledge is never older than a probe's).
    /// Knowledge gone stale this way costs a claim one multi-op that fails at the version.
    pub(super) fn prefetched(
        &self,
        gate: &str,
        version: Option<i32>,
        in_flight: usize,
        bucket: Option<Bucket>,
        written_ms: i64,
    ) {
        let entry = self.entry(gate);
        let mut known = entry.kept.lock().expect("not poisoned");
        if known.is_none() {
            *known = Some(self.learnt(version, in_flight, bucket, written_ms));
        }
    }

    /// Knowledge from a read just made, under an epoch of its own.
    fn learnt(
        &self,
        version: Option<i32>,
        in_flight: usize,
        bucket: Option<Bucket>,
        written_ms: i64,
    ) -> Known {
        Known {
            version,
            in_flight,
            bucket,
            written_ms,
            epoch: self.epochs.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `gate` was just read (by a claim holding its turn; last written at `written_ms`): what
    /// is known of it from now on.
    pub(super) fn read(
        &self,
        gate: &str,
        version: Option<i32>,
        in_flight: usize,
        bucket: Option<Bucket>,
        written_ms: i64,
    ) -> Known {
        let known = self.learnt(version, in_flight, bucket, written_ms);
        *self.entry(gate).kept.lock().expect("not poisoned") = Some(known);
        known
    }

    /// A claim that worked from `base` at `now_ms` took `slots` shares in `gate` and left it
    /// at `version` with `bucket`.
    pub(super) fn admitted(
        &self,
        gate: &str,
        base: Known,
        version: i32,
        slots: usize,
        bucket: Option<Bucket>,
        now_ms: i64,
    ) {
        let entry = self.entry(gate);
        let mut known = entry.kept.lock().expect("not poisoned");
        // Frees counted since `base` was taken stay counted.
        let in_flight = match *known {
            Some(now) if now.epoch == base.epoch => now.in_flight,
            _ => base.in_flight,
        };
        *known = Some(Known {
            version: Some(version),
            in_flight: in_flight + slots,
            bucket,
            written_ms: now_ms,
            epoch: base.epoch,
        });
    }

    /// Nothing is known of `gate` any more (a write to it failed, or may have landed unseen).
    pub(super) fn forget(&self, gate: &str) {
        *self.entry(gate).kept.lock().expect("not poisoned") = None;
    }

    /// The frees about to be sent, (gate, tasks) each, with the epoch of the gate's knowledge.
    pub(super) fn freeing(&self, frees: &[(String, usize)]) -> Vec<Freeing> {
        let epoch = |gate: &str| {
            let known = *self.entries.get(gate)?.kept.lock().expect("not poisoned");
            known.map(|k| k.epoch)
        };
        (frees.iter())
            .map(|(gate, tasks)| (gate.clone(), *tasks, epoch(gate)))
            .collect()
    }

    /// The frees `freed` landed: each comes off its gate's count, if the knowledge it was sent
    /// under is still the gate's.
    pub(super) fn freed(&self, freed: &[Freeing]) {
        for (gate, tasks, epoch) in freed {
            let (Some(entry), Some(epoch)) = (self.entries.get(gate), epoch) else {
                continue;
            };
            let mut known = entry.kept.lock().expect("not poisoned");
            if let Some(k) = known.as_mut().filter(|k| k.epoch == *epoch) {
                k.in_flight = k.in_flight.saturating_sub(*tasks);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GATE: &str = "/q/limits/route";

    /// Frees of `tasks` tasks of the gate.
    fn frees(tasks: usize) -> [(String, usize); 1] {
        [(GATE.to_string(), tasks)]
    }

    #[test]
    fn a_free_counts_against_the_knowledge_it_was_sent_under() {
        let cache = GateCache::default();
        let base = cache.read(GATE, Some(3), 2, None, 0);
        cache.admitted(GATE, base, 4, 3, None, 0);
        assert_eq!(
            cache.known(GATE, 0).map(|k| (k.version, k.in_flight)),
            Some((Some(4), 5))
        );
        let sent = cache.freeing(&frees(1));
        cache.freed(&sent);
        assert_eq!(cache.known(GATE, 0).map(|k| k.in_flight), Some(4));
        // A read while a free is out may already lack its slot: the free no longer counts.
        let sent = cache.freeing(&frees(1));
        cache.read(GATE, Some(5), 3, None, 0);
        cache.freed(&sent);
        assert_eq!(cache.known(GATE, 0).map(|k| k.in_flight), Some(3));
    }

    #[test]
    fn a_probes_read_never_replaces_what_a_claim_knows() {
        let cache = GateCache::default();
        cache.prefetched(GATE, None, 0, None, 0);
        assert_eq!(cache.known(GATE, 0).map(|k| k.version), Some(None));
        let base = cache.read(GATE, Some(2), 1, None, 0);
        cache.admitted(GATE, base, 3, 1, None, 0);
        cache.prefetched(GATE, Some(2), 1, None, 0);
        assert_eq!(
            cache.known(GATE, 0).map(|k| (k.version, k.in_flight)),
            Some((Some(3), 2))
        );
    }

    #[test]
    fn frees_during_a_claim_stay_counted_after_it() {
        let cache = GateCache::default();
        let base = cache.read(GATE, Some(1), 4, None, 0);
        let sent = cache.freeing(&frees(2));
        cache.freed(&sent);
        cache.admitted(GATE, base, 2, 1, None, 0);
        assert_eq!(cache.known(GATE, 0).map(|k| k.in_flight), Some(3));
    }

    #[test]
    fn a_forgotten_gate_counts_no_free_and_knows_nothing() {
        let cache = GateCache::default();
        cache.read(GATE, None, 0, None, 0);
        let sent = cache.freeing(&frees(1));
        cache.forget(GATE);
        cache.freed(&sent);
        assert_eq!(cache.known(GATE, 0), None);
        let never_known = cache.freeing(&[("/q/limits/other".into(), 1)]);
        assert_eq!(never_known[0].2, None);
    }

    #[test]
    fn knowledge_is_used_only_while_the_reaper_cannot_have_deleted_the_gate() {
        let cache = GateCache::default();
        // Read at 100 s, last written at 90 s: known until 120 s.
        let base = cache.read(GATE, Some(4), 0, None, 90_000);
        assert!(cache.known(GATE, 119_999).is_some());
        assert_eq!(
            cache.known(GATE, 120_000),
            None,
            "the version may be another gate's"
        );
        // Its own admission at 130 s makes it known again until 160 s.
        cache.admitted(GATE, base, 5, 1, None, 130_000);
        assert!(cache.known(GATE, 159_999).is_some());
        assert_eq!(cache.known(GATE, 160_000), None);
        // A gate not made yet is known as such however long: a create fails if it was made.
        cache.read(GATE, None, 0, None, 0);
        assert!(cache.known(GATE, i64::MAX / 2).is_some());
    }

    #[test]
    fn gates_nobody_waits_at_are_let_go_past_the_limit() {
        let cache = GateCache::default();
        for k in 0..4096 {
            cache.read(&format!("/q/concurrency/r/k{k}"), Some(1), 0, None, 0);
        }
        let busy = cache.entry("/q/concurrency/r/k0");
        cache.read("/q/concurrency/r/new", Some(1), 0, None, 0);
        assert_eq!(cache.entries.len(), 2, "the one in use and the new one");
        assert!(Arc::ptr_eq(&cache.entry("/q/concurrency/r/k0"), &busy));
    }
}
