//! `reap_leases`' work: free leases whose holder is gone, so their tasks run again.
//!
//! A lease has expired when ZooKeeper's time is past its `mtime` plus the lease timeout; an
//! extension rewrites the lease and so moves its `mtime`. The reaper deletes an expired lease
//! only at the version it read, so an extension that lands first wins. A lease whose task is
//! gone (a consumer died between two separate deletes, as 000-design consumers do them) is an
//! orphan and is deleted too.
//!
//! The claim already counted the attempt, so a task whose consumer keeps dying reaches
//! `MAX_ATTEMPTS` and goes to the dead letters on its next claim.

use std::collections::HashSet;

use serde::Serialize;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::lease;
use crate::queue::{Op, Queue};
use crate::stats::{self, Stats};
use crate::task::{self, Body};

/// What a reaper run did and saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReapReport {
    /// Expired leases deleted.
    pub reaped: u32,
    /// Leases of vanished tasks deleted.
    pub orphans_removed: u32,
    /// Expired leases left alone because their holder extended or settled them meanwhile.
    pub raced: u32,
    #[serde(flatten)]
    pub stats: Stats,
    pub duration_ms: u64,
}

/// Frees expired and orphaned leases, then reports the queue's state.
pub async fn reap(queue: &Queue) -> Result<ReapReport> {
    let started = std::time::Instant::now();
    let now = queue.server_time().await?;
    let (leases, tasks) = queue.list().await?;
    let tasks: HashSet<String> = tasks.into_iter().collect();
    let mut report = ReapReport::default();
    let reads: Vec<_> = leases
        .iter()
        .map(|name| read_pair(queue, name, tasks.contains(name)))
        .collect();
    for (name, read) in leases.iter().zip(futures::future::join_all(reads).await) {
        let Some((lease_stat, task)) = read? else {
            continue;
        };
        let lease_path = queue.layout().lease(name);
        match task {
            None => {
                if delete_lease(queue, &lease_path, lease_stat.version).await? {
                    report.orphans_removed += 1;
                    tracing::info!(task = %name, "orphan lease removed");
                }
            }
            Some(_) if !lease::expired(lease_stat.mtime, now.now_ms(), queue.lease_timeout()) => {}
            Some((body, task_stat)) => {
                let age_ms = now.now_ms() - lease_stat.mtime;
                if free(
                    queue,
                    name,
                    lease_stat.version,
                    &body,
                    task_stat.version,
                    age_ms,
                )
                .await?
                {
                    report.reaped += 1;
                    tracing::warn!(task = %name, lease_age_ms = age_ms, "expired lease reaped");
                } else {
                    report.raced += 1;
                }
            }
        }
    }
    report.stats = stats::collect(queue, &now).await?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(
        reaped = report.reaped,
        orphans_removed = report.orphans_removed,
        raced = report.raced,
        depth = report.stats.depth,
        leased = report.stats.leased,
        dead = report.stats.dead,
        oldest_task_age_ms = report.stats.oldest_task_age_ms,
        duration_ms = report.duration_ms,
        "reap_leases finished"
    );
    Ok(report)
}

type Read = Option<(zk::Stat, Option<(Vec<u8>, zk::Stat)>)>;

/// The lease's stat, and the task's body and stat when the task was listed. The task is read
/// first: a lease re-created after that read (a new claim) then shows a fresh `mtime` and is
/// not taken for the expired one, even at the same version.
async fn read_pair(queue: &Queue, name: &str, task_listed: bool) -> Result<Read> {
    let lease_path = queue.layout().lease(name);
    let task = task_listed.then(|| queue.client().get_data(&queue.layout().task(name)));
    let lease = queue.client().check_stat(&lease_path);
    let Some(lease_stat) = lease.await.map_err(|e| Error::zk("stat", &lease_path, e))? else {
        return Ok(None);
    };
    let task = match task {
        None => None,
        Some(read) => match read.await {
            Ok(read) => Some(read),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(Error::zk("get", queue.layout().task(name), e)),
        },
    };
    Ok(Some((lease_stat, task)))
}

async fn delete_lease(queue: &Queue, path: &str, version: i32) -> Result<bool> {
    match queue.client().delete(path, Some(version)).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
        Err(e) => Err(Error::zk("delete", path, e)),
    }
}

/// Deletes an expired lease at the version read; an envelope task also gets a last error
/// saying what happened, in the same multi-op.
async fn free(
    queue: &Queue,
    name: &str,
    lease_version: i32,
    body: &[u8],
    task_version: i32,
    age_ms: i64,
) -> Result<bool> {
    let lease_path = queue.layout().lease(name);
    let Body::Envelope(mut envelope) = task::parse(body) else {
        return delete_lease(queue, &lease_path, lease_version).await;
    };
    envelope.last_error = Some(format!(
        "lease expired after {age_ms} ms without an extension"
    ));
    let Ok(body) = envelope.to_bytes() else {
        // Too large to annotate: free it without the note.
        return delete_lease(queue, &lease_path, lease_version).await;
    };
    let ops = [
        Op::Delete(&lease_path, lease_version),
        Op::Set(&queue.layout().task(name), &body, task_version),
    ];
    match queue.commit("reap", &ops).await? {
        Ok(_) => Ok(true),
        Err((_, zk::Error::BadVersion | zk::Error::NoNode)) => Ok(false),
        Err((i, e)) => Err(Error::zk("reap", ops[i].path(), e)),
    }
}
