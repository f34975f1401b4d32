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
use super::claim::{ClaimOutcome, Holds, Take};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::limit::{self, Bucket, Limit};

/// A gate's rewrite, sent first in the claim's multi-op.
pub(super) struct GateWrite {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    pub(super) version: i32,
    /// The tasks admitted through it (their indices in the caller's outcomes).
    pub(super) admitted: Vec<usize>,
}

/// A gate as read: slots held, its bucket, its version.
struct GateRead {
    in_flight: usize,
    bucket: Option<Bucket>,
    version: i32,
}

impl Queue {
    /// Takes `takes` through the gates of their routes: those admitted get their slot (when
    /// the route caps tasks in flight) and stay in `takes`; the others are answered
    /// [`ClaimOutcome::Limited`] in `outcomes` and leave `takes`. Returns the gates' rewrites.
    pub(super) async fn through_gates(
        &self,
        takes: &mut Vec<(usize, Take)>,
        outcomes: &mut [Option<ClaimOutcome>],
        now: &ZkTime,
        holds: &Holds,
    ) -> Result<Vec<GateWrite>> {
        let mut by_gate: BTreeMap<String, (Limit, Vec<usize>)> = BTreeMap::new();
        for (pos, (_, take)) in takes.iter().enumerate() {
            if let Some((gate, limit)) = holds.limits.for_type(&take.envelope.event_type) {
                by_gate
                    .entry(gate)
                    .or_insert((limit, Vec::new()))
                    .1
                    .push(pos);
            }
        }
        if by_gate.is_empty() {
            return Ok(Vec::new());
        }
        let paths: Vec<String> = by_gate
            .keys()
            .map(|g| self.layout().limit_gate(g))
            .collect();
        let reads = self.read_gates(&paths).await?;
        let mut refused = Vec::new();
        let mut writes = Vec::new();
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
            refused.extend(left.iter().map(|pos| (*pos, retry_in_ms)));
            if admitted.is_empty() {
                continue;
            }
            for pos in admitted {
                let take = &mut takes[*pos].1;
                take.slot = limit
                    .max_in_flight
                    .map(|_| self.layout().limit_slot(&gate, &take.name));
            }
            writes.push(GateWrite {
                path,
                data: match admission.bucket {
                    Some(bucket) => serde_json::to_vec(&bucket)?,
                    None => Vec::new(),
                },
                version: read.version,
                admitted: admitted.iter().map(|pos| takes[*pos].0).collect(),
            });
        }
        refused.sort_unstable();
        for (pos, retry_in_ms) in refused.into_iter().rev() {
            let (index, _) = takes.remove(pos);
            outcomes[index] = Some(ClaimOutcome::Limited { retry_in_ms });
        }
        Ok(writes)
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

    /// Frees the slot a task held while its handler ran. A slot that cannot be deleted now
    /// goes with the session.
    pub async fn free_slot(&self, slot: &str) {
        match self.client().delete(slot, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => tracing::warn!(slot, error = %e, "slot left to its session's end"),
        }
    }
}
