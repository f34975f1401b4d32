//! A walk over the whole queue: its lanes (high, normal, low) in turn, each walked from its
//! own head a window at a time ([`LaneWalk`]).
//!
//! Strict (the default): the walk takes a window of the highest lane that has one. Every
//! probe also reads the tails of the other lanes (one more read in the same multi-read, no
//! request of its own), so a task published in a higher lane while the walk is in a lower one
//! is seen with the next window, and the walk goes back up for it: a high task published
//! behind 10^5 low ones is claimed with the next claim batch, not after them.
//!
//! Weighted ([`LaneWeights`]): the walk takes windows of the lanes that have any in
//! proportion to their weights (smooth weighted round robin, per window of 32 numbers), so a
//! low lane is never starved by a busy high one.

use super::Queue;
use super::lane_walk::LaneWalk;
use super::probe::{LaneStart, Probed};
use crate::error::Result;
use crate::lane::{LaneWeights, Priority};

pub use super::lane_walk::{WIDEST, WINDOW};

/// Where a walk of the whole queue is.
#[derive(Debug)]
pub struct Walk {
    /// One walk per lane, high first.
    lanes: Vec<LaneWalk>,
    /// The lane of the last window given (0 for high).
    current: usize,
    weights: Option<LaneWeights>,
    /// Smooth weighted round robin: each lane's credit.
    credit: [i64; 3],
    /// Strict: the last probe found tasks in a lane above the one it probed.
    higher: bool,
}

impl Default for Walk {
    fn default() -> Self {
        Walk::new()
    }
}

impl Walk {
    /// A strict walk that starts at each lane's head, reading the heads itself.
    pub fn new() -> Self {
        Walk::of(Priority::ALL.map(LaneWalk::new).into())
    }

    /// A strict walk that starts where [`Queue::read_lanes`] found the lanes: lanes with no
    /// task cost no request until a probe of another lane sees their tail move.
    pub fn from_lanes(starts: Vec<LaneStart>) -> Self {
        Walk::of(starts.into_iter().map(LaneWalk::from_start).collect())
    }

    fn of(lanes: Vec<LaneWalk>) -> Self {
        debug_assert!(lanes.iter().map(LaneWalk::lane).eq(Priority::ALL));
        Walk {
            current: Priority::Normal.rank(),
            lanes,
            weights: None,
            credit: [0; 3],
            higher: false,
        }
    }

    /// The same walk sharing windows by `weights` (`None`: strict).
    pub fn weighted(mut self, weights: Option<LaneWeights>) -> Self {
        self.weights = weights;
        self
    }

    /// Whether every lane's walk has reached its tail.
    pub fn ended(&self) -> bool {
        self.lanes.iter().all(LaneWalk::ended)
    }

    /// Lets an ended walk go on: the lane it was last in probes past its old tail, and that
    /// probe's reading of the other lanes' tails wakes those that have new tasks.
    pub fn resume(&mut self) {
        self.lanes[self.current].resume();
    }

    /// Lets every lane's walk go on past its old tail (after the walker itself published).
    pub fn resume_all(&mut self) {
        self.lanes.iter_mut().for_each(LaneWalk::resume);
    }

    /// The lane of the last window given.
    pub fn lane(&self) -> Priority {
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
        self.lanes[Priority::of_name(name).rank()].mark_gone(number);
    }

    /// Adds what each lane's walk knows gone to its head (see [`LaneWalk::save_head`]).
    pub async fn save_head(&mut self, queue: &Queue) -> Result<()> {
        for lane in &mut self.lanes {
            lane.save_head(queue).await?;
        }
        Ok(())
    }

    /// The tasks of the next window that has any, in number order, from the lane whose turn
    /// it is; `None` once every lane's walk has reached its tail.
    pub async fn next_window(&mut self, queue: &Queue) -> Result<Option<Vec<Probed>>> {
        self.higher = false;
        while let Some(i) = self.pick() {
            let found = self.lanes[i].next_window(queue).await?;
            self.learn_others(i);
            if let Some(found) = found {
                self.current = i;
                self.took(i);
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The tails lane `i`'s probes read of the other lanes: a lane whose tail moved has tasks
    /// its walk has not seen.
    fn learn_others(&mut self, i: usize) {
        for (lane, tail) in self.lanes[i].take_others() {
            if self.lanes[lane.rank()].learn_tail(tail) {
                tracing::debug!(lane = %lane, tail, "tasks published in another lane");
                self.higher |= lane.rank() < i && self.weights.is_none();
            }
        }
    }

    /// Strict: whether the last window's probe found tasks in a higher lane, which the next
    /// window will be of. A pass probes it before it claims what it has probed already, so
    /// that the high task goes out with the next claim batch.
    pub fn higher_waiting(&self) -> bool {
        self.higher
    }

    /// The lane whose turn it is: strict, the highest not ended; weighted, the one with the
    /// most credit.
    fn pick(&mut self) -> Option<usize> {
        let open: Vec<usize> = (0..self.lanes.len())
            .filter(|i| !self.lanes[*i].ended())
            .collect();
        let Some(weights) = self.weights else {
            return open.first().copied();
        };
        for &i in &open {
            self.credit[i] += i64::from(weights.weights[i]);
        }
        open.into_iter()
            .max_by_key(|i| (self.credit[*i], -(*i as i64)))
    }

    /// Lane `i` gave a window: it pays for it with the weights of the lanes that wanted one.
    fn took(&mut self, i: usize) {
        if let Some(weights) = self.weights {
            let total: i64 = (0..self.lanes.len())
                .filter(|j| !self.lanes[*j].ended() || *j == i)
                .map(|j| i64::from(weights.weights[j]))
                .sum();
            self.credit[i] -= total;
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
