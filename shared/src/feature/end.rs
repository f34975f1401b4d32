//! The ending as the hooks see it: how tasks end ([`End`]), a leaving task ([`Leaving`]), the
//! writes a feature adds ([`EndWrite`]) and its answer when one failed ([`AfterFailure`]), a
//! feature's part in the one ending multi-op ([`EndPart`]) and what follows from it
//! ([`AfterEnd`]), and what a feature kept of a task that left the queue ([`EndedTask`]).

use futures::future::BoxFuture;
use zookeeper_client as zk;

use super::Site;
use crate::error::Result;
use crate::handler::Delivered;
use crate::task::{Envelope, Task};

/// A feature's part in one ending multi-op ([`Feature::end_part`](super::Feature::end_part)), kept from before its
/// first try to its answer: asked for its writes at each try, answered when one of them
/// failed the try, told when the multi-op landed. What it holds (a turn at a znode, what it
/// read) is let go when it is dropped, after the ending.
pub trait EndPart: Send + Sync {
    /// Its writes for this try, given `still`: the indexes (in the `leaving` it was made
    /// with) of the tasks still ending. A task that ended otherwise (gone, its lease lost) is
    /// no longer among them.
    fn writes(&mut self, still: &[usize]) -> Vec<EndWrite>;

    /// Its write `k` (of this try's [`EndPart::writes`]) failed the multi-op with `error`:
    /// whether the ending is tried again (it read again what it must), or fails with the
    /// error (`false`). It bounds its own rereads.
    fn failed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        k: usize,
        error: &'a zk::Error,
    ) -> BoxFuture<'a, Result<bool>>;

    /// The multi-op landed: `results`, one for each of its writes of that try, in order.
    fn landed<'a>(
        &'a mut self,
        _site: &'a Site<'a>,
        _results: Vec<&'a zk::MultiWriteResult>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The multi-op landed (after [`EndPart::landed`]): what follows from the ending, such as
    /// other tasks that waited for the ended ones, run once the ending is over and every part
    /// let go of what it held.
    fn after(&mut self) -> Option<Box<dyn AfterEnd>> {
        None
    }
}

/// What follows from an ending ([`EndPart::after`]), run once it is over. A failure here
/// changes nothing of the ending: it logs it.
pub trait AfterEnd: Send {
    /// Runs it, in the queue at `site`.
    fn run<'a>(self: Box<Self>, site: &'a Site<'a>) -> BoxFuture<'a, ()>;
}

/// The features' parts in one ending multi-op, each with its feature's index.
#[derive(Default)]
pub struct EndParts(pub Vec<(usize, Box<dyn EndPart>)>);

/// A task at its end, as [`Feature::at_end`](super::Feature::at_end) sees it.
pub struct Leaving<'a> {
    /// Its name (in its lane, or where it waits).
    pub name: &'a str,
    /// What other tasks name it by: its envelope's id, or a plain body's task name; none for
    /// a body that is neither.
    pub id: Option<&'a str>,
    /// Its envelope; none for a plain or unreadable body.
    pub envelope: Option<&'a Envelope>,
    /// The task as its holder has it, when it is held (a completed task always is).
    pub held: Option<&'a Task>,
    /// What its sink answered, when it says.
    pub delivered: Option<&'a Delivered>,
    /// Why it goes to the dead letters, when it does.
    pub reason: Option<&'a str>,
    /// Whether it ends within another task's end (a waiting child dying with its parent):
    /// what follows from its own end is left to the walk that ends it.
    pub within_another: bool,
}

impl<'a> Leaving<'a> {
    /// A held task that completed, its sink's answer `delivered`.
    pub fn completed(task: &'a Task, delivered: Option<&'a Delivered>) -> Self {
        Leaving {
            name: &task.name,
            id: Some(&task.envelope.id),
            envelope: Some(&task.envelope),
            held: Some(task),
            delivered,
            reason: None,
            within_another: false,
        }
    }
}

/// A task that left the queue, as a feature kept it ([`Feature::find_ended`](super::Feature::find_ended)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedTask {
    /// Its name when it ended.
    pub task: String,
    /// Its envelope id.
    pub id: String,
    /// How it ended.
    pub how: End,
}

/// How tasks end, as [`Feature::at_end`](super::Feature::at_end) is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Their handler succeeded.
    Completed,
    /// They go to the dead letters (each [`Leaving`] says why).
    Dead,
}

/// A write a feature adds to an ending, at any version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndWrite {
    /// Deletes znode `path`, at `version` (any when none).
    Delete {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Fails the multi-op unless znode `path` is at data version `version`.
    Check {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: i32,
    },
    /// Fails the multi-op when znode `path` exists (a create and a delete of it, empty).
    Absent {
        /// The znode.
        path: String,
    },
    /// Sets the data of znode `path`, at `version` (any when none).
    Set {
        /// The znode.
        path: String,
        /// Its new data.
        data: Vec<u8>,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Creates the persistent znode `path` with `data`.
    Create {
        /// The znode.
        path: String,
        /// Its data.
        data: Vec<u8>,
    },
    /// Creates a persistent sequential znode `prefix<sequence>` with `data` (a task at a
    /// lane's tail).
    CreateSequential {
        /// The path its sequence number is appended to.
        prefix: String,
        /// Its data.
        data: Vec<u8>,
    },
}

impl EndWrite {
    /// What it adds to a request: its path and data.
    pub fn bytes(&self) -> usize {
        match self {
            EndWrite::Set { path, data, .. }
            | EndWrite::Create { path, data }
            | EndWrite::CreateSequential { prefix: path, data } => path.len() + data.len(),
            EndWrite::Delete { path, .. } | EndWrite::Check { path, .. } => path.len(),
            EndWrite::Absent { path } => 2 * path.len(),
        }
    }
}

/// A feature's answer to one of its writes that failed an ending or a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// The ending (or release) is committed again without the write.
    LeaveOut,
    /// The ending (or release) is committed again without any of the feature's writes for
    /// that task: they stand or fall together.
    LeaveOutAll,
    /// The ending (or release) is committed again with this write in place of the one that
    /// failed (the same znode at the version it moved to).
    Replace(EndWrite),
    /// A release only: the task is not given back, as it was cancelled while held; its
    /// holder buries it (`Settled::Cancelled`).
    Cancelled,
    /// Nothing explains it: the ending fails with the error.
    Unexpected,
}

impl AfterFailure {
    /// Changes one task's feature writes `writes` (each with its feature's index) as this
    /// answer to the failure of `writes[k]` says; whether the ending (or release) is tried
    /// again. `false` for [`AfterFailure::Cancelled`] and [`AfterFailure::Unexpected`], which
    /// the caller answers.
    pub fn apply(self, writes: &mut Vec<(usize, EndWrite)>, k: usize) -> bool {
        match self {
            AfterFailure::LeaveOut => {
                writes.remove(k);
            }
            AfterFailure::LeaveOutAll => {
                let feature = writes[k].0;
                writes.retain(|(at, _)| *at != feature);
            }
            AfterFailure::Replace(write) => writes[k].1 = write,
            AfterFailure::Cancelled | AfterFailure::Unexpected => return false,
        }
        true
    }
}
