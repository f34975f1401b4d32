//! A walk over the whole queue: its lanes (high, normal, low, and the key lanes, which take
//! normal's turn between them) in turn, each walked from its own head a window at a time
//! ([`LaneWalk`]).
//!
//! Strict (the default): the walk takes a window of the highest priority that has one. Every
//! probe also reads the tails of the other lanes (more reads in the same multi-read, no
//! request of its own), so a task published in a higher lane while the walk is in a lower one
//! is seen with the next probe, and the walk goes back up for it: a high task published
//! behind 10^5 low ones is claimed with the next claim batch, not after them.
//!
//! Weighted ([`LaneWeights`]): the walk takes windows of the priorities that have any in
//! proportion to their weights (smooth weighted round robin, per window of 32 numbers), so a
//! low lane is never starved by a busy high one.
//!
//! Keys in turn: normal's turn goes round its lanes, `tasks/` and each key lane that has tasks,
//! a window each (round robin). A key with a backlog therefore gives one window and then waits
//! for every other key that has tasks to give one: a key publishing a few tasks behind it is
//! taken within a window of each key, whatever the backlog. The walk finds the key lanes
//! without listing tasks: it lists `lanes/keys` (one child per key) when it starts; the probe
//! that starts each round of normal's turn, or that comes [`TAILS_EVERY`] windows after the
//! last that did, reads the tails of the key lanes it knows (past [`TAILS_PER_PROBE`] keys,
//! the walk reads them apart, less often); every probe reads the stat of `lanes/keys`, whose
//! `cversion` moves when a key lane is made: the walk lists again before its next window. A
//! key lane with less than a window left is probed with the windows of the key lanes whose
//! turns come next (as many as fit in a window together), which the walk then gives in turn
//! without a request ([`Walk::along_of`]).
//!
//! # Lanes in turn
//!
//! One walk per lane (`lane_walk.rs`). A run
//! reads the three heads with the three lanes' stats in one multi-read; a lane whose tail is at
//! its head has nothing and costs no probe. Every probe of a lane also reads the stats of the
//! two other lanes' parents (two more reads in the same multi-read): a tail that moved past
//! what the walk knew means tasks it has not seen, and that lane's walk goes on. Strict (the
//! default), the walk's next window is always of the highest lane that has one, so a high task
//! published while a drain is deep in the low lane is seen with the drain's next probe; the pass
//! then probes the high window before it claims the low tasks it holds, and puts the high task
//! at the front of its line, so it goes out with the next claim batch. The queue test publishes
//! one behind 2 000 low tasks mid-drain (concurrency 8): 28 low tasks started before it, all
//! probed before it was published. With `LANE_WEIGHTS` the walk shares windows among the lanes
//! that have tasks by smooth weighted round robin (per window of 32 numbers), so a busy high
//! lane cannot starve low; strict is the default because a priority that is only a share
//! surprises those who ask for "high", and a team that wants shares says how much.

use std::collections::{HashMap, VecDeque};

use super::Queue;
use super::lane_walk::LaneWalk;
use super::probe::{Along, Lanes, Probed};
use crate::error::Result;
use crate::lane::{Lane, LaneWeights, Priority};

use super::key_lanes::TAILS_PER_PROBE;
pub use super::lane_walk::{WIDEST, WINDOW};

/// Probes a walk sends at most before it reads the key lanes' tails again.
pub const TAILS_EVERY: usize = 8;

/// Where a walk of the whole queue is.
#[derive(Debug)]
pub struct Walk {
    /// One walk per lane: high, normal and low first, then the key lanes.
    lanes: Vec<LaneWalk>,
    /// Where each lane's walk is in `lanes`.
    index: HashMap<Lane, usize>,
    /// The lane of the last window given.
    current: usize,
    weights: Option<LaneWeights>,
    /// Smooth weighted round robin: each priority's credit.
    credit: [i64; 3],
    /// Strict: the last probe found tasks in a lane above the one it probed.
    higher: bool,
    /// `cversion` of `lanes/keys` when the walk last listed it.
    key_version: Option<i32>,
    /// The key lanes must be listed before the next window.
    relist: bool,
    /// Probes since the key lanes' tails were last read.
    since_tails: usize,
    /// Windows of key lanes read along with an earlier probe (each with its lane's index),
    /// given in turn before the next probe of normal's lanes.
    along: VecDeque<(usize, Vec<Probed>)>,
}

impl Default for Walk {
    fn default() -> Self {
        Walk::new()
    }
}

impl Walk {
    /// A strict walk that starts at each lane's head, reading the heads itself (and listing
    /// the key lanes before its first window).
    pub fn new() -> Self {
        let lanes = Priority::ALL.map(|p| LaneWalk::new(p.into())).into();
        Walk::of(lanes, None, true)
    }

    /// A strict walk that starts where [`super::Probes::read_lanes`] found the lanes: lanes with no
    /// task cost no request until a probe of another lane sees their tail move.
    pub fn from_lanes(lanes: Lanes) -> Self {
        let walks = lanes.starts.into_iter().map(LaneWalk::from_start).collect();
        Walk::of(walks, lanes.key_version, !lanes.key_lanes_listed)
    }

    fn of(lanes: Vec<LaneWalk>, key_version: Option<i32>, relist: bool) -> Self {
        let priorities: Vec<Lane> = Priority::ALL.map(Lane::from).into();
        debug_assert!(
            lanes
                .iter()
                .take(3)
                .map(LaneWalk::lane)
                .eq(priorities.iter())
        );
        let index = (lanes.iter().enumerate())
            .map(|(i, walk)| (walk.lane().clone(), i))
            .collect();
        Walk {
            current: Priority::Normal.rank(),
            lanes,
            index,
            weights: None,
            credit: [0; 3],
            higher: false,
            key_version,
            relist,
            since_tails: 0,
            along: VecDeque::new(),
        }
    }

    /// The same walk sharing windows by `weights` (`None`: strict).
    pub fn weighted(mut self, weights: Option<LaneWeights>) -> Self {
        self.weights = weights;
        self
    }

    /// Whether every lane's walk has reached its tail, and gave every window it read.
    pub fn ended(&self) -> bool {
        !self.relist && self.along.is_empty() && self.lanes.iter().all(LaneWalk::ended)
    }

    /// Lets an ended walk go on: the lane it was last in probes past its old tail, and that
    /// probe's reading of the other lanes' tails wakes those that have new tasks.
    pub fn reopen(&mut self) {
        self.lanes[self.current].reopen();
    }

    /// Lets every lane's walk go on past its old tail (after the walker itself published).
    pub fn reopen_all(&mut self) {
        self.lanes.iter_mut().for_each(LaneWalk::reopen);
        self.relist = true;
    }

    /// The lane of the last window given.
    pub fn lane(&self) -> &Lane {
        self.lanes[self.current].lane()
    }

    /// In the lane of the last window: the first number from its head this walk has not
    /// seen or known gone.
    pub fn contiguous_through(&self) -> i64 {
        self.lanes[self.current].contiguous_through()
    }

    /// Numbers left in the lane of the last window, as far as the walk knows.
    pub fn left(&self) -> usize {
        self.lanes[self.current].left()
    }

    /// Jumps `n` numbers ahead in the lane of the last window (after a lost race).
    pub fn skip(&mut self, n: usize) {
        self.lanes[self.current].skip(n);
    }

    /// Task `name` is gone for good (settled by this walker, or found gone).
    pub fn mark_gone(&mut self, name: &str) {
        let Some(number) = crate::layout::sequence(name) else {
            return;
        };
        if let Some(i) = self.index.get(&Lane::of_name(name)) {
            self.lanes[*i].mark_gone(number);
        }
    }

    /// Adds what each lane's walk knows gone to its head (see [`LaneWalk::save_head`]), the
    /// lanes' writes pipelined (a walk over many key lanes has a head per key to move: one
    /// after another, they cost a drain over 100 keys a third of its rate).
    pub async fn save_head(&mut self, queue: &Queue) -> Result<()> {
        let saves = self.lanes.iter_mut().map(|lane| lane.save_head(queue));
        for saved in futures::future::join_all(saves).await {
            saved?;
        }
        Ok(())
    }

    /// The tasks of the next window that has any, in number order, from the lane whose turn
    /// it is; `None` once every lane's walk has reached its tail.
    pub async fn next_window(&mut self, queue: &Queue) -> Result<Option<Vec<Probed>>> {
        self.higher = false;
        loop {
            // Windows read along go first, before a listing costs a request.
            if !self.along.is_empty() {
                let picked = self.pick();
                if let Some(found) = self.give_along(picked) {
                    return Ok(Some(found));
                }
            }
            if self.relist {
                self.list_keys(queue).await?;
            }
            let Some(i) = self.pick() else {
                return Ok(None);
            };
            let keys = self.lanes.len() - 3;
            let due = self.tails_due(i);
            if due && keys > TAILS_PER_PROBE {
                // Too many to read along with a window: listed and read apart.
                self.list_keys(queue).await?;
                continue;
            }
            let others = self.others_of(i, due);
            self.since_tails = if due { 0 } else { self.since_tails + 1 };
            let along = self.along_of(i);
            let windows: Vec<Along> = along.iter().map(|(_, w)| w.clone()).collect();
            let found = self.lanes[i].next_window(queue, &others, &windows).await?;
            self.learn_others(i);
            self.took_along(i, along);
            if let Some(found) = found {
                self.current = i;
                self.took(i);
                return Ok(Some(found));
            }
        }
    }

    /// The windows a probe of lane `i` reads along: when `i` is a key lane of a strict walk
    /// with less than a window left, the key lanes whose turns come next, in turn, as long as
    /// each can give its window without a probe of its own and they hold a window together.
    /// A drain over 100 keys of 20 tasks thus probes two keys a request instead of one.
    fn along_of(&mut self, i: usize) -> Vec<(usize, Along)> {
        let mut along = Vec::new();
        if self.weights.is_some() || i < 3 || self.lanes[i].left() >= WINDOW {
            return along;
        }
        let mut room = WINDOW;
        for j in i + 1..self.lanes.len() {
            if self.lanes[j].ended() {
                continue;
            }
            match self.lanes[j].along_window() {
                Some(window) if window.count <= room => {
                    room -= window.count;
                    along.push((j, window));
                }
                _ => break,
            }
        }
        along
    }

    /// What a probe read along (`along`, asked by [`Walk::along_of`]) of lane `i`'s probe:
    /// the windows with tasks wait their turn, given before the next probe.
    fn took_along(&mut self, i: usize, along: Vec<(usize, Along)>) {
        let reads = self.lanes[i].take_along();
        for ((j, window), read) in along.into_iter().zip(reads) {
            if let Some(found) = self.lanes[j].took_along(&window, read) {
                self.along.push_back((j, found));
            }
        }
    }

    /// A window read along with an earlier probe, in its turn: before any probe of normal's
    /// lanes or of a lower lane (`picked`, the lane whose turn it would be), after a higher
    /// lane's that woke meanwhile.
    fn give_along(&mut self, picked: Option<usize>) -> Option<Vec<Probed>> {
        let normal = Priority::Normal.rank();
        let higher = picked.is_some_and(|i| self.lanes[i].lane().priority().rank() < normal);
        if higher {
            return None;
        }
        let (j, found) = self.along.pop_front()?;
        self.current = j;
        self.took(j);
        Some(found)
    }

    /// Lists the key lanes: a walk for each new one, and the tails of those it knew.
    async fn list_keys(&mut self, queue: &Queue) -> Result<()> {
        let keys = queue.key_lanes().read_key_lanes().await?;
        self.relist = false;
        self.since_tails = 0;
        self.key_version = keys.version;
        for start in keys.starts {
            match self.index.get(&start.lane) {
                Some(i) => {
                    self.lanes[*i].learn_tail(start.tail);
                }
                None => {
                    self.index.insert(start.lane.clone(), self.lanes.len());
                    self.lanes.push(LaneWalk::from_start(start));
                }
            }
        }
        Ok(())
    }

    /// The lanes whose tails a probe of lane `i` reads: the other priority lanes, and the key
    /// lanes too when `keys`.
    fn others_of(&self, i: usize, keys: bool) -> Vec<Lane> {
        let upto = if keys { self.lanes.len() } else { 3 };
        (self.lanes[..upto].iter().enumerate())
            .filter(|(j, _)| *j != i)
            .map(|(_, walk)| walk.lane().clone())
            .collect()
    }

    /// Whether the key lanes' tails are due with the window of lane `i`: when it starts a
    /// round of normal's turn, or [`TAILS_EVERY`] windows went by without them (a walk in
    /// the high lane, or in one key's backlog, still learns of the others'). With K keys that
    /// is K reads a round, not K a window; past [`TAILS_PER_PROBE`] keys, at most every K / 16
    /// windows, read apart (a request per 128 keys: under one request every 2 windows).
    fn tails_due(&self, i: usize) -> bool {
        let keys = self.lanes.len() - 3;
        if keys == 0 {
            return false;
        }
        if keys > TAILS_PER_PROBE {
            return self.since_tails >= TAILS_EVERY.max(keys / 16);
        }
        let turn = |lane: usize| match lane {
            1 => Some(0),
            0 | 2 => None,
            key => Some(key - 2),
        };
        let starts_round = match (turn(i), turn(self.current)) {
            (Some(next), Some(last)) => next <= last,
            _ => false,
        };
        starts_round || self.since_tails >= TAILS_EVERY
    }

    /// The tails lane `i`'s probes read of the other lanes: a lane whose tail moved has tasks
    /// its walk has not seen. A key lane made since the listing is listed next.
    fn learn_others(&mut self, i: usize) {
        let rank = self.lanes[i].lane().priority().rank();
        for (lane, tail) in self.lanes[i].take_others() {
            let Some(&j) = self.index.get(&lane) else {
                continue;
            };
            if self.lanes[j].learn_tail(tail) {
                tracing::debug!(lane = %lane, tail, "tasks published in another lane");
                self.higher |= lane.priority().rank() < rank && self.weights.is_none();
            }
        }
        let version = self.lanes[i].key_lanes_version();
        if version.is_some() && version != self.key_version {
            self.relist = true;
        }
    }

    /// Strict: whether the last window's probe found tasks in a higher lane, which the next
    /// window will be of. A pass probes it before it claims what it has probed already, so
    /// that the high task goes out with the next claim batch.
    pub fn higher_waiting(&self) -> bool {
        self.higher
    }

    /// Whether a lane of priority `rank` has a window to give.
    fn rank_open(&self, rank: usize) -> bool {
        (self.lanes.iter()).any(|walk| !walk.ended() && walk.lane().priority().rank() == rank)
    }

    /// The lane whose turn it is: of the priority whose turn it is (strict, the highest with
    /// an open lane; weighted, the one with the most credit), and in normal's, the next open
    /// lane after the last one given a window.
    fn pick(&mut self) -> Option<usize> {
        let open: Vec<usize> = (0..3).filter(|rank| self.rank_open(*rank)).collect();
        let rank = match self.weights {
            None => *open.first()?,
            Some(weights) => {
                for &rank in &open {
                    self.credit[rank] += i64::from(weights.weights[rank]);
                }
                (open.into_iter()).max_by_key(|rank| (self.credit[*rank], -(*rank as i64)))?
            }
        };
        if rank != Priority::Normal.rank() {
            return Some(rank);
        }
        // Normal's lanes in turn: `tasks/` (1), then the key lanes (3 on).
        let turn: Vec<usize> = std::iter::once(1).chain(3..self.lanes.len()).collect();
        let after = turn
            .iter()
            .position(|i| *i == self.current)
            .map_or(0, |p| p + 1);
        (turn.iter().cycle().skip(after).take(turn.len()))
            .copied()
            .find(|i| !self.lanes[*i].ended())
    }

    /// Lane `i` gave a window: its priority pays for it with the weights of the priorities
    /// that wanted one.
    fn took(&mut self, i: usize) {
        if let Some(weights) = self.weights {
            let rank = self.lanes[i].lane().priority().rank();
            let total: i64 = (0..3)
                .filter(|r| self.rank_open(*r) || *r == rank)
                .map(|r| i64::from(weights.weights[r]))
                .sum();
            self.credit[rank] -= total;
        }
    }
}

/// Whether the task `name` with `body` is the one `key` names: by its name, its envelope id, or
/// a name it had before a retry moved it.
pub fn names_task(key: &str, name: &str, body: &[u8]) -> bool {
    name == key
        || match crate::task::parse(body) {
            crate::task::Body::Envelope(e) => e.id == key || e.moved_from.iter().any(|m| m == key),
            _ => false,
        }
}

impl Queue {
    /// The first task in the lanes that `key` names (see [`names_task`]), found by walking the
    /// whole queue a window at a time: a request per window, for `status` and the like.
    pub async fn find_in_lanes(&self, key: &str) -> Result<Option<Probed>> {
        let mut walk = Walk::new();
        while let Some(window) = walk.next_window(self).await? {
            for probed in window {
                if let super::TaskRead::Found { body, .. } = &probed.read
                    && names_task(key, &probed.name, body)
                {
                    return Ok(Some(probed));
                }
            }
        }
        Ok(None)
    }
}
