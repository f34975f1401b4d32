//! The gates of limited routes (`limits/<route>`): a claim of a task of a limited route takes
//! it through the gate in the claim's own multi-op. The gate's data is the rate's token bucket
//! (see [`crate::limit`]); every admission rewrites it at the version read, so admissions by
//! any number of consumers are serialized by ZooKeeper, and counting the gate's children (the
//! slots) and writing it happen as one. Each admitted task of a route with `max_in_flight`
//! creates an ephemeral slot, `limits/<route>/<task>`, deleted when its handler ends, or by
//! ZooKeeper when its consumer's session ends (a crashed holder's slot frees itself).
//!
//! A route with `per_key` limits has a gate per concurrency key in use as well,
//! `concurrency/<route>/<key>`, which works the same way for that key's tasks; the reaper
//! deletes a key's gate once nothing holds a slot in it and its bucket would be full again.

use std::collections::BTreeMap;

use zookeeper_client as zk;

use super::Queue;
use crate::clock::ZkTime;
use crate::error::Result;
use crate::limit::{self, Bucket, GateData, Limit, RouteLimits};

/// A gate's rewrite, sent first in the claim's multi-op.
pub(super) struct GateWrite {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    /// The version read; `None` for a gate not made yet, which the multi-op creates.
    pub(super) version: Option<i32>,
    /// The tasks admitted through it (indices in the caller's list).
    pub(super) admitted: Vec<usize>,
}

/// A task wanting in: its event type, name and concurrency key.
pub(super) type Wanting<'a> = (&'a str, &'a str, Option<&'a str>);

/// What the gates made of a list of tasks wanting in.
#[derive(Default)]
pub(super) struct Gated {
    pub(super) writes: Vec<GateWrite>,
    /// Per task: the slots it takes (its route's, its key's), when admitted through gates that
    /// cap tasks in flight.
    pub(super) slots: Vec<Vec<String>>,
    /// The tasks left out (indices in the caller's list), and when they may try again.
    pub(super) refused: Vec<(usize, i64)>,
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

/// A gate as read: slots held, its bucket, its version (`None`: not made yet, so nothing in
/// flight and a full bucket).
struct GateRead {
    in_flight: usize,
    bucket: Option<Bucket>,
    version: Option<i32>,
}

/// How often a slot whose delete was lost is tried again, and how many times at most (the
/// session, whose end deletes it anyway, is over well before).
const SLOT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const SLOT_TRIES: usize = 120;

impl Queue {
    /// Takes `tasks` through the gates of their routes, and of their concurrency keys where
    /// their route limits keys, under `limits`. A task is admitted when every gate it goes
    /// through lets it in: keys' gates decide first, the route's gate then counts only those
    /// they let through, and each gate's bucket is charged for the tasks finally admitted.
    pub(super) async fn through_gates(
        &self,
        tasks: &[Wanting<'_>],
        now: &ZkTime,
        limits: &RouteLimits,
    ) -> Result<Gated> {
        let mut gated = Gated {
            slots: vec![Vec::new(); tasks.len()],
            ..Gated::default()
        };
        let gates = self.gates_of(tasks, limits);
        if gates.is_empty() {
            return Ok(gated);
        }
        let reads = self.read_gates(&gates).await?;
        let now_ms = now.now_ms();
        // Whether each task is still in, and when a refused one may try again.
        let mut refused: Vec<Option<i64>> = vec![None; tasks.len()];
        for phase in [true, false] {
            for (gate, read) in gates.iter().zip(&reads).filter(|(g, _)| g.per_key == phase) {
                let wanting = gate.still_in(&refused);
                let admission = limit::admit(
                    &gate.limit,
                    read.in_flight,
                    read.bucket,
                    now_ms,
                    wanting.len(),
                );
                let retry_in_ms = admission.retry_in_ms.unwrap_or(limit::SLOT_POLL_MS);
                for pos in &wanting[admission.admitted..] {
                    refused[*pos] = Some(retry_in_ms);
                }
            }
        }
        for (gate, read) in gates.into_iter().zip(reads) {
            let admitted = gate.still_in(&refused);
            if admitted.is_empty() {
                continue;
            }
            let admission = limit::admit(
                &gate.limit,
                read.in_flight,
                read.bucket,
                now_ms,
                admitted.len(),
            );
            if gate.limit.max_in_flight.is_some() {
                for pos in &admitted {
                    // A slot is the task's name under the gate.
                    gated.slots[*pos].push(format!("{}/{}", gate.path, tasks[*pos].1));
                }
            }
            let data = GateData::after(&gate.limit, admission.bucket);
            gated.writes.push(GateWrite {
                path: gate.path,
                data: serde_json::to_vec(&data)?,
                version: read.version,
                admitted,
            });
        }
        gated.refused = refused
            .into_iter()
            .enumerate()
            .filter_map(|(pos, retry)| Some((pos, retry?)))
            .collect();
        Ok(gated)
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

    /// Reads gates in one multi-read. A gate not made yet reads as empty, to be created by
    /// the claim's multi-op (a new key costs no request of its own); its parents are made
    /// first, once per process.
    async fn read_gates(&self, gates: &[Gate]) -> Result<Vec<GateRead>> {
        let paths: Vec<String> = gates.iter().map(|g| g.path.clone()).collect();
        let reads = self.read_paths(&paths).await?;
        let mut read = Vec::with_capacity(reads.len());
        let mut missing = Vec::new();
        for (found, gate) in reads.into_iter().zip(gates) {
            read.push(match found {
                Some((data, stat)) => GateRead {
                    in_flight: stat.num_children as usize,
                    bucket: GateData::read(&data).bucket,
                    version: Some(stat.version),
                },
                None => {
                    missing.push(gate);
                    GateRead {
                        in_flight: 0,
                        bucket: None,
                        version: None,
                    }
                }
            });
        }
        let made = missing.iter().map(|gate| self.make_gate_parents(gate));
        futures::future::try_join_all(made).await?;
        Ok(read)
    }

    /// Makes the parents of a missing gate, unless this process made or met them already.
    async fn make_gate_parents(&self, gate: &Gate) -> Result<()> {
        let parents = &gate.makes[..gate.makes.len().saturating_sub(1)];
        for path in parents {
            if self
                .gate_parents
                .lock()
                .expect("not poisoned")
                .contains(path)
            {
                continue;
            }
            self.ensure_parent(path).await?;
            (self.gate_parents.lock().expect("not poisoned")).insert(path.clone());
        }
        Ok(())
    }

    /// A gate's create failed with `NoNode`: its parents were deleted since this process
    /// made them (by hand); the next claim through it makes them again.
    pub(super) fn forget_gate_parents(&self) {
        self.gate_parents.lock().expect("not poisoned").clear();
    }

    /// Frees the slot a task held while its handler ran. A delete lost with the link (a
    /// leader change, a dropped connection) is sent again in the background every
    /// [`SLOT_RETRY`] until it lands or the session ends (which deletes the slot anyway): a
    /// slot left behind would shrink its route for as long as the session lives, which for a
    /// worker is as long as it runs.
    pub async fn free_slot(&self, slot: &str) {
        if self.try_free_slot(slot).await {
            return;
        }
        let (queue, slot) = (self.clone(), slot.to_string());
        tokio::spawn(async move {
            for _ in 0..SLOT_TRIES {
                tokio::time::sleep(SLOT_RETRY).await;
                if queue.session_over() || queue.try_free_slot(&slot).await {
                    return;
                }
            }
            tracing::warn!(%slot, "slot left to its session's end");
        });
    }

    /// One delete of `slot`: whether it is settled (deleted, gone, or not worth another try).
    async fn try_free_slot(&self, slot: &str) -> bool {
        match self.client().delete(slot, None).await {
            Ok(()) | Err(zk::Error::NoNode) => true,
            Err(e @ (zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout)) => {
                tracing::warn!(slot, error = %e, "slot not freed yet: the link dropped; again soon");
                false
            }
            Err(e) => {
                tracing::warn!(slot, error = %e, "slot left to its session's end");
                true
            }
        }
    }
}
