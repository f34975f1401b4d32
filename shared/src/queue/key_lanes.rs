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
//!
//! # Keys take turns
//!
//! A normal task with a `concurrency_key`, in
//! no ordered group, is published into its key's lane, `lanes/keys/<key>/key.<key>.N`; its
//! parent is made by the first publish of the key (one create per key and process, `NodeExists`
//! being success) and never deleted, so a name is never given twice. Normal's turn in the walk
//! goes round its lanes, `tasks/` and each key lane that has tasks, one window each, in key
//! order: a key with a backlog of 10^5 gives a window, then waits while every other key with
//! tasks gives one. The walk finds the keys without listing a task: the run's first read of
//! the lanes includes the stat of `lanes/keys`; when it has children, the walk lists it (one
//! request, a name per key) and reads every key lane's parent in one multi-read (its data is
//! the lane's head, its stat the tail and the task count). From then on the probe that starts each
//! round of normal's turn, or that comes eight probes after the last that did (a walk busy in
//! the high lane, or in a backlog), also reads the stats of the key lanes the walk knows (a tail
//! that moved wakes that lane); past 128 keys the walk reads them apart instead, 128 to a
//! multi-read, at most every K/16 windows (so a walk over 10^4 keys learns of another key's new
//! task within about 600 windows). Every probe reads the stat of `lanes/keys`, whose
//! `cversion` moves when a key lane is made: the walk lists again before its next window. The queue test publishes a new key's task mid-drain behind 2 000 of
//! another key's (concurrency 8): it starts within two windows and what was in flight (the
//! window the consumer held, and the one whose probe learnt of the new lane). Costs: a queue
//! whose `lanes/keys` has children spends two requests more per walk (one more per 128 keys),
//! also on a run over an idle queue (which still writes nothing), and the walk reads one stat
//! per key lane a round; lanes stay after their key's last task, so a queue that saw 10^4 keys
//! lists 10^4 names a walk. Deleting a key lane is not safe while anything may still name its
//! tasks (a new parent numbers from 0 again); no sweep does it yet. Small key lanes are probed
//! together (`probe/window.rs`, `Walk::along_of`): when the key lane whose turn it is has less
//! than a window left, its probe also reads the windows of the key lanes whose turns come next
//! (from where each walk is to the tail it knows), as many as fit in a window together, each
//! with its lane's parent stat and its key's gates; the walk then gives those windows in turn
//! without a request. A lane that needs a probe of its own first (its head not read, widening
//! from it) stops the ride, and so does one that would overfill the window. A drain over 100
//! keys of 20 tasks probed each key once, 100 probes where the same drain without keys needed
//! 65, and ran at 0.72x and 0.76x of it (medians of 11 rounds); reading two keys a probe
//! brought it to 0.96x and 1.02x (0.89x at 100 tasks a key; `BENCH_ONLY=semantics`). Issue
//! 34 switched it off in the same build: the drain over 100 concurrency keys fell from
//! 0.90-0.98x of plain to 0.78-0.84x, with 4% more requests (1.24x of plain against 1.17-1.19x).
//! A window read along is given before the next probe of normal's lanes (and before a listing
//! of the key lanes), after a higher lane's that a probe found woken: a high task published
//! just after such a probe waits for those windows (a window of tasks at most) before the next
//! probe sees it. A key lane that the same probe woke (its tail moved) and that comes between
//! the probed lane and those read along waits a round for its turn. A key lane's head is written
//! only once it has fallen a window (32 numbers) behind what the walk knows gone, or when the
//! ranges it keeps known gone beyond its number change: the next walk's first window covers a
//! head short of that anyway, and a lane with no child is ended from the start, wherever its
//! head is, and a drain over 100 keys of 20 tasks wrote
//! a head per key at its end, as many writes as its claims and completions together. A claim
//! batch short of full after a key lane's window waits for the next window, once; until that
//! window is in, a completion meanwhile does not send it alone (it did, and a drain over 100
//! keys of 100 tasks sent 98 claims of the 4 tasks each lane's last window held). Grouped tasks stay in their priority's lane (a group's order is
//! one lane's), and high and low tasks in theirs: priority comes before turns. `tasks/`
//! takes its turn as one more key.

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
