//! A settled task's marker (`dependents/<id>`): what ending a task writes for the children that
//! may wait for it, and the check of `dependents/` that stands for every marker of a multi-op
//! when no task has children (see `dependents`).

use zookeeper_client as zk;

use super::Queue;
use super::ops::{Multi, Op};
use crate::error::Result;
use crate::layout::Layout;
use crate::task::after::ParentEnd;

/// What settling one task writes to its marker.
#[derive(Clone, Debug)]
pub(crate) struct MarkerWrite {
    /// The task's envelope id.
    pub id: String,
    path: String,
    data: Vec<u8>,
    /// The marker's version when it was seen (children wait); `None`: created and deleted.
    version: Option<i32>,
}

/// The check of `dependents/` that stands for the markers of a multi-op's tasks, when it was
/// seen without children at data version `version`.
#[derive(Clone, Debug)]
pub(crate) struct NoChildren {
    pub(super) path: String,
    pub(super) version: i32,
}

impl NoChildren {
    /// Adds the check to `multi`, tagged `tag`.
    pub(crate) fn push<'a, T: Copy + PartialEq>(&'a self, multi: &mut Multi<'a, T>, tag: T) {
        multi.push(tag, Op::Check(&self.path, self.version));
    }
}

impl MarkerWrite {
    pub(crate) fn new(layout: &Layout, id: &str, settled: &ParentEnd) -> Self {
        MarkerWrite {
            id: id.to_string(),
            path: layout.dependents_of(id),
            data: settled.to_bytes(),
            version: None,
        }
    }

    /// Whether children wait: the committed write set the marker.
    pub(crate) fn has_children(&self) -> bool {
        self.version.is_some()
    }

    /// Adds the marker's write to `multi`, tagged `tag`.
    pub(crate) fn push<'a, T: Copy + PartialEq>(&'a self, multi: &mut Multi<'a, T>, tag: T) {
        match self.version {
            None => multi
                .push(tag, Op::Create(&self.path, b""))
                .push(tag, Op::Delete(&self.path, -1)),
            Some(version) => multi.push(tag, Op::Set(&self.path, &self.data, version)),
        };
    }

    /// Catches up after the marker's write failed the multi-op with `error`: reads the marker
    /// (it was created, changed or deleted meanwhile), or makes `dependents/` in a queue made
    /// before it.
    pub(crate) async fn after_failure(&mut self, queue: &Queue, error: &zk::Error) -> Result<()> {
        if *error == zk::Error::NoNode && self.version.is_none() {
            return queue
                .cancels()
                .ensure_parent(&queue.layout().dependents())
                .await;
        }
        self.version = queue.read_path(&self.path).await?.map(|(_, s)| s.version);
        Ok(())
    }
}
