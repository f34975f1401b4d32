//! Key lanes: where normal tasks with a concurrency key wait (`lanes/keys/<key>/`, see
//! [`crate::lane`]), so that a walk can take keys in turn.
//!
//! - A publish makes its key's lane first when this process has not seen it yet (one create,
//!   `NodeExists` when another producer made it: once per key and process). Lanes are never
//!   deleted, so what a process has seen stays true.
//! - A walk lists `lanes/keys` (one request, the number of keys long, never the number of
//!   tasks) and reads every key lane's parent, [`READ_BATCH`] to a multi-read: its data is the
//!   lane's head, its stat the lane's tail and children. Every probe then reads `lanes/keys`'
//!   stat, and the walk lists again when a key lane was made since.
//! - A key lane's parent is made empty and keeps only its head: it is never deleted, and a
//!   publish that finds it gone (deleted by hand) forgets what the process knew and makes it
//!   again.

use zookeeper_client as zk;

use super::probe::{Head, LaneStart};
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::task::Envelope;

recipe!(
    /// Lanes made as publishes need them (the high and low lanes, and a concurrency key's own
    /// lane, made by the first publish of the key), and key lanes listed for a walk
    /// (`key_lanes`).
    KeyLanes,
    key_lanes
);

/// Key lanes' parents read in one multi-read, at most (a parent's path and head are at most
/// about 3 KB: a key's name up to 1 KiB, 64 ranges).
pub const READ_BATCH: usize = 128;

/// Key lanes whose tails a probe reads along with its window, at most: with more, the walk
/// reads them apart ([`KeyLanes::read_key_lanes`]) when they are due.
pub const TAILS_PER_PROBE: usize = 128;

/// The key lanes that exist, as one listing and its multi-reads found them.
#[derive(Clone, Debug, Default)]
pub struct KeyLaneList {
    /// Each key lane's start, as read.
    pub starts: Vec<LaneStart>,
    /// `cversion` of `lanes/keys` with the listing: a probe that reads another knows that a
    /// lane was made since.
    pub version: Option<i32>,
}

impl KeyLanes<'_> {
    /// The lane `envelope` waits in, made sure of (see [`KeyLanes::ensure_lanes`]).
    pub(crate) async fn lane_for(self, envelope: &Envelope) -> Result<Lane> {
        let lane = envelope.lane();
        self.ensure_lanes(std::slice::from_ref(&lane)).await?;
        Ok(lane)
    }

    /// The lane a task body asks for, made sure of.
    pub(crate) async fn lane_of_body(self, body: &[u8]) -> Result<Lane> {
        let lane = Lane::of_body(body);
        self.ensure_lanes(std::slice::from_ref(&lane)).await?;
        Ok(lane)
    }

    /// Makes the key lanes among `lanes` that this process has not seen yet, pipelined.
    pub(crate) async fn ensure_lanes(self, lanes: &[Lane]) -> Result<()> {
        let keys = lanes.iter().filter_map(|lane| match lane {
            Lane::Key(key) => Some(key.as_str()),
            _ => None,
        });
        let missing = self.memory.key_lanes.missing(keys);
        if missing.is_empty() {
            return Ok(());
        }
        let made = missing.iter().map(|key| self.make_key_lane(key));
        for made in futures::future::join_all(made).await {
            made?;
        }
        missing
            .into_iter()
            .for_each(|key| self.memory.key_lanes.insert(key));
        Ok(())
    }

    /// A create in key lane `lane` failed with `NoNode`: the lane was deleted since this
    /// process saw it (by hand); the next publish into it makes it again.
    pub(crate) fn forget_key_lane(&self, lane: &Lane) {
        if let Lane::Key(key) = lane {
            self.memory.key_lanes.forget(key);
        }
    }

    /// Creates `lanes/keys/<key>` (and `lanes/keys` when a queue set up by an earlier version
    /// lacks it); one that exists is no error.
    async fn make_key_lane(self, key: &str) -> Result<()> {
        let path = self.layout().lane_tasks(&Lane::Key(key.to_string()));
        for _ in 0..2 {
            match self
                .client()
                .create(&path, &[], &self.created(zk::CreateMode::Persistent))
                .await
            {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => self.make_parent(&self.layout().key_lanes()).await?,
                Err(e) => return Err(Error::zk("create", &path, e)),
            }
        }
        Err(Error::zk("create", &path, zk::Error::NoNode))
    }

    async fn make_parent(self, path: &str) -> Result<()> {
        match self
            .client()
            .create(path, &[], &self.created(zk::CreateMode::Persistent))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// Every key lane, where it starts: one listing of `lanes/keys` and one multi-read of the
    /// lanes' parents. A queue without `lanes/keys` has none.
    pub async fn read_key_lanes(self) -> Result<KeyLaneList> {
        let parent = self.layout().key_lanes();
        let (mut keys, stat) = match self.client().get_children(&parent).await {
            Ok(listed) => listed,
            Err(zk::Error::NoNode) => return Ok(KeyLaneList::default()),
            Err(e) => return Err(Error::zk("list", &parent, e)),
        };
        keys.sort_unstable();
        let lanes: Vec<Lane> = keys.into_iter().map(Lane::Key).collect();
        let paths: Vec<String> = lanes.iter().map(|l| self.layout().lane_tasks(l)).collect();
        // Pipelined multi-reads of READ_BATCH each: a listing of many long keys read in one
        // would pass the megabyte ZooKeeper takes in one request.
        let chunks = paths.chunks(READ_BATCH).map(|chunk| self.read_paths(chunk));
        let reads = futures::future::try_join_all(chunks)
            .await?
            .into_iter()
            .flatten();
        let mut starts = Vec::with_capacity(lanes.len());
        for (lane, read) in lanes.into_iter().zip(reads) {
            // A lane deleted by hand since the listing has no task.
            let Some((data, stat)) = read else { continue };
            starts.push(LaneStart {
                head: Some(Head::read(lane.clone(), &data, &stat)),
                tail: super::probe::tail_of(&stat),
                children: stat.num_children as usize,
                lane,
            });
        }
        Ok(KeyLaneList {
            starts,
            version: Some(stat.cversion),
        })
    }
}
