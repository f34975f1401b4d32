//! Step folders: the step znodes of a completed resumable task (`steps/<id>/`, see
//! [`crate::resume`]) never outlive it.
//!
//! # How it works
//!
//! The run that completes a resumable task deletes its step folder once the completion landed
//! (`process/pass/completion.rs`, [`crate::Queue::drop_steps`]). A run that stops between the
//! two (killed, its session lost, a failed delete) would leave the folder for ever: nothing
//! reads it again, and nothing else deleted it. So the folder is marked as the task ends, and
//! the reaper deletes what is marked. Through the core's hooks ([`StepFolders`]):
//!
//! - at the end of a completed task whose record keeps entries in step znodes, the folder's
//!   data is set to `ended` in the completion's own multi-op: a folder is marked exactly when
//!   its task's completion lands. A folder already gone (another ender dropped it) is left
//!   out;
//! - in the reaper's upkeep, it reads a window of the folders (at most [`PER_SWEEP`], starting
//!   at a place that moves with ZooKeeper's clock, so every folder is looked at in turn) and
//!   deletes each one marked, its step znodes first, in multi-ops that each check the folder's
//!   version as read: a folder written since is left alone.
//!
//! A dead task's folder is not marked: its dead letter may be redriven and resume from it
//! (`event-bridge dead purge` deletes it with the letter).

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::{AfterFailure, End, EndWrite, Feature, Leaving, Site, Upkeep};
use crate::layout::Layout;

/// The data of a folder whose task completed.
const ENDED: &[u8] = b"ended";

/// Folders the reaper looks at per run, at most.
pub const PER_SWEEP: usize = 200;

/// Step znodes deleted in one multi-op, at most (as the completing run's drop does).
const PER_MULTI: usize = 1_000;

/// The feature: the end hook that marks a completed task's folder, and the sweep that deletes
/// marked folders.
pub struct StepFolders;

impl Feature for StepFolders {
    fn name(&self) -> &'static str {
        "steps"
    }

    /// Only a task that carries a record can have step znodes: a record's entries are moved
    /// into step znodes only by a write of the task that stores the record in its body (an
    /// extension, or the one found landed after a lost reply), so a task whose record keeps
    /// entries there carries `resume`. A plain task never asks this feature at its end.
    fn envelope_fields(&self) -> &'static [&'static str] {
        &["resume"]
    }

    fn ends(&self) -> &'static [End] {
        &[End::Completed]
    }

    fn at_end<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Vec<(usize, EndWrite)>>> {
        let writes = match how {
            End::Completed => marks(site.layout, leaving),
            // A dead task's folder stays: a redrive may resume from it.
            End::Dead => Vec::new(),
        };
        Box::pin(async { Ok(writes) })
    }

    fn after_failure(&self, _write: &EndWrite, error: &zk::Error) -> AfterFailure {
        match error {
            zk::Error::NoNode => AfterFailure::LeaveOut,
            _ => AfterFailure::Unexpected,
        }
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(sweep(upkeep))
    }
}

/// The marks of the folders of `leaving`'s tasks whose records keep entries in step znodes.
fn marks(layout: &Layout, leaving: &[Leaving]) -> Vec<(usize, EndWrite)> {
    let stepped = leaving.iter().enumerate();
    stepped
        .filter_map(|(i, one)| Some((i, one.held?)))
        .filter(|(_, task)| task.steps.stored() > 0)
        .map(|(i, task)| {
            let path = layout.steps_of(&task.envelope.id);
            let data = ENDED.to_vec();
            (
                i,
                EndWrite::Set {
                    path,
                    data,
                    version: None,
                },
            )
        })
        .collect()
}

/// Deletes the marked folders of a window of `steps/`; how many went.
async fn sweep(upkeep: &Upkeep) -> Result<u32> {
    let client = &upkeep.client;
    let parent = upkeep.layout.steps();
    let mut ids = upkeep.children(&parent).await?;
    if ids.is_empty() {
        return Ok(0);
    }
    ids.sort();
    let start = (upkeep.now.now_ms() / 1_000).unsigned_abs() as usize % ids.len();
    ids.rotate_left(start);
    ids.truncate(PER_SWEEP);
    let paths: Vec<String> = ids.iter().map(|id| format!("{parent}/{id}")).collect();
    let reads: Vec<_> = paths.iter().map(|p| client.get_data(p)).collect();
    let mut marked = Vec::new();
    for (path, read) in paths.iter().zip(reads) {
        match read.await {
            Ok((data, stat)) if data == ENDED => marked.push((path, stat.version)),
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(Error::zk("get", path.clone(), e)),
        }
    }
    let mut swept = 0;
    for (folder, version) in marked {
        if drop_folder(client, folder, version).await? {
            swept += 1;
            tracing::info!(folder = %folder, "step folder of a completed task swept");
        }
    }
    Ok(swept)
}

/// Deletes `folder` and its step znodes, each multi-op checking the folder at `version`;
/// `false` when it moved or went meanwhile.
async fn drop_folder(client: &zk::Client, folder: &str, version: i32) -> Result<bool> {
    let names = match client.list_children(folder).await {
        Ok(names) => names,
        Err(zk::Error::NoNode) => return Ok(false),
        Err(e) => return Err(Error::zk("list", folder, e)),
    };
    let paths: Vec<String> = names.iter().map(|n| format!("{folder}/{n}")).collect();
    let mut chunks = paths.chunks(PER_MULTI).peekable();
    loop {
        let chunk = chunks.next().unwrap_or_default();
        let last = chunks.peek().is_none();
        let mut writer = client.new_multi_writer();
        let add = |e| Error::zk("multi", folder, e);
        writer.add_check_version(folder, version).map_err(add)?;
        for path in chunk {
            writer.add_delete(path, None).map_err(add)?;
        }
        if last {
            writer.add_delete(folder, Some(version)).map_err(add)?;
        }
        match writer.commit().await {
            Ok(_) if last => return Ok(true),
            Ok(_) => {}
            // Written since (its task's id published again), or dropped by another.
            Err(zk::MultiWriteError::OperationFailed { .. }) => return Ok(false),
            Err(e) => return Err(Error::zk("delete", folder, e)),
        }
    }
}
