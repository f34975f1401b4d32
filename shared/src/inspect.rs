//! Looking into the queue for operators: pending tasks with their leases, one task's status,
//! counts by event type. These read every task they report on, so they are for the CLI, not
//! for every invocation ([`crate::stats`] is the cheap look).

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use serde_json::Value;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::layout::{self, oldest_first};
use crate::lease::LeaseData;
use crate::queue::Queue;
use crate::stats::{self, Stats};
use crate::task::{self, Body, Envelope};

/// A pending task as `list` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskInfo {
    pub name: String,
    /// The envelope's id (the task name for a plain body, absent for poison).
    pub id: Option<String>,
    pub event_type: Option<String>,
    pub attempts: u32,
    /// Time since the task was created, by ZooKeeper's clock.
    pub age_ms: i64,
    /// Time left of its retry backoff, if any.
    pub backoff_left_ms: Option<i64>,
    pub last_error: Option<String>,
    /// Who holds it, if anyone.
    pub lease: Option<LeaseInfo>,
    /// Why it will go to the dead letters when claimed, for a body that cannot run.
    pub poison: Option<String>,
    /// Set when our credentials may not read it (its creator shut others out).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
    /// The envelope (or plain body wrapped as one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
}

/// A lease as `list` and `status` show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeaseInfo {
    pub consumer_id: Option<String>,
    /// The claim's fencing token: the lease znode's `czxid`.
    pub fencing_token: i64,
    /// Time until the reaper may free it (negative: overdue), by ZooKeeper's clock.
    pub expires_in_ms: i64,
}

/// Where a task is in its life.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Status {
    Pending { task: Box<TaskInfo> },
    Leased { task: Box<TaskInfo> },
    Dead { name: String, record: Value },
    NotFound,
}

/// Pending tasks oldest first, at most `limit`, each with its lease.
pub async fn pending(queue: &Queue, now: &ZkTime, limit: Option<usize>) -> Result<Vec<TaskInfo>> {
    let (leases, tasks) = queue.list().await?;
    let leased: HashSet<String> = leases.into_iter().collect();
    let mut names = oldest_first(tasks);
    names.truncate(limit.unwrap_or(usize::MAX));
    let reads: Vec<_> = names
        .iter()
        .map(|n| read_task(queue, n, leased.contains(n), now))
        .collect();
    let mut infos = Vec::with_capacity(names.len());
    for read in futures::future::join_all(reads).await {
        infos.extend(read?);
    }
    Ok(infos)
}

/// One task's state, by task name or by envelope id.
pub async fn status(queue: &Queue, now: &ZkTime, key: &str) -> Result<Status> {
    if layout::sequence(key).is_some() {
        if let Some(info) = read_task(queue, key, true, now).await? {
            return Ok(classify(info));
        }
        return match crate::dead::show(queue, key).await? {
            Some(record) => Ok(Status::Dead {
                name: key.into(),
                record,
            }),
            None => Ok(Status::NotFound),
        };
    }
    if let Some(info) = pending(queue, now, None)
        .await?
        .into_iter()
        .find(|t| t.id.as_deref() == Some(key))
    {
        return Ok(classify(info));
    }
    let dead = crate::dead::list(queue).await?;
    Ok(
        match dead
            .into_iter()
            .find(|(_, r)| r.pointer("/body/id").and_then(Value::as_str) == Some(key))
        {
            Some((name, record)) => Status::Dead { name, record },
            None => Status::NotFound,
        },
    )
}

fn classify(info: TaskInfo) -> Status {
    if info.lease.is_some() {
        Status::Leased {
            task: Box::new(info),
        }
    } else {
        Status::Pending {
            task: Box::new(info),
        }
    }
}

/// Counts with the tasks in backoff and a count per event type.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DetailedStats {
    #[serde(flatten)]
    pub stats: Stats,
    pub in_backoff: usize,
    pub by_type: BTreeMap<String, usize>,
    /// Pending tasks we may not read (their ACL shuts us out).
    pub unreadable: usize,
}

/// Reads every pending task to count them by type and backoff.
pub async fn detailed_stats(queue: &Queue, now: &ZkTime) -> Result<DetailedStats> {
    let stats = stats::collect(queue, now).await?;
    let mut detailed = DetailedStats {
        stats,
        ..Default::default()
    };
    for task in pending(queue, now, None).await? {
        if task.unreadable {
            detailed.unreadable += 1;
            continue;
        }
        detailed.in_backoff += task.backoff_left_ms.is_some() as usize;
        let event_type = task.event_type.unwrap_or_else(|| "(poison)".into());
        *detailed.by_type.entry(event_type).or_default() += 1;
    }
    Ok(detailed)
}

/// Reads a task and, when `leased` may be true, its lease; `None` if the task is gone.
async fn read_task(
    queue: &Queue,
    name: &str,
    leased: bool,
    now: &ZkTime,
) -> Result<Option<TaskInfo>> {
    let task_path = queue.layout().task(name);
    let lease_path = queue.layout().lease(name);
    let task_read = queue.client().get_data(&task_path);
    let lease_read = leased.then(|| queue.client().get_data(&lease_path));
    let (body, stat) = match task_read.await {
        Ok(read) => read,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(zk::Error::NoAuth) => return unreadable(queue, name, now).await,
        Err(e) => return Err(Error::zk("get", task_path, e)),
    };
    let lease = match lease_read {
        None => None,
        Some(read) => match read.await {
            Ok((data, lease_stat)) => Some(lease_info(&data, &lease_stat, queue, now)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(Error::zk("get", lease_path, e)),
        },
    };
    let (envelope, poison) = match task::parse(&body) {
        Body::Envelope(e) => (Some(e), None),
        Body::Plain(v) => (Some(Envelope::from_plain(name, v, stat.ctime)), None),
        Body::Poison(reason) => (None, Some(reason)),
    };
    let now_ms = now.now_ms();
    Ok(Some(TaskInfo {
        name: name.to_string(),
        id: envelope.as_ref().map(|e| e.id.clone()),
        event_type: envelope.as_ref().map(|e| e.event_type.clone()),
        attempts: envelope.as_ref().map_or(0, |e| e.attempts),
        age_ms: now_ms - stat.ctime,
        backoff_left_ms: envelope
            .as_ref()
            .and_then(|e| e.retry_at)
            .map(|at| at - now_ms)
            .filter(|l| *l > 0),
        last_error: envelope.as_ref().and_then(|e| e.last_error.clone()),
        lease,
        poison,
        unreadable: false,
        envelope,
    }))
}

/// A task we may not read: only what its stat says (a stat needs no permission).
async fn unreadable(queue: &Queue, name: &str, now: &ZkTime) -> Result<Option<TaskInfo>> {
    let path = queue.layout().task(name);
    let stat = match queue.client().check_stat(&path).await {
        Ok(Some(stat)) => stat,
        Ok(None) => return Ok(None),
        Err(e) => return Err(Error::zk("stat", path, e)),
    };
    Ok(Some(TaskInfo {
        name: name.to_string(),
        id: None,
        event_type: None,
        attempts: 0,
        age_ms: now.now_ms() - stat.ctime,
        backoff_left_ms: None,
        last_error: None,
        lease: None,
        poison: None,
        unreadable: true,
        envelope: None,
    }))
}

fn lease_info(data: &[u8], stat: &zk::Stat, queue: &Queue, now: &ZkTime) -> LeaseInfo {
    let parsed: Option<LeaseData> = serde_json::from_slice(data).ok();
    LeaseInfo {
        consumer_id: parsed.map(|l| l.consumer_id),
        fencing_token: stat.czxid,
        expires_in_ms: stat
            .mtime
            .saturating_add(crate::lease::millis(queue.lease_timeout()))
            - now.now_ms(),
    }
}
