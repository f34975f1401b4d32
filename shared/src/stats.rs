//! A look at the queue's state, cheap enough for every invocation.

use serde::Serialize;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::layout::oldest_first;
use crate::queue::Queue;

/// Counts and the age of the oldest task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Tasks pending, leased ones included.
    pub depth: usize,
    /// Leases held.
    pub leased: usize,
    /// Dead letters.
    pub dead: usize,
    /// How long the oldest pending task has waited, by ZooKeeper's clock.
    pub oldest_task_age_ms: Option<i64>,
}

/// Reads the counts: two lists and three small reads, pipelined.
pub async fn collect(queue: &Queue, now: &ZkTime) -> Result<Stats> {
    let layout = queue.layout();
    let dead_path = layout.dead();
    let dead = queue.count(&dead_path);
    let (leases, tasks) = queue.list().await?;
    let dead = dead.await?;
    let oldest_task_age_ms = match oldest_first(tasks.clone()).first() {
        None => None,
        Some(name) => {
            let path = layout.task(name);
            match queue.client().check_stat(&path).await {
                Ok(Some(stat)) => Some(now.now_ms() - stat.ctime),
                Ok(None) => None,
                Err(e) => return Err(Error::zk("stat", path, e)),
            }
        }
    };
    Ok(Stats {
        depth: tasks.len(),
        leased: leases.len(),
        dead,
        oldest_task_age_ms,
    })
}
