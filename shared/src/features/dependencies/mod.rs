//! Dependencies at their parents' ends and in the reaper's upkeep: the marker each ending
//! writes for the children that may wait for the task (`dependents/<id>`), the children seen
//! to once it landed, and the reaper's sweep of settled markers. (Publishing a child and
//! settling one child are still the core's `queue/parents/` and `queue/dependents.rs`; the
//! marker's format is `task/after.rs`.)
//!
//! # How it works
//!
//! Every task may be a parent (a child names it by its envelope's id, or a plain body by its
//! task's name), so every ending multi-op carries this feature's part (`markers.rs`):
//!
//! - When `dependents/` was last seen without children, one `check` of `dependents/` at that
//!   data version stands for every task of the multi-op: a child's publish sets `dependents/`
//!   in its own multi-op, so no marker can have appeared since. A start read that finds it so
//!   is answered by the core ([`Feature::idle`]), which then adds that check to every ending
//!   itself, without calling this feature (`feature/covered.rs`), and asks for this part only
//!   once the check failed on a `dependents/` with children: a plain task's run never enters
//!   this feature. Without such a read (a process that made none), this part makes the same
//!   check from what it last saw (by its own reads, or a start read that found children).
//! - Otherwise each task's marker is created and deleted in the multi-op, which fails it when
//!   a child registered (the marker exists); the marker is then read, and set at the version
//!   read to how the task ended ([`crate::task::after::ParentEnd`]).
//! - A failed check reads `dependents/` again; a failed marker write reads the marker again
//!   (or makes `dependents/`, in a queue made before it): 64 rereads in one ending at most.
//! - Once the ending is over, the children of each task whose marker was set are seen to,
//!   one after another (`Dependencies::see_to_children_of`): released to their lanes,
//!   rewritten, or buried with their parent. A child that dies so ends through the same
//!   ending, whose part leaves its own children to the walk that buried it. A failure is
//!   logged, and so is a consumer that stops in between: the reaper's sweep (`sweep.rs`)
//!   sees to the children of every settled marker it finds, counted in the reap report under
//!   `swept.dependencies`.
//!
//! # Costs
//!
//! One `check` per ending multi-op while no parent has children; otherwise two operations per
//! task, and for a parent with children a read of its marker and the work of its children. In
//! the reaper: a listing of `dependents/` and a multi-read per 64 markers.

mod markers;
mod sweep;

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::feature::{
    AtStart, End, EndPart, Feature, Idle, IdleCheck, Leaving, Site, StartRead, Upkeep,
};
use crate::queue::Queue;

use markers::{EmptyAt, Markers};
pub use sweep::settled_markers;

/// The feature: markers written at the ends of tasks, and their children seen to.
#[derive(Default)]
pub struct Dependencies {
    /// The data version at which `dependents/` was last seen without children.
    empty: Arc<EmptyAt>,
}

impl Feature for Dependencies {
    fn name(&self) -> &'static str {
        "dependencies"
    }

    fn read_at_start(&self) -> Option<&'static str> {
        Some("dependents")
    }

    /// No marker under `dependents/` (no parent has children): no ending writes one, so the
    /// core checks `dependents/` at the version read in every ending multi-op in place of
    /// this feature's part (a child's publish sets it, so the check fails once one
    /// registered), and asks for the part only then.
    fn idle(&self) -> Option<Idle> {
        Some(Idle {
            data: b"",
            check: IdleCheck::Ends,
        })
    }

    fn saw_at_start(&self, read: &StartRead<'_>) -> Result<AtStart> {
        self.empty.saw(read.found.map(|(_, stat)| stat));
        Ok(AtStart::default())
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move {
            let queue =
                (upkeep.queue::<Queue>()).expect("the core makes its upkeep from its Queue");
            Ok(settled_markers(queue).await? as u32)
        })
    }

    fn end_part<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Option<Box<dyn EndPart>>>> {
        Box::pin(async move {
            let part = Markers::new(site.layout, &self.empty, leaving, how);
            Ok(part.map(|part| Box::new(part) as Box<dyn EndPart>))
        })
    }
}
