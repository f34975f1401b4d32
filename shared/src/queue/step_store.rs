//! The step znodes of resumable tasks (`steps/<id>/`, [`crate::resume::store`]): read back
//! when a run claims a task whose record stored some, and deleted when the task ends.
//!
//! The holder writes them in its extension's and its release's multi-op ([`super::holder`]);
//! the folder is created before a task's first one. A completion deletes the folder after it
//! landed ([`Queue::drop_steps`]), in one multi-op when it holds at most [`DROP_PER_MULTI`]
//! znodes, else in several (each chunk is a write's worth of entries, usually one step).

use zookeeper_client as zk;

use super::Queue;
use super::ops::{Multi, Op, Part};
use crate::error::{Error, Result};
use crate::resume::Entry;

/// Step znodes deleted in one multi-op, at most (each delete is about 60 bytes of request).
pub const DROP_PER_MULTI: usize = 1_000;

impl Queue {
    /// The `stored` entries of the task whose envelope id is `id`, read back from its step
    /// znodes (pipelined: every read sent before the first answer is awaited). `Ok(Err(why))`
    /// when they do not read back whole.
    pub(crate) async fn read_steps(
        &self,
        id: &str,
        stored: usize,
    ) -> Result<std::result::Result<Vec<Entry>, String>> {
        let folder = self.layout().steps_of(id);
        let names = match self.client().list_children(&folder).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(Error::zk("list", folder, e)),
        };
        let paths: Vec<String> = names.iter().map(|n| format!("{folder}/{n}")).collect();
        let reads: Vec<_> = paths.iter().map(|p| self.client().get_data(p)).collect();
        let mut chunks = Vec::with_capacity(names.len());
        for ((name, path), read) in names.into_iter().zip(&paths).zip(reads) {
            match read.await {
                Ok((data, _)) => chunks.push((name, data)),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(Error::zk("get", path.clone(), e)),
            }
        }
        Ok(crate::resume::store::join(stored, chunks))
    }

    /// Creates the step folder of the task whose envelope id is `id` (and `steps/`, in a queue
    /// made by an earlier version), when missing.
    pub(crate) async fn ensure_steps_folder(&self, id: &str) -> Result<()> {
        let folder = self.layout().steps_of(id);
        let create = || {
            let options = self.created(zk::CreateMode::Persistent);
            let client = self.client().clone();
            let folder = folder.clone();
            async move { client.create(&folder, b"", &options).await.map(drop) }
        };
        match create().await {
            Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
            Err(zk::Error::NoNode) => {
                self.cancels().ensure_parent(&self.layout().steps()).await?;
                match create().await {
                    Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(Error::zk("create", folder, e)),
                }
            }
            Err(e) => Err(Error::zk("create", folder, e)),
        }
    }

    /// Deletes the step znodes of the task whose envelope id is `id`, and their folder: the
    /// task ended. How many znodes it deleted (the folder included); none when there was none.
    pub async fn drop_steps(&self, id: &str) -> Result<usize> {
        let folder = self.layout().steps_of(id);
        let names = match self.client().list_children(&folder).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::zk("list", folder, e)),
        };
        let paths: Vec<String> = names.iter().map(|n| format!("{folder}/{n}")).collect();
        let mut deleted = 0;
        let mut batches = paths.chunks(DROP_PER_MULTI).peekable();
        loop {
            let batch = batches.next().unwrap_or_default();
            let last = batches.peek().is_none();
            let mut multi = Multi::new();
            for path in batch {
                multi.push(Part::Steps, Op::Delete(path, -1));
            }
            if last {
                multi.push(Part::Steps, Op::Delete(&folder, -1));
            }
            match self.commit("drop steps", &multi).await? {
                Ok(_) => deleted += batch.len() + usize::from(last),
                // Another ender deleted them first.
                Err(failed) if failed.error == zk::Error::NoNode => return Ok(deleted),
                Err(failed) => return Err(failed.unexpected("drop steps")),
            }
            if last {
                return Ok(deleted);
            }
        }
    }
}
