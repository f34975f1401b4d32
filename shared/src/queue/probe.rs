//! Looking at tasks by name instead of listing `tasks/`.
//!
//! Sequence names are computable: ZooKeeper gives the children of `tasks/` the numbers 0, 1,
//! 2, … in the order they are created (deletes leave gaps; numbers are never given twice). A
//! probe reads a window of numbers in one multi-read: each task's body and its lease, and the
//! stat of `tasks/` itself, from which the next number ZooKeeper will give (the tail) follows:
//! `cversion` counts creates and deletes of children, `numChildren` creates less deletes, so
//! half their sum is the number of creates.
//!
//! The head (`ROOT/head`) is the lowest number a task may still have. It only moves forward,
//! and only over numbers known gone for good: seen missing below the tail read in the same
//! multi-read (numbers are never given twice), or settled by the consumer that says so. It
//! also keeps a few ranges known gone beyond it (see [`super::walk`]).

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

mod window;

pub use window::{Along, AlongRead};

use super::reads::TaskRead;
use crate::error::{Error, Result};
use crate::lane::{Lane, Priority};
use crate::layout;
use crate::lease::LeaseData;
use crate::progress::ProgressReport;

recipe!(
    /// Probes: the lanes' heads and windows of numbers read from them, each task with its
    /// lease, so that a walk finds tasks without listing a lane (`probe`, `probe/window`).
    Probes,
    probes
);

/// What a probe saw of one sequence number whose task exists.
#[derive(Clone, Debug)]
pub struct Probed {
    /// The task's sequence number in its lane.
    pub number: i64,
    /// The task znode's name.
    pub name: String,
    /// The body and stat, or why they could not be read.
    pub read: TaskRead,
    /// Its lease, when someone holds it.
    pub lease: Option<LeaseSeen>,
}

/// A lease a probe saw.
#[derive(Clone, Debug)]
pub struct LeaseSeen {
    /// The holder's consumer id; `None` when the lease could not be read or names none.
    pub consumer_id: Option<String>,
    /// The claim's fencing token: the lease znode's `czxid`.
    pub fencing_token: i64,
    /// When it was last written, by ZooKeeper's clock.
    pub mtime: i64,
    /// The holder's latest progress, as of that write.
    pub progress: Option<ProgressReport>,
    /// The version of event-bridge the holder runs; `None` when its lease does not say (a
    /// 000-design consumer, an earlier version) or could not be read.
    pub consumer_version: Option<String>,
}

impl LeaseSeen {
    /// A lease znode's data and stat as read.
    pub fn from_read(data: &[u8], stat: &zk::Stat) -> Self {
        let data = serde_json::from_slice::<LeaseData>(data).ok();
        let (consumer_id, progress, consumer_version) = data.map_or((None, None, None), |l| {
            (Some(l.consumer_id), l.progress, l.consumer_version)
        });
        LeaseSeen {
            consumer_id,
            fencing_token: stat.czxid,
            mtime: stat.mtime,
            progress,
            consumer_version,
        }
    }
}

/// One probe's answer.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    /// The tasks that exist, by number.
    pub found: Vec<Probed>,
    /// The next number ZooKeeper will give in the lane probed.
    pub tail: i64,
    /// Children of the lane's parent (tasks and anything else), from its stat.
    pub children: usize,
    /// The tails of the other lanes, read with it.
    pub others: Vec<(Lane, i64)>,
    /// `cversion` of `lanes/keys`, read with it: it moves when a key lane is made.
    pub key_lanes: Option<i32>,
    /// The windows of other lanes read along with it, in the order asked.
    pub along: Vec<AlongRead>,
}

/// Where a lane starts, as [`Probes::read_lanes`] read it.
#[derive(Clone, Debug)]
pub struct LaneStart {
    /// The lane.
    pub lane: Lane,
    /// `None` when no consumer of this version wrote one yet.
    pub head: Option<Head>,
    /// The next number ZooKeeper will give in the lane.
    pub tail: i64,
    /// Children of the lane's parent.
    pub children: usize,
}

/// The next number ZooKeeper will give under a parent of this stat: `cversion` counts creates
/// and deletes of children, `numChildren` creates less deletes.
pub(super) fn tail_of(stat: &zk::Stat) -> i64 {
    (stat.cversion as i64 + stat.num_children as i64) / 2
}

/// The head znode's data: `{"next": 42}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadData {
    /// The lowest sequence number a task may still have.
    pub next: i64,
    /// Found by the last listing: children of `tasks/` that are not tasks (other producers'
    /// junk), so that a walk does not take them for tasks it missed.
    #[serde(default)]
    pub junk: usize,
    /// How far the last listing found the tail beyond what `tasks/`'s stat said (0 unless the
    /// server's numbering jumped).
    #[serde(default)]
    pub tail_offset: i64,
    /// Ranges `[start, end)` above `next` that consumers knew gone when they last wrote the
    /// head (the lowest few): a walk passes them without a probe, and the head moves over
    /// them once the numbers before them are gone too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<[i64; 2]>,
}

/// The head of a lane as read, with the version to write it back at.
#[derive(Clone, Debug)]
pub struct Head {
    /// What the head znode holds.
    pub data: HeadData,
    /// `None` when the znode does not exist yet.
    version: Option<i32>,
    /// The lane whose head it is.
    pub lane: Lane,
}

impl Head {
    /// The head of a lane that has none yet: writing it creates it.
    pub fn missing(lane: Lane) -> Self {
        Head {
            data: HeadData::default(),
            version: None,
            lane,
        }
    }

    /// The head of `lane` as read from its znode (data that is not a head reads as none
    /// yet: a key lane's parent starts empty).
    pub fn read(lane: Lane, data: &[u8], stat: &zk::Stat) -> Self {
        Head {
            data: serde_json::from_slice(data).unwrap_or_default(),
            version: Some(stat.version),
            lane,
        }
    }

    /// Whether the lane has no head znode yet.
    pub fn is_missing(&self) -> bool {
        self.version.is_none()
    }

    /// Its version, when its znode exists.
    pub(crate) fn version(&self) -> Option<i32> {
        self.version
    }

    /// The head as a write at `version` left it, holding `data`.
    pub(crate) fn written(&self, data: HeadData, version: i32) -> Self {
        Head {
            data,
            version: Some(version),
            lane: self.lane.clone(),
        }
    }
}

impl Probes<'_> {
    /// Where each lane starts, in one request: its head and its parent's stat (the tail, and
    /// how many children it has); when key lanes exist, two more (see [`Probes::with_key_lanes`]).
    pub async fn read_lanes(self) -> Result<Lanes> {
        let mut reader = self.client().new_multi_reader();
        self.add_lane_reads(&mut reader)?;
        let head = self.layout().head();
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", &head, e))?;
        self.with_key_lanes(lane_starts(&mut results.into_iter()))
            .await
    }

    /// `lanes` with the key lanes' starts, listed and read when `lanes/keys` has any.
    pub async fn with_key_lanes(self, mut lanes: Lanes) -> Result<Lanes> {
        if lanes.key_lanes_listed {
            return Ok(lanes);
        }
        let keys = self.key_lanes().read_key_lanes().await?;
        lanes.starts.extend(keys.starts);
        lanes.key_version = keys.version;
        lanes.key_lanes_listed = true;
        Ok(lanes)
    }

    /// Adds what [`Probes::read_lanes`] reads to `reader`: each lane's head, and its parent;
    /// then `lanes/keys`.
    pub(super) fn add_lane_reads(&self, reader: &mut zk::MultiReader<'_>) -> Result<()> {
        let paths: Vec<String> = Priority::ALL
            .into_iter()
            .flat_map(|lane| {
                let lane = Lane::from(lane);
                [
                    self.layout().lane_head(&lane),
                    self.layout().lane_tasks(&lane),
                ]
            })
            .chain([self.layout().key_lanes()])
            .collect();
        super::reads::add_get_data(reader, &paths)
    }

    /// The head of `lane`, or `None` when no consumer of this version wrote one yet.
    pub async fn read_head_in(self, lane: &Lane) -> Result<Option<Head>> {
        let path = self.layout().lane_head(lane);
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok(Some(Head {
                data: serde_json::from_slice(&data).unwrap_or_default(),
                version: Some(stat.version),
                lane: lane.clone(),
            })),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Writes `data` over `head` if nobody wrote it since it was read; a race lost is no
    /// error (the other writer moved it too). Returns the head as written (with its new
    /// version, so no read is needed to write it again), or `None` when the race was lost.
    pub async fn write_head(self, head: &Head, data: &HeadData) -> Result<Option<Head>> {
        let path = self.layout().lane_head(&head.lane);
        let bytes = serde_json::to_vec(data)?;
        let version = match head.version {
            Some(version) => self
                .client()
                .set_data(&path, &bytes, Some(version))
                .await
                .map(|stat| stat.version),
            None => self
                .client()
                .create(&path, &bytes, &self.created(zk::CreateMode::Persistent))
                .await
                .map(|_| 0),
        };
        match version {
            Ok(version) => Ok(Some(Head {
                data: data.clone(),
                version: Some(version),
                lane: head.lane.clone(),
            })),
            Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(None),
            Err(e) => Err(Error::zk("set", path, e)),
        }
    }

    /// Lists `lane`'s tasks: the fallback when probes cannot find them (no head yet, a jump
    /// in numbering). The numbers of the tasks, sorted, and how many children are not tasks.
    pub async fn list_numbers(self, lane: &Lane) -> Result<(Vec<i64>, usize)> {
        let path = self.layout().lane_tasks(lane);
        let names = match self.client().list_children(&path).await {
            Ok(names) => names,
            // A lane not made yet has no task.
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(Error::zk("list", &path, e)),
        };
        let total = names.len();
        let prefix = lane.prefix();
        let numbers = names
            .iter()
            .filter(|n| n.starts_with(&prefix))
            .filter_map(|n| layout::sequence(n));
        let mut numbers: Vec<i64> = numbers.collect();
        numbers.sort_unstable();
        let junk = total - numbers.len();
        Ok((numbers, junk))
    }
}

/// Where the lanes start: the priority lanes', then the key lanes' (see `key_lanes`).
#[derive(Clone, Debug, Default)]
pub struct Lanes {
    /// Each lane's start: priority lanes first, then key lanes.
    pub starts: Vec<LaneStart>,
    /// `cversion` of `lanes/keys` when the key lanes were listed.
    pub key_version: Option<i32>,
    /// Whether `starts` has every key lane (none exist, or they were listed).
    pub key_lanes_listed: bool,
}

impl Lanes {
    /// Whether no lane has a task (key lanes not listed yet may have some).
    pub fn empty(&self) -> bool {
        self.key_lanes_listed && self.starts.iter().all(|lane| lane.children == 0)
    }
}

/// Where each lane starts, from the answers to what [`Probes::add_lane_reads`] added: the
/// priority lanes; the key lanes are listed already when there are none.
pub(super) fn lane_starts(results: &mut impl Iterator<Item = zk::MultiReadResult>) -> Lanes {
    let mut starts = Vec::new();
    for lane in Priority::ALL.map(Lane::from) {
        let head = match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => Some(Head {
                data: serde_json::from_slice(&data).unwrap_or_default(),
                version: Some(stat.version),
                lane: lane.clone(),
            }),
            _ => None,
        };
        let parent = match results.next() {
            Some(zk::MultiReadResult::Data { stat, .. }) => Some(stat),
            _ => None,
        };
        starts.push(LaneStart {
            lane,
            head,
            tail: parent.as_ref().map_or(0, tail_of),
            children: parent.map_or(0, |s| s.num_children as usize),
        });
    }
    let keys = match results.next() {
        Some(zk::MultiReadResult::Data { stat, .. }) => Some(stat),
        _ => None,
    };
    Lanes {
        starts,
        key_version: keys.map(|s| s.cversion),
        key_lanes_listed: keys.is_none_or(|s| s.num_children == 0),
    }
}

fn unexpected(path: &str, result: Option<zk::MultiReadResult>) -> Error {
    match result {
        Some(zk::MultiReadResult::Error { err }) => Error::zk("probe", path, err),
        other => {
            let msg = format!("multi-read returned {other:?}");
            Error::zk("probe", path, zk::Error::UnexpectedError(msg))
        }
    }
}
