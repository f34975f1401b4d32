//! Completion records (`KEEP_DONE`): a completed task leaves a record of how it completed, kept
//! for a while, which `status` and `explain` show, a child's publish finds its parent by, and
//! a publish cut by a lost connection finds its task by (see [`crate::done_record`]).
//!
//! # How it works
//!
//! Through the core's hooks ([`DoneRecords`]):
//!
//! - at the end of completed tasks ([`mod@write`]), each leaves `done/<bucket>/<name>` (what it
//!   was, when it completed, after how many attempts, with which fencing token, what the sink
//!   answered, the handler's result) and `done/<bucket>/@<id>` (its name), both created in the
//!   completion's own multi-op: a record exists exactly when its completion landed.
//!   `<bucket>` is the start of the 10 minutes in which the record expires, made once per
//!   bucket and queue before the multi-op;
//! - when one of them fails the multi-op, it is left out and the completion goes on: an
//!   earlier task with the same id (a redriven task, a producer's own id) left its `@<id>`
//!   entry in the bucket, and the id keeps finding that first record; a record the task
//!   somehow already has stays as it is;
//! - in the reaper's upkeep ([`sweep`]), whole buckets whose 10 minutes have passed are
//!   deleted, at most [`PER_SWEEP`] znodes a run;
//! - when the core looks for a task that left the queue, the record says it completed, under
//!   which name and id.
//!
//! A record is at most about 66 KB: a result over 64 KiB is kept as its size and type. The
//! core splits a completion whose feature writes pass 512 KiB over several multi-ops, so a
//! batch of large results stays within ZooKeeper's request limit.
//!
//! # Costs
//!
//! Without `KEEP_DONE`, nothing: the hooks return at once and a result is dropped. With it,
//! per task, two creates inside a completion multi-op that is sent anyway (the result rides in
//! the record's create), and once per bucket and queue the bucket's create. `make bench`
//! measures the drain with and without records.

pub mod sweep;
pub mod write;

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::done_record::DoneRecord;
use crate::error::Result;
use crate::feature::{AfterFailure, End, EndWrite, EndedTask, Feature, Leaving, Site, Upkeep};

pub use sweep::PER_SWEEP;

/// The feature: records written at completion, swept when they expire, found for the core.
pub struct DoneRecords {
    /// `KEEP_DONE`: how long a record is kept; none are written without it.
    keep: Option<Duration>,
    /// The bucket this queue last made sure of: a create that finds its node is a logged
    /// write all the same, so a bucket is made once.
    made: AtomicI64,
}

impl DoneRecords {
    /// Records kept for `keep` (`KEEP_DONE`), or none written.
    pub fn new(keep: Option<Duration>) -> Self {
        DoneRecords {
            keep,
            made: AtomicI64::new(i64::MIN),
        }
    }
}

impl Feature for DoneRecords {
    fn name(&self) -> &'static str {
        "done"
    }

    fn ends(&self) -> &'static [End] {
        match self.keep {
            Some(_) => &[End::Completed],
            None => &[],
        }
    }

    fn at_end<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Vec<(usize, EndWrite)>>> {
        Box::pin(async move {
            match (how, self.keep) {
                (End::Completed, Some(keep)) => write::records(self, site, leaving, keep).await,
                (End::Completed, None) | (End::Dead, _) => Ok(Vec::new()),
            }
        })
    }

    fn after_failure(&self, _write: &EndWrite, error: &zk::Error) -> AfterFailure {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        match error {
            BadVersion | NoNode | NodeExists => AfterFailure::LeaveOut,
            _ => AfterFailure::Unexpected,
        }
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move { Ok(sweep::expired(upkeep, PER_SWEEP).await? as u32) })
    }

    fn find_ended<'a>(
        &'a self,
        site: &'a Site<'a>,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<EndedTask>>>> {
        Box::pin(async move {
            let records = crate::done_record::find_all(site, keys).await?;
            let ended = |record: DoneRecord| EndedTask {
                task: record.task,
                id: record.id,
                how: End::Completed,
            };
            Ok(records.into_iter().map(|r| r.map(ended)).collect())
        })
    }
}
