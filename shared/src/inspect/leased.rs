//! The tasks held right now, each with its holder and the time left on its lease: `leases/` is
//! listed (as many entries as tasks in flight, not as many as queued) and each lease is read
//! with its task, [`PAIRS`] pairs to a request.

use super::{TaskInfo, body_info, lease_info};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::queue::{LeaseSeen, Queue};

/// Lease and task pairs read in one request.
const PAIRS: usize = 16;

/// Held tasks in queue order, at most `limit`, with how many leases there are in all.
/// A lease whose task is already gone (completed a moment ago, or orphaned) is left out.
pub async fn leased(queue: &Queue, now: &ZkTime, limit: usize) -> Result<(Vec<TaskInfo>, usize)> {
    let path = queue.layout().leases();
    let mut names = queue
        .client()
        .list_children(&path)
        .await
        .map_err(|e| Error::zk("list", &path, e))?;
    names.sort();
    let total = names.len();
    let mut infos = Vec::new();
    for chunk in names[..total.min(limit)].chunks(PAIRS) {
        let paths: Vec<String> = chunk
            .iter()
            .flat_map(|n| [queue.layout().task(n), queue.layout().lease(n)])
            .collect();
        let reads = queue.read_paths(&paths).await?;
        for (name, pair) in chunk.iter().zip(reads.chunks(2)) {
            let (Some((body, stat)), Some((lease, lease_stat))) = (&pair[0], &pair[1]) else {
                continue;
            };
            let seen = LeaseSeen::from_read(lease, lease_stat);
            infos.push(TaskInfo {
                lease: Some(lease_info(&seen, queue, now)),
                ..body_info(name, body, stat, now)
            });
        }
    }
    Ok((infos, total))
}
