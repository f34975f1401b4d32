//! The gates of limited routes (`limits/<route>`): a claim of a task of a limited route takes
//! it through the gate in the claim's own multi-op. The gate's data is the rate's token bucket
//! (see [`crate::limit`]); every admission rewrites it at the version read, so admissions by
//! any number of consumers are serialized by ZooKeeper, and counting the gate's children (the
//! slots) and writing it happen as one. Each admitted task of a route with `max_in_flight`
//! creates an ephemeral slot, `limits/<route>/<task>`, deleted when its handler ends, or by
//! ZooKeeper when its consumer's session ends (a crashed holder's slot frees itself).

use std::collections::BTreeMap;

use zookeeper_client as zk;

use super::Queue;
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::limit::{self, Bucket, Limit, RouteLimits};

/// A gate's rewrite, sent first in the claim's multi-op.
pub(super) struct GateWrite {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    pub(super) version: i32,
    /// The tasks admitted through it (indices in the caller's list).
    pub(super) admitted: Vec<usize>,
}

/// What the gates made of a list of tasks wanting in.
#[derive(Default)]
pub(super) struct Gated {
    pub(super) writes: Vec<GateWrite>,
    /// Per task: the slot it takes, when admitted through a route that caps tasks in flight.
    pub(super) slots: Vec<Option<String>>,
    /// The tasks left out (indices in the caller's list), and when they may try again.
    pub(super) refused: Vec<(usize, i64)>,
}

/// A gate as read: slots held, its bucket, its version.
struct GateRead {
    in_flight: usize,
    bucket: Option<Bucket>,
    version: i32,
}

/// How often a slot whose delete was lost is tried again, and how many times at most (the
/// session, whose end deletes it anyway, is over well before).
const SLOT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const SLOT_TRIES: usize = 120;

impl Queue {
    /// Takes `tasks` (event type, name) through the gates of their routes under `limits`.
    pub(super) async fn through_gates(
        &self,
        tasks: &[(&str, &str)],
        now: &ZkTime,
        limits: &RouteLimits,
    ) -> Result<Gated> {
        let mut gated = Gated {
            slots: vec![None; tasks.len()],
            ..Gated::default()
        };
        let mut by_gate: BTreeMap<String, (Limit, Vec<usize>)> = BTreeMap::new();
        for (pos, (event_type, _)) in tasks.iter().enumerate() {
            if let Some((gate, limit)) = limits.for_type(event_type) {
                by_gate
                    .entry(gate)
                    .or_insert((limit, Vec::new()))
                    .1
                    .push(pos);
            }
        }
        if by_gate.is_empty() {
            return Ok(gated);
        }
        let paths: Vec<String> = by_gate
            .keys()
            .map(|g| self.layout().limit_gate(g))
            .collect();
        let reads = self.read_gates(&paths).await?;
        for (((gate, (limit, positions)), read), path) in by_gate.into_iter().zip(reads).zip(paths)
        {
            let admission = limit::admit(
                &limit,
                read.in_flight,
                read.bucket,
                now.now_ms(),
                positions.len(),
            );
            let (admitted, left) = positions.split_at(admission.admitted);
            let retry_in_ms = admission.retry_in_ms.unwrap_or(limit::SLOT_POLL_MS);
            gated
                .refused
                .extend(left.iter().map(|pos| (*pos, retry_in_ms)));
            if admitted.is_empty() {
                continue;
            }
            for pos in admitted {
                gated.slots[*pos] = limit
                    .max_in_flight
                    .map(|_| self.layout().limit_slot(&gate, tasks[*pos].1));
            }
            gated.writes.push(GateWrite {
                path,
                data: match admission.bucket {
                    Some(bucket) => serde_json::to_vec(&bucket)?,
                    None => Vec::new(),
                },
                version: read.version,
                admitted: admitted.to_vec(),
            });
        }
        Ok(gated)
    }

    /// Reads gates in one multi-read; a gate not made yet is made first.
    async fn read_gates(&self, paths: &[String]) -> Result<Vec<GateRead>> {
        for _ in 0..2 {
            let reads = self.read_paths(paths).await?;
            let mut missing = false;
            let mut gates = Vec::with_capacity(reads.len());
            for (read, path) in reads.into_iter().zip(paths) {
                let Some((data, stat)) = read else {
                    self.ensure_parent(&self.layout().limits()).await?;
                    self.ensure_parent(path).await?;
                    missing = true;
                    continue;
                };
                gates.push(GateRead {
                    in_flight: stat.num_children as usize,
                    bucket: serde_json::from_slice(&data).ok(),
                    version: stat.version,
                });
            }
            if !missing {
                return Ok(gates);
            }
        }
        Err(Error::Unreadable {
            path: self.layout().limits(),
            problem: "a route's gate could not be made".into(),
        })
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
