//! A look at the queue's state, cheap enough for every invocation and flat whatever the
//! backlog: the counts come from the stats of `tasks/`, `leases/` and `dead/` (one multi-read),
//! the waiting tasks from one stat per bucket of `delayed/`, the oldest task's age from one
//! probe at the head, what is paused from `ROOT/paused`, and the concurrency keys in flight from
//! their gates (a listing of `concurrency/`, none without `per_key` routes).

use serde::Serialize;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::queue::{KeyInFlight, Paused, Queue, TaskRead, Walk};

/// Counts and the age of the oldest task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks pending in `tasks/`, leased ones included.
    pub depth: usize,
    /// Leases held.
    pub leased: usize,
    /// Tasks waiting out a backoff or a delay under `delayed/`.
    pub delayed: usize,
    /// Dead letters.
    pub dead: usize,
    /// How long the oldest pending task has waited, by ZooKeeper's clock.
    pub oldest_task_age_ms: Option<i64>,
    /// What is paused (absent when nothing is).
    #[serde(skip_serializing_if = "Paused::is_empty")]
    pub paused: Paused,
    /// Groups paused after one of their tasks went to the dead letters, and why (the first
    /// 100; absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paused_groups: Vec<(String, String)>,
    /// Concurrency keys with tasks in flight (from the first 1 000 keys' gates; absent when
    /// none), each with its cap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys_in_flight: Vec<KeyInFlight>,
    /// How many of them are at their cap.
    #[serde(skip_serializing_if = "is_zero")]
    pub keys_at_limit: usize,
    /// The counts as read, with the creates and removals under `tasks/` (not printed).
    #[serde(skip)]
    pub counters: Counters,
}

/// Paused groups a look at the queue lists, at most.
const PAUSED_GROUPS: usize = 100;

/// Keys' gates a look at the queue reads, at most.
const KEY_GATES: usize = 1_000;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Reads the counts: one multi-read of three stats, a stat per waiting bucket, one probe.
pub async fn collect(queue: &Queue, now: &ZkTime) -> Result<Stats> {
    let counters = counters(queue).await?;
    let keys_in_flight = queue.keys_in_flight(KEY_GATES).await?;
    Ok(Stats {
        keys_at_limit: keys_in_flight.iter().filter(|k| k.at_limit()).count(),
        keys_in_flight,
        depth: counters.depth,
        leased: counters.leased,
        delayed: queue.count_delayed().await?,
        dead: counters.dead,
        oldest_task_age_ms: oldest_age(queue, now, counters.depth).await?,
        paused: queue.paused().await?,
        paused_groups: queue.paused_groups(PAUSED_GROUPS).await?,
        counters,
    })
}

/// The children of `tasks/`, `leases/` and `dead/` at one moment, and how many tasks were
/// ever created under `tasks/` and removed from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    pub depth: usize,
    pub leased: usize,
    pub dead: usize,
    /// Tasks created under `tasks/` since it was made: published, redriven, back from a wait.
    pub tasks_created: u64,
    /// Tasks removed from `tasks/`: completed, dead-lettered, cancelled, or set to wait.
    pub tasks_removed: u64,
}

/// One multi-read of three stats. `cversion` counts the creates and deletes of a node's
/// children and `numChildren` creates less deletes, so the two totals follow from them.
pub async fn counters(queue: &Queue) -> Result<Counters> {
    let layout = queue.layout();
    let paths = [layout.tasks(), layout.leases(), layout.dead()];
    let mut reader = queue.client().new_multi_reader();
    for path in &paths {
        reader
            .add_get_data(path)
            .map_err(|e| Error::zk("stat", path, e))?;
    }
    let results = reader
        .commit()
        .await
        .map_err(|e| Error::zk("stat", layout.root(), e))?;
    let mut stats = [None; 3];
    for ((slot, result), path) in stats.iter_mut().zip(results).zip(&paths) {
        *slot = match result {
            zk::MultiReadResult::Data { stat, .. } => Some(stat),
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            } => None,
            zk::MultiReadResult::Error { err } => return Err(Error::zk("stat", path, err)),
            other => {
                let msg = format!("multi-read returned {other:?}");
                return Err(Error::zk("stat", path, zk::Error::UnexpectedError(msg)));
            }
        };
    }
    let children = |stat: &Option<zk::Stat>| stat.map_or(0, |s| s.num_children.max(0) as usize);
    let (changes, depth) = stats[0].map_or((0, 0), |s| {
        (i64::from(s.cversion), i64::from(s.num_children))
    });
    Ok(Counters {
        depth: children(&stats[0]),
        leased: children(&stats[1]),
        dead: children(&stats[2]),
        tasks_created: ((changes + depth) / 2).max(0) as u64,
        tasks_removed: ((changes - depth) / 2).max(0) as u64,
    })
}

/// The age of the first task at the head; a probe (or, past a gap, a few) from the head.
async fn oldest_age(queue: &Queue, now: &ZkTime, depth: usize) -> Result<Option<i64>> {
    if depth == 0 {
        return Ok(None);
    }
    let mut walk = Walk::new();
    let Some(window) = walk.next_window(queue).await? else {
        return Ok(None);
    };
    let Some(first) = window.first() else {
        return Ok(None);
    };
    let created = match &first.read {
        TaskRead::Found { stat, .. } => Some(stat.ctime),
        _ => {
            let path = queue.layout().task(&first.name);
            let stat = queue.client().check_stat(&path).await;
            stat.map_err(|e| Error::zk("stat", &path, e))?
                .map(|s| s.ctime)
        }
    };
    Ok(created.map(|ctime| now.now_ms() - ctime))
}
