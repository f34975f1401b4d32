//! Batches at their members' ends: each member's completion or burial counts in its batch, in
//! the member's own ending multi-op, and the batch's callback tasks are published in that
//! multi-op when it leaves the batch sealed and settled. (Opening, sealing and a member's
//! publish are still the core's `queue/members.rs`; the batch's format and its callbacks'
//! envelopes are `task/batch.rs`.)
//!
//! # How it works
//!
//! Through the core's end hooks ([`Batches`]):
//!
//! - before an ending multi-op with members, its part in it (`tally.rs`): the batches
//!   of its members, read in one multi-read, and this process's turn at each of them, held
//!   until the multi-op's answer, so that endings of one process sent together do not fail
//!   each other at a batch's version;
//! - at each try, one write per batch among the tasks still ending: its counters (completed,
//!   and the names of the dead) raised at the version read, and, when that leaves the batch
//!   sealed and settled, its callback tasks created at the normal lane's tail;
//! - when one of those writes fails the try (another process's settlement or a publish into
//!   the batch changed it, or it was deleted), the batch is read again after a short pause and
//!   the ending is tried again, up to 64 times in one ending;
//! - once the multi-op landed, each callback's name is written into its batch, for `batch
//!   status` (a lost write leaves the callback's id there, which `status` accepts);
//! - before a completion is sent, each batch is charged [`crate::task::batch::MAX_TALLY_BYTES`]
//!   to its first member, so that the core splits a completion within ZooKeeper's request
//!   limit.
//!
//! A batch znode whose data is not a batch (overwritten by hand or by another tool) does not
//! hold its members back: the ending reads it as gone, with a warning naming it, so the member
//! ends uncounted, and so do the tasks beside it in the same multi-op; the znode is left as it
//! is. A batch gone, or whose callbacks were published already, counts nothing more.
//!
//! # Costs
//!
//! Nothing for an ending without members: the hooks look at the envelopes and return. One read
//! of the batches per ending multi-op that has members (one multi-read for all its batches),
//! one `setData` per batch in the multi-op, and a second read whenever another writer changed
//! the batch first. Concurrent settlements of one batch contend on its version: each conflict
//! costs a read and a retry of that multi-op, so a batch drained by many consumers at once pays
//! more than its members would alone.

mod tally;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::feature::{End, EndPart, Feature, Leaving, Site};
use crate::queue::Turns;
use crate::task::batch::MAX_TALLY_BYTES;

/// The feature: members counted in their batches at their ends.
#[derive(Default)]
pub struct Batches {
    /// The turns of this process's endings at each batch they count in.
    turns: Turns,
}

impl Feature for Batches {
    fn name(&self) -> &'static str {
        "batches"
    }

    fn envelope_fields(&self) -> &'static [&'static str] {
        &["batch"]
    }

    fn end_part<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Option<Box<dyn EndPart>>>> {
        Box::pin(async move {
            let members = tally::members(leaving, how);
            if members.is_empty() {
                return Ok(None);
            }
            let part = tally::Tallies::read(site, &self.turns, members).await?;
            Ok(Some(Box::new(part) as Box<dyn EndPart>))
        })
    }

    fn end_bytes(&self, leaving: &[Leaving<'_>]) -> Vec<usize> {
        let mut seen = std::collections::HashSet::new();
        (leaving.iter())
            .map(|one| match one.envelope.and_then(|e| e.batch.as_deref()) {
                Some(batch) if seen.insert(batch) => MAX_TALLY_BYTES,
                _ => 0,
            })
            .collect()
    }
}
