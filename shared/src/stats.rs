//! A look at the queue's state, cheap enough for every invocation and flat whatever the
//! backlog: one multi-read of the stats of the lanes, `leases/`, `dead/` and the parents of
//! what waits or is held aside gives the counts and whether there is more to read, and the
//! features' start read beside it what they show (what is paused); then, only where there is
//! something: one stat per bucket of `delayed/`, the gates of the concurrency keys in flight
//! (`concurrency/`), the locks of paused groups, and the oldest task's age from one probe at
//! the head of each lane that has tasks.

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::lane::Priority;
use std::future::Future;

use crate::queue::{KeyInFlight, LaneStart, LaneWalk, Queue, TaskRead};

/// Counts and the age of the oldest task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks pending in every lane, leased ones included.
    pub depth: usize,
    /// Of them, by lane.
    pub lanes: LaneDepths,
    /// Leases held.
    pub leased: usize,
    /// Tasks waiting out a backoff or a delay under `delayed/`.
    pub delayed: usize,
    /// Dead letters.
    pub dead: usize,
    /// Debounced publishes waiting for their period to end (each becomes one task).
    pub debounced: usize,
    /// Children waiting under `after/` for their parents to settle.
    pub blocked: usize,
    /// How long the oldest pending task has waited, by ZooKeeper's clock.
    pub oldest_task_age_ms: Option<i64>,
    /// Stuck states the latest audit found (see `inspect::audit`; 0 when it found none).
    pub stuck_tasks: usize,
    /// What it found, when it found something: when, and the first findings' lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditRecord>,
    /// The fields the registered features add, by name, when they have something to show
    /// (`paused`: what is paused, see [`crate::feature::Feature::in_stats`]).
    #[serde(flatten)]
    pub features: std::collections::BTreeMap<String, serde_json::Value>,
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

/// What the last audit found, as `ROOT/audit` keeps it (see `inspect::audit`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When it ran, by ZooKeeper's clock (ms since the epoch).
    pub at_ms: i64,
    /// Stuck states found (repaired or not).
    pub stuck_tasks: usize,
    /// Of those, how many it repaired.
    pub repaired: usize,
    /// The first 10 (`inspect::audit`'s) findings' lines.
    pub lines: Vec<String>,
    /// Slots no lease holds (see `inspect::audit`), with when each was first seen so: stuck
    /// once that is a minute ago, and kept so while they stand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<Suspect>,
}

/// A slot the audit saw no lease hold, since `since_ms` (ZooKeeper's clock).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspect {
    /// The slot znode's path.
    pub path: String,
    /// The slot's `czxid`: a slot made again under the same name is another slot.
    pub czxid: i64,
    /// When the audit first saw it unheld (ZooKeeper ms).
    pub since_ms: i64,
}

impl AuditRecord {
    /// The record `data` holds; unreadable data reads as an error naming `path`.
    pub fn parse(path: &str, data: &[u8]) -> Result<Self> {
        serde_json::from_slice(data).map_err(|e| Error::Unreadable {
            path: path.to_string(),
            problem: e.to_string(),
        })
    }
}

/// Keys' gates a look at the queue reads, at most.
const KEY_GATES: usize = 1_000;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Reads the counts, `now` being ZooKeeper's time (for the oldest task's age).
pub async fn collect(queue: &Queue, now: &ZkTime) -> Result<Stats> {
    collect_with(queue, Some(*now)).await
}

/// As [`collect`]; without `now`, ZooKeeper's clock is read only when there is a task to age
/// (a look at an empty queue writes nothing). One multi-read of twelve znodes (the lanes,
/// `leases/`, `dead/`, `delayed/`, `debounce/`, `concurrency/`, `groups/`, `after/` and the
/// last audit's record), with the features' start read beside it (what is paused), answers
/// an idle queue; the delay buckets, the key gates and the group locks are read only when
/// their parent has children, and the oldest task's age only when there is one.
pub async fn collect_with(queue: &Queue, now: Option<ZkTime>) -> Result<Stats> {
    let (glance, seen) = tokio::try_join!(glance(queue), queue.read_features())?;
    let features = (queue.features().in_stats(&seen).into_iter())
        .map(|(field, value)| (field.to_string(), value))
        .collect();
    let (keys_in_flight, delayed, paused_groups) = tokio::try_join!(
        when(glance.gates, queue.gates().keys_in_flight(KEY_GATES)),
        when(glance.buckets, queue.delays().count_delayed()),
        when(glance.groups, queue.groups().paused_groups(PAUSED_GROUPS))
    )?;
    let counters = glance.counters;
    let oldest_task_age_ms = match (counters.depth, now) {
        (0, _) => None,
        (_, Some(now)) => oldest_age(queue, &now, &counters.lanes, glance.key_lanes).await?,
        (_, None) => {
            let now = queue.server_time().await?;
            oldest_age(queue, &now, &counters.lanes, glance.key_lanes).await?
        }
    };
    Ok(Stats {
        keys_at_limit: keys_in_flight.iter().filter(|k| k.at_limit()).count(),
        keys_in_flight,
        depth: counters.depth,
        lanes: counters.lanes,
        leased: counters.leased,
        delayed,
        dead: counters.dead,
        debounced: glance.debounced,
        blocked: glance.blocked,
        stuck_tasks: glance.audit.as_ref().map_or(0, |a| a.stuck_tasks),
        audit: glance.audit,
        oldest_task_age_ms,
        features,
        paused_groups,
        counters,
    })
}

/// `read`'s answer when `has` (the parent it reads under has children), else nothing.
async fn when<T: Default>(has: bool, read: impl Future<Output = Result<T>>) -> Result<T> {
    match has {
        true => read.await,
        false => Ok(T::default()),
    }
}

/// What one multi-read of the queue's parents says.
struct Glance {
    counters: Counters,
    /// The key lanes that have tasks, as the counters read them.
    key_lanes: Vec<LaneStart>,
    /// Whether `delayed/`, `concurrency/` and `groups/` have children.
    buckets: bool,
    gates: bool,
    groups: bool,
    debounced: usize,
    blocked: usize,
    audit: Option<AuditRecord>,
}

async fn glance(queue: &Queue) -> Result<Glance> {
    let layout = queue.layout();
    let mut paths = counter_paths(queue).to_vec();
    paths.extend([
        layout.delayed(),
        layout.concurrency(),
        layout.groups(),
        layout.debounce(),
        layout.after(),
        layout.audit(),
    ]);
    let reads = queue.read_paths(&paths).await?;
    let stats: Vec<Option<zk::Stat>> = reads.iter().map(|r| r.as_ref().map(|r| r.1)).collect();
    let has = |i: usize| children(&stats[i]) > 0;
    let audit = match &reads[11] {
        Some((data, _)) => Some(AuditRecord::parse(&paths[11], data)?),
        None => None,
    };
    let (counters, key_lanes) = with_key_lanes(queue, &stats[..6]).await?;
    Ok(Glance {
        counters,
        key_lanes,
        buckets: has(6),
        gates: has(7),
        groups: has(8),
        debounced: children(&stats[9]),
        blocked: children(&stats[10]),
        audit,
    })
}

fn children(stat: &Option<zk::Stat>) -> usize {
    stat.map_or(0, |s| s.num_children.max(0) as usize)
}

/// Tasks pending in each lane.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LaneDepths {
    /// Tasks in the high lane.
    pub high: usize,
    /// `tasks/` and the key lanes.
    pub normal: usize,
    /// Tasks in the low lane.
    pub low: usize,
    /// Of normal's, those in key lanes.
    pub keyed: usize,
    /// Key lanes that have tasks.
    pub keys: usize,
}

impl LaneDepths {
    /// The depth of `lane`.
    pub fn of(&self, lane: Priority) -> usize {
        match lane {
            Priority::High => self.high,
            Priority::Normal => self.normal,
            Priority::Low => self.low,
        }
    }
}

/// The children of the lanes, `leases/` and `dead/` at one moment, and how many tasks were
/// ever created in the lanes and removed from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Tasks in the lanes, held ones included.
    pub depth: usize,
    /// The same, lane by lane.
    pub lanes: LaneDepths,
    /// Leases held.
    pub leased: usize,
    /// Dead letters.
    pub dead: usize,
    /// Tasks created in the lanes since they were made: published, redriven, back from a wait.
    pub tasks_created: u64,
    /// Tasks removed from the lanes: completed, dead-lettered, cancelled, or set to wait.
    pub tasks_removed: u64,
}

/// One multi-read of five stats (the three lanes, `leases/`, `dead/`). `cversion` counts the creates and deletes of a node's
/// children and `numChildren` creates less deletes, so the two totals follow from them.
pub async fn counters(queue: &Queue) -> Result<Counters> {
    let reads = queue.read_paths(&counter_paths(queue)).await?;
    let stats: Vec<Option<zk::Stat>> = reads.iter().map(|r| r.as_ref().map(|r| r.1)).collect();
    Ok(with_key_lanes(queue, &stats).await?.0)
}

/// `leases/`, `dead/`, the three lanes and `lanes/keys`, in the order [`counters_from`] takes
/// their stats.
fn counter_paths(queue: &Queue) -> [String; 6] {
    let layout = queue.layout();
    [
        layout.leases(),
        layout.dead(),
        layout.lane_tasks(&Priority::High.into()),
        layout.tasks(),
        layout.lane_tasks(&Priority::Low.into()),
        layout.key_lanes(),
    ]
}

/// The counters of `stats`, with the key lanes' when `lanes/keys` has any (a listing and a
/// multi-read more: see `queue::key_lanes`), and the key lanes that have tasks.
async fn with_key_lanes(
    queue: &Queue,
    stats: &[Option<zk::Stat>],
) -> Result<(Counters, Vec<LaneStart>)> {
    let mut counters = counters_from(stats);
    if children(&stats[5]) == 0 {
        return Ok((counters, Vec::new()));
    }
    let mut busy = Vec::new();
    for lane in queue.key_lanes().read_key_lanes().await?.starts {
        let tail = lane.tail.max(0) as u64;
        counters.tasks_created += tail;
        counters.tasks_removed += tail.saturating_sub(lane.children as u64);
        counters.lanes.keyed += lane.children;
        if lane.children > 0 {
            counters.lanes.keys += 1;
            busy.push(lane);
        }
    }
    counters.lanes.normal += counters.lanes.keyed;
    counters.depth += counters.lanes.keyed;
    Ok((counters, busy))
}

fn counters_from(stats: &[Option<zk::Stat>]) -> Counters {
    let lanes = &stats[2..5];
    let (changes, depth) = lanes.iter().flatten().fold((0, 0), |(c, d), s| {
        (c + i64::from(s.cversion), d + i64::from(s.num_children))
    });
    let lanes = LaneDepths {
        high: children(&lanes[0]),
        normal: children(&lanes[1]),
        low: children(&lanes[2]),
        ..LaneDepths::default()
    };
    Counters {
        depth: lanes.high + lanes.normal + lanes.low,
        lanes,
        leased: children(&stats[0]),
        dead: children(&stats[1]),
        tasks_created: ((changes + depth) / 2).max(0) as u64,
        tasks_removed: ((changes - depth) / 2).max(0) as u64,
    }
}

/// Key lanes whose oldest task a look at the queue probes, at most.
const KEY_LANES_AGED: usize = 100;

/// The age of the oldest task: of the first task at each lane's head that has any, the
/// oldest (a probe, or past a gap a few, from each head, the lanes' probes pipelined; of the
/// key lanes that have tasks, `key_lanes`, the first [`KEY_LANES_AGED`]).
async fn oldest_age(
    queue: &Queue,
    now: &ZkTime,
    depths: &LaneDepths,
    key_lanes: Vec<LaneStart>,
) -> Result<Option<i64>> {
    let mut walks: Vec<LaneWalk> = (Priority::ALL.into_iter())
        .filter(|l| depths.of(*l) > depths.keyed * usize::from(*l == Priority::Normal))
        .map(|l| LaneWalk::new(l.into()))
        .collect();
    let keys = key_lanes.into_iter().take(KEY_LANES_AGED);
    walks.extend(keys.map(LaneWalk::from_start));
    let firsts = walks.into_iter().map(|walk| first_created(queue, walk));
    let created = futures::future::try_join_all(firsts).await?;
    let oldest = created.into_iter().flatten().min();
    Ok(oldest.map(|ctime| now.now_ms() - ctime))
}

/// When the first task `walk` finds was created (`None`: the lane has none).
async fn first_created(queue: &Queue, mut walk: LaneWalk) -> Result<Option<i64>> {
    let Some(window) = walk.next_window(queue, &[], &[]).await? else {
        return Ok(None);
    };
    let Some(first) = window.first() else {
        return Ok(None);
    };
    match &first.read {
        TaskRead::Found { stat, .. } => Ok(Some(stat.ctime)),
        _ => {
            let path = queue.layout().task(&first.name);
            let stat = queue.client().check_stat(&path).await;
            Ok(stat
                .map_err(|e| Error::zk("stat", &path, e))?
                .map(|s| s.ctime))
        }
    }
}
