//! The marks themselves: made by a cancel, found at a task's burial, swept by the reaper.

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::{EndWrite, Leaving, Upkeep};
use crate::queue::{CANCELLED, Queue};

/// What a cancel mark holds.
#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    /// The task's name when it was marked (it keeps it while held).
    task: String,
    /// When, by the cancelling client's clock (ms since the epoch).
    since: i64,
}

/// Marks the task with envelope id `id`, held under `name`, cancelled in `queue`; `false`
/// when it was marked already.
pub async fn mark(queue: &Queue, id: &str, name: &str) -> Result<bool> {
    let site = queue.site();
    let path = site.layout.cancel_mark(id);
    let mark = Mark {
        task: name.to_string(),
        since: chrono::Utc::now().timestamp_millis(),
    };
    let data = serde_json::to_vec(&mark)?;
    site.ensure(&site.layout.cancelled()).await?;
    let options = zk::CreateMode::Persistent.with_acls(site.acls);
    match site.client.create(&path, &data, &options).await {
        Ok(_) => Ok(true),
        Err(zk::Error::NodeExists) => Ok(false),
        Err(e) => Err(Error::zk("create", path, e)),
    }
}

/// Removes the mark of `id` in `queue`, if there is one.
pub async fn unmark(queue: &Queue, id: &str) -> Result<()> {
    let site = queue.site();
    let path = site.layout.cancel_mark(id);
    match site.client.delete(&path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(Error::zk("delete", path, e)),
    }
}

/// The deletes of the marks of the tasks of `leaving` that die cancelled and have one.
pub(super) async fn deletes(
    site: &crate::feature::Site<'_>,
    leaving: &[Leaving<'_>],
) -> Result<Vec<(usize, EndWrite)>> {
    let mut deletes = Vec::new();
    for (i, one) in leaving.iter().enumerate() {
        let (Some(CANCELLED), Some(envelope)) = (one.reason, one.envelope) else {
            continue;
        };
        let path = site.layout.cancel_mark(&envelope.id);
        let found =
            (site.client.check_stat(&path).await).map_err(|e| Error::zk("stat", &path, e))?;
        if found.is_some() {
            deletes.push((
                i,
                EndWrite::Delete {
                    path,
                    version: None,
                },
            ));
        }
    }
    Ok(deletes)
}

/// Removes marks whose task is no longer in `tasks/` under the name it was marked with
/// (completed or buried: a marked task cannot move away), at most `limit` per call. Returns
/// how many went.
pub async fn sweep(upkeep: &Upkeep, limit: usize) -> Result<usize> {
    let (client, layout) = (&upkeep.client, &upkeep.layout);
    let dir = layout.cancelled();
    let marks = upkeep.children(&dir).await?;
    let mut swept = 0;
    for mark in marks.into_iter().take(limit) {
        let path = format!("{dir}/{mark}");
        let (data, stat) = match client.get_data(&path).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(Error::zk("get", path, e)),
        };
        let Ok(Mark { task, .. }) = serde_json::from_slice(&data) else {
            continue;
        };
        let task_path = layout.task(&task);
        let present =
            (client.check_stat(&task_path).await).map_err(|e| Error::zk("stat", &task_path, e))?;
        if present.is_some() {
            continue;
        }
        match client.delete(&path, Some(stat.version)).await {
            Ok(()) => swept += 1,
            Err(zk::Error::NoNode | zk::Error::BadVersion) => {}
            Err(e) => return Err(Error::zk("delete", path, e)),
        }
    }
    Ok(swept)
}
