//! `reap_leases`' work: free leases whose holder is gone, so their tasks run again.
//!
//! A lease has expired when ZooKeeper's time is past its `mtime` plus the lease timeout; an
//! extension rewrites the lease and so moves its `mtime`. The reaper reads each lease together
//! with its task (one multi-read: a consistent pair), and deletes an expired lease only at the
//! versions it read, the task's included: an extension that lands first wins, and a new claim
//! of the task (whose fresh lease may have the same version as the expired one) makes the
//! task's version move on, so a stale read frees nothing. A lease whose task is gone (a
//! consumer died between two separate deletes, as 000-design consumers do them) is an orphan
//! and is deleted too. A task we may not read (its ACL shuts us out) is left to a reaper that
//! may.
//!
//! The claim already counted the attempt, so a task whose consumer keeps dying reaches
//! `MAX_ATTEMPTS` and goes to the dead letters on its next claim.

use serde::Serialize;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::feature::Upkeep;
use crate::inspect::{Audit, audit, keep_audit};
use crate::lease;
use crate::queue::{Multi, Op, Part, Queue};
use crate::stats::{self, Stats};
use crate::task::{self, Body};

/// Leases read in one request (each with its task).
const READ_BATCH: usize = 16;

/// Due tasks a reaper run moves back from `delayed/` to the queue, at most.
const PROMOTE_PER_RUN: usize = 1_000;

/// What a reaper run did and saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReapReport {
    /// Expired leases deleted.
    pub reaped: u32,
    /// Leases of vanished tasks deleted.
    pub orphans_removed: u32,
    /// Expired leases left alone because their holder extended or settled them meanwhile, or
    /// the task was claimed again.
    pub raced: u32,
    /// Leases whose task we may not read: left to a reaper with the right credentials.
    pub unreadable: u32,
    /// Tasks whose backoff or delay ended, moved back to the queue.
    pub promoted: u32,
    /// What each registered feature's sweep tidied, by the feature's name (see
    /// `feature::Feature::sweep`): `concurrency_keys`, idle gates of concurrency keys deleted;
    /// `dependencies`, children of settled parents seen to; `signals`, tasks woken by signals
    /// left undelivered; and each other feature's own.
    pub swept: std::collections::BTreeMap<String, u32>,
    /// What the audit that nothing is stuck found in its sample (see `inspect::audit`). Named
    /// `audited` in JSON: the queue's counts beside it carry the kept record as `audit`.
    #[serde(rename = "audited")]
    pub audit: Audit,
    /// The queue's counts after the sweep.
    #[serde(flatten)]
    pub stats: Stats,
    /// How long the sweep took, by the reaper's clock.
    pub duration_ms: u64,
}

/// What the reaper read of one lease and its task, at one moment.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub(crate) enum LeaseRead {
    /// The lease has expired: the versions it and its task had, and the task's body.
    Expired(ExpiredLease),
    /// The lease's task is gone.
    Orphan {
        /// The task's name.
        name: String,
        /// The lease's version when read.
        lease_version: i32,
    },
    /// The lease's task exists but we may not read it.
    Unreadable {
        /// The task's name.
        name: String,
    },
    /// Alive, or gone since it was listed.
    Live,
}

/// An expired lease as the reaper read it.
#[derive(Clone, Debug)]
pub struct ExpiredLease {
    /// The task's name (the lease's too).
    pub name: String,
    /// The lease's version when read: freeing it checks it.
    pub lease_version: i32,
    /// The task's version when read: freeing it checks it.
    pub task_version: i32,
    /// The task's body, as read.
    pub body: Vec<u8>,
    /// Time since the lease was last written, by ZooKeeper's clock.
    pub age_ms: i64,
}

/// Frees expired and orphaned leases, then reports the queue's state.
pub async fn reap(queue: &Queue) -> Result<ReapReport> {
    reap_at(queue, &queue.server_time().await?).await
}

/// As [`reap`], judging expiry, due times and windows at ZooKeeper's time `now` (read by the
/// caller, and carried forward: the worker reads the clock once for several looks).
pub async fn reap_at(queue: &Queue, now: &ZkTime) -> Result<ReapReport> {
    let started = std::time::Instant::now();
    let now = *now;
    let mut report = ReapReport::default();
    for read in read_leases(queue, &now).await? {
        match read {
            LeaseRead::Expired(expired) => {
                if free(queue, &expired).await? {
                    report.reaped += 1;
                    tracing::warn!(task = %expired.name, lease_age_ms = expired.age_ms, "expired lease reaped");
                } else {
                    report.raced += 1;
                }
            }
            LeaseRead::Orphan {
                name,
                lease_version,
            } => {
                if delete_orphan(queue, &name, lease_version).await? {
                    report.orphans_removed += 1;
                    tracing::info!(task = %name, "orphan lease removed");
                }
            }
            LeaseRead::Unreadable { name } => {
                report.unreadable += 1;
                tracing::warn!(task = %name, "lease of a task we may not read: left alone");
            }
            LeaseRead::Live => {}
        }
    }
    report.promoted = queue.delays().promote_due(&now, PROMOTE_PER_RUN).await? as u32;
    let upkeep = upkeep_of(queue, now);
    for (feature, swept) in queue.features().sweep(&upkeep).await? {
        report.swept.insert(feature.to_string(), swept);
    }
    // An audit that could not read what it looks at fails no other work of the run, and
    // leaves the last record as it was.
    match audit(queue, &now, true).await {
        Ok(found) => {
            keep_audit(queue, &now, &found).await?;
            report.audit = found;
        }
        Err(e) => tracing::warn!(error = %e, "audit failed; again next run"),
    }
    crate::run_metrics::audited(report.audit.stuck.len(), report.audit.repaired());
    report.stats = stats::collect(queue, &now).await?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.log();
    Ok(report)
}

/// What the features' sweeps of `queue` work with, at ZooKeeper's time `now`.
pub(crate) fn upkeep_of(queue: &Queue, now: ZkTime) -> Upkeep {
    Upkeep {
        client: queue.client().clone(),
        layout: queue.layout().clone(),
        now,
        queue: std::sync::Arc::new(queue.clone()),
    }
}

/// [`upkeep_of`], for tests that run one feature's sweep (feature `testing`).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub fn upkeep(queue: &Queue, now: ZkTime) -> Upkeep {
    upkeep_of(queue, now)
}

impl ReapReport {
    /// The run's one summary event.
    fn log(&self) {
        tracing::info!(
            reaped = self.reaped,
            orphans_removed = self.orphans_removed,
            raced = self.raced,
            unreadable = self.unreadable,
            promoted = self.promoted,
            keys_at_limit = self.stats.keys_at_limit,
            swept = ?self.swept,
            stuck_tasks = self.audit.stuck.len(),
            stuck_repaired = self.audit.repaired(),
            depth = self.stats.depth,
            delayed = self.stats.delayed,
            leased = self.stats.leased,
            dead = self.stats.dead,
            oldest_task_age_ms = self.stats.oldest_task_age_ms,
            duration_ms = self.duration_ms,
            "reap_leases finished"
        );
    }
}

/// The expired leases, as `read_leases` reads them.
pub async fn expired_leases(queue: &Queue, now: &ZkTime) -> Result<Vec<ExpiredLease>> {
    let reads = read_leases(queue, now).await?;
    Ok(reads
        .into_iter()
        .filter_map(|read| match read {
            LeaseRead::Expired(expired) => Some(expired),
            _ => None,
        })
        .collect())
}

/// Lists `leases/` (as many as tasks in flight, not as many as queued) and reads each lease
/// with its task, [`READ_BATCH`] pairs to a request.
pub(crate) async fn read_leases(queue: &Queue, now: &ZkTime) -> Result<Vec<LeaseRead>> {
    let path = queue.layout().leases();
    let names = queue
        .client()
        .list_children(&path)
        .await
        .map_err(|e| Error::zk("list", &path, e))?;
    let mut reads = Vec::with_capacity(names.len());
    for batch in names.chunks(READ_BATCH) {
        reads.extend(read_batch(queue, batch, now).await?);
    }
    Ok(reads)
}

/// Reads each lease of `names` with its task in one multi-read: the task first, so that both
/// are seen at one moment.
async fn read_batch(queue: &Queue, names: &[String], now: &ZkTime) -> Result<Vec<LeaseRead>> {
    let mut reader = queue.client().new_multi_reader();
    for name in names {
        for path in [queue.layout().task(name), queue.layout().lease(name)] {
            reader
                .add_get_data(&path)
                .map_err(|e| Error::zk("get", path, e))?;
        }
    }
    let results = reader
        .commit()
        .await
        .map_err(|e| Error::zk("get", queue.layout().leases(), e))?;
    let mut results = results.into_iter();
    let mut reads = Vec::with_capacity(names.len());
    for name in names {
        let (task, lease) = (results.next(), results.next());
        reads.push(classify(queue, name, task, lease, now)?);
    }
    Ok(reads)
}

/// What one pair of reads says about a lease.
fn classify(
    queue: &Queue,
    name: &str,
    task: Option<zk::MultiReadResult>,
    lease: Option<zk::MultiReadResult>,
    now: &ZkTime,
) -> Result<LeaseRead> {
    use zk::MultiReadResult::{Data, Error as Failed};
    let lease_stat = match lease {
        Some(Data { stat, .. }) => stat,
        Some(Failed {
            err: zk::Error::NoNode,
        }) => return Ok(LeaseRead::Live),
        other => return Err(unexpected(queue.layout().lease(name), other)),
    };
    let name = name.to_string();
    let (body, task_stat) = match task {
        Some(Data { data, stat }) => (data, stat),
        Some(Failed {
            err: zk::Error::NoNode,
        }) => {
            let lease_version = lease_stat.version;
            return Ok(LeaseRead::Orphan {
                name,
                lease_version,
            });
        }
        Some(Failed {
            err: zk::Error::NoAuth,
        }) => return Ok(LeaseRead::Unreadable { name }),
        other => return Err(unexpected(queue.layout().task(&name), other)),
    };
    if !lease::expired(
        lease_stat.mtime,
        now.now_ms(),
        queue.settings().lease_timeout,
    ) {
        return Ok(LeaseRead::Live);
    }
    Ok(LeaseRead::Expired(ExpiredLease {
        name,
        lease_version: lease_stat.version,
        task_version: task_stat.version,
        body,
        age_ms: now.now_ms() - lease_stat.mtime,
    }))
}

fn unexpected(path: String, result: Option<zk::MultiReadResult>) -> Error {
    match result {
        Some(zk::MultiReadResult::Error { err }) => Error::zk("get", path, err),
        other => {
            let msg = format!("multi-read returned {other:?}");
            Error::zk("get", path, zk::Error::UnexpectedError(msg))
        }
    }
}

/// Deletes an orphan lease at the version read (its task is gone: nobody can claim it again).
async fn delete_orphan(queue: &Queue, name: &str, version: i32) -> Result<bool> {
    let path = queue.layout().lease(name);
    match queue.client().delete(&path, Some(version)).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
        Err(e) => Err(Error::zk("delete", path, e)),
    }
}

/// Frees an expired lease, if lease and task are still at the versions read; an envelope task
/// also gets a last error saying what happened, in the same multi-op. `false` when something
/// moved on meanwhile (an extension, a settle, another reaper, a new claim).
pub async fn free(queue: &Queue, expired: &ExpiredLease) -> Result<bool> {
    let name = &expired.name;
    let (lease_path, task_path) = (queue.layout().lease(name), queue.layout().task(name));
    let note = annotated(&expired.body, expired.age_ms);
    let mut multi = Multi::new();
    multi.push(Part::Lease, Op::Delete(&lease_path, expired.lease_version));
    match &note {
        Some(body) => multi.push(Part::Task, Op::Set(&task_path, body, expired.task_version)),
        // A plain or oversize body is not rewritten, but its version is still checked: a new
        // claim's lease may have the version of the expired one; the task's has moved on.
        None => multi.push(Part::Task, Op::Check(&task_path, expired.task_version)),
    };
    match queue.commit("reap", &multi).await? {
        Ok(_) => Ok(true),
        Err(failed) if matches!(failed.error, zk::Error::BadVersion | zk::Error::NoNode) => {
            Ok(false)
        }
        Err(failed) => Err(failed.unexpected("reap")),
    }
}

/// An envelope's body with a last error saying the lease expired; `None` for a plain body, or
/// one too large to annotate.
fn annotated(body: &[u8], age_ms: i64) -> Option<Vec<u8>> {
    let Body::Envelope(mut envelope) = task::parse(body) else {
        return None;
    };
    envelope.last_error = Some(format!(
        "lease expired after {age_ms} ms without an extension"
    ));
    envelope.to_bytes().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::AuditRecord;
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    /// The keys of a JSON object's text at its top level, in order: a duplicate shows twice
    /// (a `serde_json::Value` would keep only the last).
    fn top_level_keys(text: &str) -> Vec<String> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                    keys.push(key);
                }
                Ok(keys)
            }
        }
        let mut json = serde_json::Deserializer::from_str(text);
        json.deserialize_map(Keys).expect("a JSON object")
    }

    #[test]
    fn a_run_report_names_each_field_once_when_the_queue_keeps_an_audit_record() {
        let mut report = ReapReport::default();
        report.stats.audit = Some(AuditRecord {
            stuck_tasks: 1,
            ..AuditRecord::default()
        });
        let text = serde_json::to_string(&report).unwrap();
        let keys = top_level_keys(&text);
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(keys.len(), unique.len(), "a key twice in {text}");
    }
}
