//! Looking at the pending tasks: the lists of `tasks/` and `leases/`, and batched reads.

use std::collections::HashSet;

use zookeeper_client as zk;

use super::Queue;
use crate::error::{Error, Result};
use crate::layout::oldest_first;

/// A list of pending tasks, taken at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Unleased task names, oldest first.
    pub candidates: Vec<String>,
    /// All task names.
    pub depth: usize,
    /// Lease names.
    pub leased: usize,
}

/// What reading a task found.
#[derive(Clone, Debug)]
pub enum TaskRead {
    Found {
        body: Vec<u8>,
        stat: zk::Stat,
    },
    /// Completed or removed since it was listed.
    Gone,
    /// Its ACL shuts us out (another producer's credentials): the reason, for the log.
    Unreadable(String),
}

impl Queue {
    /// Lists leases, then tasks, in one round trip. Leases first: a lease only exists for a
    /// task that exists, so a lease whose task is missing from the later list is an orphan.
    pub async fn list(&self) -> Result<(Vec<String>, Vec<String>)> {
        let (leases_path, tasks_path) = (self.layout().leases(), self.layout().tasks());
        let leases = self.client().list_children(&leases_path);
        let tasks = self.client().list_children(&tasks_path);
        let leases = leases
            .await
            .map_err(|e| Error::zk("list", &leases_path, e))?;
        let tasks = tasks.await.map_err(|e| Error::zk("list", &tasks_path, e))?;
        Ok((leases, tasks))
    }

    /// The unleased tasks, oldest first.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let (leases, tasks) = self.list().await?;
        let depth = tasks.len();
        let leased: HashSet<&str> = leases.iter().map(String::as_str).collect();
        let free = tasks
            .into_iter()
            .filter(|t| !leased.contains(t.as_str()))
            .collect();
        Ok(Snapshot {
            candidates: oldest_first(free),
            depth,
            leased: leases.len(),
        })
    }

    /// Reads tasks in one request (a multi-read). A task that is gone, or that we may not read,
    /// is a value: it never fails the others.
    pub async fn read_tasks(&self, names: &[String]) -> Result<Vec<TaskRead>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = self.client().new_multi_reader();
        for name in names {
            let path = self.layout().task(name);
            reader
                .add_get_data(&path)
                .map_err(|e| Error::zk("get", path, e))?;
        }
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", self.layout().tasks(), e))?;
        names
            .iter()
            .zip(results)
            .map(|(name, result)| match result {
                zk::MultiReadResult::Data { data, stat } => {
                    Ok(TaskRead::Found { body: data, stat })
                }
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(TaskRead::Gone),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoAuth,
                } => Ok(TaskRead::Unreadable("not authorized to read it".into())),
                zk::MultiReadResult::Error { err } => {
                    Err(Error::zk("get", self.layout().task(name), err))
                }
                other => {
                    let msg = format!("multi-read returned {other:?}");
                    Err(Error::zk(
                        "get",
                        self.layout().task(name),
                        zk::Error::UnexpectedError(msg),
                    ))
                }
            })
            .collect()
    }
}
