//! Concurrency keys at claim and in the reaper's upkeep: a task whose key no gate can be named
//! after buried as malformed, and the sweep of keys' gates nobody needs any more. (A key's
//! gate and its slots, taken at claim and given back at the end, are still the core's
//! `queue/gate.rs`, `queue/slots.rs` and `queue/key_gates.rs`.)
//!
//! # How it works
//!
//! A key's gate (`concurrency/<route>/<key>`) is made by the first claim of a task with that
//! key, so every key ever used would leave one behind. The reaper's sweep ([`Feature::sweep`])
//! reads up to [`PER_SWEEP`] keys' gates and deletes each one that holds nothing: no slot, not
//! written for [`crate::queue::KEY_GATE_IDLE_MS`], and its rate's bucket full again by
//! ZooKeeper's clock. It deletes at the version read, so a claim through the gate in between
//! keeps it; a claim that finds it deleted makes it again. The reap report counts the gates it
//! deleted under `swept.concurrency_keys`.
//!
//! # Costs
//!
//! In the reaper only: a listing per route with keys' gates, a multi-read per 128 gates, and a
//! delete per idle gate.

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::{AtClaim, Feature, Started, Upkeep};
use crate::queue::{KEY_GATE_IDLE_MS, Queue};
use crate::task::Envelope;

/// Keys' gates the reaper looks at per run, at most.
pub const PER_SWEEP: usize = 1_000;

/// The feature: the reaper's sweep of idle keys' gates.
pub struct ConcurrencyKeys;

impl Feature for ConcurrencyKeys {
    fn name(&self) -> &'static str {
        "concurrency_keys"
    }

    fn envelope_fields(&self) -> &'static [&'static str] {
        &["concurrency_key"]
    }

    /// A key no gate can be named after (another producer's: ours refuse it at publish) could
    /// never be admitted: the task is buried as malformed.
    fn at_claim(&self, envelope: &Envelope, _now_ms: i64, _started: &Started<'_>) -> AtClaim {
        match envelope.check_concurrency_key() {
            Ok(()) => AtClaim::Take,
            Err(problem) => AtClaim::Malformed { problem },
        }
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move {
            let queue =
                (upkeep.queue::<Queue>()).expect("the core makes its upkeep from its Queue");
            Ok(sweep(queue, upkeep.now.now_ms(), PER_SWEEP).await? as u32)
        })
    }
}

/// Deletes keys' gates with no slot held, untouched for [`KEY_GATE_IDLE_MS`], and whose
/// bucket is full again at `now_ms`, at most `limit` looked at; how many went. Each is deleted
/// at the version read: a claim through it since (which rewrites it) keeps it.
async fn sweep(queue: &Queue, now_ms: i64, limit: usize) -> Result<usize> {
    let mut swept = 0;
    for gate in queue.gates().read_key_gates(limit).await? {
        let idle = gate.stat.num_children == 0
            && gate.stat.mtime + KEY_GATE_IDLE_MS <= now_ms
            && gate.data.full_at_ms.is_none_or(|at| at <= now_ms);
        if !idle {
            continue;
        }
        let version = Some(gate.stat.version);
        match queue.client().delete(&gate.path, version).await {
            Ok(()) => swept += 1,
            Err(zk::Error::NoNode | zk::Error::BadVersion | zk::Error::NotEmpty) => {}
            Err(e) => return Err(Error::zk("delete", gate.path, e)),
        }
    }
    Ok(swept)
}
