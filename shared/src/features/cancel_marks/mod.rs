//! Cancel marks: a task cancelled while somebody holds it is not touched (that would break its
//! holder's fencing) but marked, `cancelled/<id>`; its holder's completion still counts, but it
//! is never run again. A task nobody holds is buried at once by the cancel (`queue/bury.rs`,
//! reason `cancelled`), without a mark.
//!
//! # How it works
//!
//! Through the core's hooks ([`CancelMarks`]):
//!
//! - at a run's start, the run's one start read lists `cancelled/` for it;
//! - at claim, a task whose id is among those marks is refused with the reason `cancelled`: the
//!   claim buries it, and the run counts it cancelled;
//! - while a resumable handler runs, a mark that appears (in the listing the run reads again
//!   every half second) asks the handler to stop, save and return;
//! - at a release (the holder gives the task back for a retry), the mark's path is created and
//!   deleted in the release's multi-op, which so fails when the mark exists: the task is not
//!   given back, and its holder buries it as cancelled. A queue made before `cancelled/` existed
//!   has no mark to find: the check is left out;
//! - at the end of a task buried as cancelled, its mark is deleted in the same multi-op (looked
//!   for first, one read: a task a cancel buried while nobody held it has none);
//! - in the reaper's upkeep ([`store::sweep`]), marks whose task left `tasks/` under the name it
//!   was marked with are deleted, a few per run;
//! - in `explain`, a marked task (pending, held or waiting) says it is cancelled
//!   (`{"reason": "cancelled"}`), from the listing of the features' start read.
//!
//! The mark is made by `event-bridge cancel` ([`store::mark`]), which then looks again where
//! the task is: a task released meanwhile is cancelled where it went, and the mark is taken
//! back when the task turned out not to be held. A completion ignores the mark: the attempt
//! that was running when the cancel came may still succeed. A claim of a marked task covers a
//! holder that died (the reaper frees its lease; the task stays under its name).
//!
//! # Costs
//!
//! A release has two operations more; a claim none (the marks ride the run's start read); a
//! burial with the reason `cancelled` one read. The mark is by envelope id: two live tasks with
//! one id (a producer's error) are both buried if the second is claimed or released while the
//! first's mark lasts. Our producers refuse an id given twice in one publish, but do not look
//! for an id a live task has: that would be a walk of the whole queue per id.

pub mod store;

pub use store::{mark, unmark};

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::Result;
use crate::feature::{
    AfterFailure, Asked, AtClaim, End, EndWrite, Feature, Leaving, Listed, Said, Site, Started,
    Upkeep,
};
use crate::layout::{Layout, encode_segment};
use crate::state::State;
use crate::task::{Envelope, Task};

/// Marks the reaper looks at per run, at most (each costs up to three requests).
pub const PER_SWEEP: usize = 100;

/// The feature: marks listed at a run's start, checked at claim, at release and while a
/// resumable handler runs; deleted with their task, and swept.
pub struct CancelMarks;

/// Whether the task whose envelope id is `id` is among the marks `listed`.
pub fn is_marked(listed: &Listed, id: &str) -> bool {
    !listed.is_empty() && listed.contains(&encode_segment(id))
}

impl Feature for CancelMarks {
    fn name(&self) -> &'static str {
        "cancel"
    }

    fn listed_at_start(&self) -> Option<&'static str> {
        Some(crate::layout::CANCELLED)
    }

    fn at_claim(&self, envelope: &Envelope, _now_ms: i64, started: &Started<'_>) -> AtClaim {
        match is_marked(started.listed, &envelope.id) {
            true => AtClaim::Cancel,
            false => AtClaim::Take,
        }
    }

    fn stops_running(&self, envelope: &Envelope, started: &Started<'_>) -> bool {
        is_marked(started.listed, &envelope.id)
    }

    /// A marked task, pending or held: `{"reason": "cancelled"}`, said last of a pending
    /// task (what becomes of it at its next claim, whatever holds it now).
    fn explain(&self, envelope: &Envelope, asked: &Asked, started: &Started<'_>) -> Option<Said> {
        let concerned = matches!(asked.state, State::Pending | State::Leased);
        if !concerned || !is_marked(started.listed, &envelope.id) {
            return None;
        }
        let mut holds = serde_json::Map::new();
        holds.insert("reason".into(), "cancelled".into());
        Some(Said {
            line: "cancelled: it goes to the dead letters instead of running again".into(),
            holds: Some(holds),
            last: true,
        })
    }

    fn at_release(&self, layout: &Layout, task: &Task) -> Vec<EndWrite> {
        let path = layout.cancel_mark(&task.envelope.id);
        vec![EndWrite::Absent { path }]
    }

    fn ends(&self) -> &'static [End] {
        &[End::Dead]
    }

    fn at_end<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Vec<(usize, EndWrite)>>> {
        Box::pin(async move {
            match how {
                End::Dead => store::deletes(site, leaving).await,
                End::Completed => Ok(Vec::new()),
            }
        })
    }

    fn after_failure(&self, write: &EndWrite, error: &zk::Error) -> AfterFailure {
        match (write, error) {
            // The mark exists: the task was cancelled while held.
            (EndWrite::Absent { .. }, zk::Error::NodeExists) => AfterFailure::Cancelled,
            // No `cancelled/` (a queue made by an earlier version): no mark to find.
            (EndWrite::Absent { .. }, zk::Error::NoNode) => AfterFailure::LeaveOut,
            // Swept or deleted meanwhile.
            (EndWrite::Delete { .. }, zk::Error::NoNode) => AfterFailure::LeaveOut,
            _ => AfterFailure::Unexpected,
        }
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move { Ok(store::sweep(upkeep, PER_SWEEP).await? as u32) })
    }
}
