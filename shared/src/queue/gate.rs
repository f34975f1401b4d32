//! The gates of limited routes (`limits/<route>`): a claim of a task of a limited route takes
//! it through the gate in the claim's own multi-op. The gate's data is the rate's token bucket
//! (see [`crate::limit`]); every admission rewrites it at the version read, so admissions by
//! any number of consumers are serialized by ZooKeeper, and counting the gate's children (the
//! slots) and writing it happen as one. The tasks a claim admits through the gate of a route
//! with `max_in_flight` hold one ephemeral slot together, `limits/<route>/<n>.<tag>.<task>`
//! (see `slots`), given up as their handlers end, or by ZooKeeper when their consumer's
//! session ends (a crashed holder's slot frees itself).
//!
//! A route with `per_key` limits has a gate per concurrency key in use as well,
//! `concurrency/<route>/<key>`, which works the same way for that key's tasks; the reaper
//! deletes a key's gate once nothing holds a slot in it and its bucket would be full again.
//!
//! A claim batch groups its tasks by gate, takes each gate as it stands (the tasks its slots
//! hold, the bucket, the version), and lets through as many as the free slots and the tokens
//! allow (`limit::admit`, pure). Its multi-op starts with each gate rewritten at that version
//! (the bucket as of now, by the consumer's reading of ZooKeeper's clock; a reading behind the
//! bucket's own moment keeps that moment, or the next admission would refill the span between
//! twice). Two consumers that saw the same count cannot both commit: the loser reads the gates
//! afresh and tries once more in the same claim; a second loss makes its tasks wait
//! (`TaskOutcome::Limited`), as do the tasks the admission left out; none has its attempt
//! counted, since no claim happened. The run waits for limited tasks within its time: after a
//! pass that claimed nothing but met a limit, it sleeps until the next token is due (or 100 ms
//! for a slot) and looks again.

use std::collections::BTreeMap;

use super::gate_cache::Known;
use super::slots;
use super::turns::Held;
use crate::clock::ZkTime;
use crate::error::Result;
use crate::limit::{self, Bucket, GateData, Limit, RouteLimits};

recipe!(
    /// Limited routes' and concurrency keys' gates, and the slots a claim's tasks hold in them
    /// (`gate`, `slot_writes`, `key_gates`).
    Gates,
    gates
);

/// A gate's rewrite, sent first in the claim's multi-op.
pub(super) struct GateWrite {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    /// The version read; `None` for a gate not made yet, which the multi-op creates.
    pub(super) version: Option<i32>,
    /// The tasks admitted through it (indices in the caller's list).
    pub(super) admitted: Vec<usize>,
    /// What the admission was worked out from, and the bucket it leaves (for `gate_cache`).
    pub(super) base: Known,
    pub(super) bucket: Option<Bucket>,
    /// When it was worked out (ZooKeeper time, ms): the rewrite lands after.
    pub(super) at_ms: i64,
    /// For a gate that caps tasks in flight, the name of the slot its admitted tasks hold
    /// together, after the count (see `slots`).
    pub(super) slot_tag: Option<String>,
}

/// A task wanting in: its event type, name and concurrency key.
pub(super) type Wanting<'a> = (&'a str, &'a str, Option<&'a str>);

/// What the gates made of a list of tasks wanting in.
#[derive(Default)]
pub(super) struct Gated {
    pub(super) writes: Vec<GateWrite>,
    /// Per task: the gates it takes a share of a slot in (its route's, its key's), when admitted through
    /// gates that cap tasks in flight.
    pub(super) slots: Vec<Vec<String>>,
    /// The tasks left out (indices in the caller's list), and when they may try again.
    pub(super) refused: Vec<(usize, i64)>,
    /// This process's turn at the gates, held until the claim's multi-op is answered.
    pub(super) turns: Option<Held>,
}

/// A gate some of the tasks go through: a route's, or a concurrency key's within a route.
struct Gate {
    path: String,
    /// What to make, in order, when the gate is missing (its parents, then itself).
    makes: Vec<String>,
    limit: Limit,
    /// A key's gate (admits first) or a route's.
    per_key: bool,
    /// The tasks going through it (indices in the caller's list), in their order.
    positions: Vec<usize>,
}

impl Gate {
    /// The tasks going through this gate that no gate has refused yet.
    fn still_in(&self, refused: &[Option<i64>]) -> Vec<usize> {
        let positions = self.positions.iter().copied();
        positions.filter(|pos| refused[*pos].is_none()).collect()
    }
}

/// Which of `tasks` tasks the gates refuse, as `known`, at `now_ms`, and when each refused may
/// try again: keys' gates decide first, the route's gate then counts only those they let
/// through.
fn refusals(gates: &[Gate], known: &[Known], tasks: usize, now_ms: i64) -> Vec<Option<i64>> {
    let mut refused: Vec<Option<i64>> = vec![None; tasks];
    for phase in [true, false] {
        for (gate, known) in gates.iter().zip(known).filter(|(g, _)| g.per_key == phase) {
            let wanting = gate.still_in(&refused);
            let admission = limit::admit(
                &gate.limit,
                known.in_flight,
                known.bucket,
                now_ms,
                wanting.len(),
            );
            let retry_in_ms = admission.retry_in_ms.unwrap_or(limit::SLOT_POLL_MS);
            for pos in &wanting[admission.admitted..] {
                refused[*pos] = Some(retry_in_ms);
            }
        }
    }
    refused
}

impl Gates<'_> {
    /// Takes `tasks` through the gates of their routes, and of their concurrency keys where
    /// their route limits keys, under `limits`. A task is admitted when every gate it goes
    /// through lets it in, and each gate's bucket is charged for the tasks finally admitted.
    /// The gates are taken as this process last knew them (see `gate_cache`), read when it
    /// knows nothing of one, when what it knows would refuse a task, or when `fresh`.
    pub(super) async fn through_gates(
        self,
        tasks: &[Wanting<'_>],
        now: &ZkTime,
        limits: &RouteLimits,
        fresh: bool,
    ) -> Result<Gated> {
        let mut gated = Gated {
            slots: vec![Vec::new(); tasks.len()],
            ..Gated::default()
        };
        let gates = self.gates_of(tasks, limits);
        if gates.is_empty() {
            return Ok(gated);
        }
        let paths: Vec<String> = gates.iter().map(|g| g.path.clone()).collect();
        gated.turns = Some(self.memory.gates.turns(&paths).await);
        let now_ms = now.now_ms();
        let cached = |path: &String| self.memory.gates.known(path, now_ms).filter(|_| !fresh);
        let known: Vec<Option<Known>> = paths.iter().map(cached).collect();
        let any_cached = known.iter().any(Option::is_some);
        let mut known = self.read_gates(&gates, known).await?;
        let mut refused = refusals(&gates, &known, tasks.len(), now_ms);
        if any_cached && refused.iter().any(Option::is_some) {
            // Others' slots may have gone since: what is known is read again before refusing.
            known = self.read_gates(&gates, vec![None; gates.len()]).await?;
            refused = refusals(&gates, &known, tasks.len(), now_ms);
        }
        for (gate, base) in gates.into_iter().zip(known) {
            let admitted = gate.still_in(&refused);
            if admitted.is_empty() {
                continue;
            }
            let admission = limit::admit(
                &gate.limit,
                base.in_flight,
                base.bucket,
                now_ms,
                admitted.len(),
            );
            let slotted = gate.limit.max_in_flight.is_some();
            if slotted {
                for pos in &admitted {
                    gated.slots[*pos].push(gate.path.clone());
                }
            }
            let slot_tag = slotted.then(|| slots::new_tag(tasks[admitted[0]].1));
            let data = GateData::after(&gate.limit, admission.bucket);
            gated.writes.push(GateWrite {
                path: gate.path,
                data: serde_json::to_vec(&data)?,
                version: base.version,
                admitted,
                base,
                bucket: admission.bucket,
                at_ms: now_ms,
                slot_tag,
            });
        }
        gated.refused = refused
            .into_iter()
            .enumerate()
            .filter_map(|(pos, retry)| Some((pos, retry?)))
            .collect();
        Ok(gated)
    }

    /// The routes `limits` names that limit concurrency keys: a probe of a key's lane reads
    /// that key's gates in them along with its window, so that a claim of the window's tasks
    /// need not read them first.
    pub fn prefetch_key_gates(&self, limits: &RouteLimits) {
        self.memory.gates.set_key_routes(limits.key_routes());
    }

    /// Whether a claim of a task of `event_type` with concurrency key `key` goes through a
    /// gate under `limits`: its route's, or its key's within the route.
    pub(super) fn goes_through_gate(
        &self,
        event_type: &str,
        key: Option<&str>,
        limits: &RouteLimits,
    ) -> bool {
        !self.gates_of(&[(event_type, "", key)], limits).is_empty()
    }

    /// The gates `tasks` go through, each with the tasks in their order.
    fn gates_of(&self, tasks: &[Wanting<'_>], limits: &RouteLimits) -> Vec<Gate> {
        let layout = self.layout();
        let mut gates: Vec<Gate> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        let mut join = |path: String, makes: Vec<String>, limit: Limit, per_key: bool, pos| {
            let at = *index.entry(path.clone()).or_insert_with(|| {
                gates.push(Gate {
                    path,
                    makes,
                    limit,
                    per_key,
                    positions: Vec::new(),
                });
                gates.len() - 1
            });
            gates[at].positions.push(pos);
        };
        for (pos, (event_type, _, key)) in tasks.iter().enumerate() {
            let Some((route, limit)) = limits.for_type(event_type) else {
                continue;
            };
            if let (Some(per_key), Some(key)) = (limit.per_key, key) {
                let path = layout.key_gate(&route, key);
                let makes = vec![layout.concurrency(), layout.key_gates(&route), path.clone()];
                join(path, makes, per_key.into(), true, pos);
            }
            if limit.gates_route() {
                let path = layout.limit_gate(&route);
                let makes = vec![layout.limits(), path.clone()];
                join(path, makes, limit, false, pos);
            }
        }
        gates
    }

    /// What is known of `gates`: `known` where given, the rest read in one multi-read (and
    /// known from then on). A gate not made yet reads as empty, to be created by the claim's
    /// multi-op (a new key costs no request of its own); its parents are made first, once per
    /// process.
    async fn read_gates(self, gates: &[Gate], known: Vec<Option<Known>>) -> Result<Vec<Known>> {
        let unknown: Vec<&Gate> = (gates.iter().zip(&known))
            .filter(|(_, k)| k.is_none())
            .map(|(g, _)| g)
            .collect();
        let paths: Vec<String> = unknown.iter().map(|g| g.path.clone()).collect();
        let mut reads = self.read_with_children(&paths).await?.into_iter();
        let mut missing = Vec::new();
        let mut all = Vec::with_capacity(gates.len());
        for (gate, known) in gates.iter().zip(known) {
            if let Some(known) = known {
                // Known not to be made yet (a probe found it missing): its parents may not be.
                if known.version.is_none() {
                    missing.push(gate);
                }
                all.push(known);
                continue;
            }
            let read = reads.next().flatten();
            let (version, in_flight, bucket, written_ms) = match read {
                Some((data, stat, slots)) => (
                    Some(stat.version),
                    slots::tasks_in_all(&slots),
                    GateData::read(&data).bucket,
                    stat.mtime,
                ),
                None => {
                    missing.push(gate);
                    (None, 0, None, 0)
                }
            };
            let cache = &self.memory.gates;
            all.push(cache.read(&gate.path, version, in_flight, bucket, written_ms));
        }
        let made = missing.iter().map(|gate| self.make_gate_parents(gate));
        futures::future::try_join_all(made).await?;
        Ok(all)
    }

    /// Makes the parents of a missing gate, unless this process made or met them already.
    async fn make_gate_parents(self, gate: &Gate) -> Result<()> {
        let parents = &gate.makes[..gate.makes.len().saturating_sub(1)];
        for path in parents {
            if self.memory.gate_parents.contains(path) {
                continue;
            }
            self.cancels().ensure_parent(path).await?;
            self.memory.gate_parents.insert(path);
        }
        Ok(())
    }

    /// A gate's create failed with `NoNode`: its parents were deleted since this process
    /// made them (by hand); the next claim through it makes them again.
    pub(super) fn forget_gate_parents(&self) {
        self.memory.gate_parents.forget_all();
    }
}
