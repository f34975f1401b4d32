//! A walk over one lane of the queue from its head, a window of numbers at a time, with no
//! listing of the lane on the way (see [`super::probe`] for why numbers can be probed; the
//! normal lane is `tasks/`, [`super::walk`] walks the lanes in turn).
//!
//! 1. The walk starts at the head. If the window there is empty, it widens, still from the
//!    head, up to [`WIDEST`] numbers in one probe.
//! 2. It goes on window by window until the tail (the next number ZooKeeper will give).
//! 3. It keeps track of which numbers are gone for good: a number the walk saw missing below
//!    the tail read in the same multi-read (a number below the tail was given already, so once
//!    gone it stays gone), and every task the walker itself completed, buried or moved away
//!    (`Walk::settle`). `Walk::save_head` adds what it knows to what the head keeps of
//!    other consumers' knowledge (ranges known gone beyond the head), and moves the head up to
//!    the first number nobody knew gone. Every consumer does so after each pass, so the head
//!    stays near the oldest task whatever the consumers complete, even when they jumped over
//!    each other's tasks (a task is known gone to the consumer that settled it), and a walk
//!    passes over the ranges the head knows gone without a probe.
//! 4. Only as a fallback it lists `tasks/`: when there is no head yet (a new queue, or one
//!    written by an earlier version), when [`WIDEST`] numbers from the head are empty, or when
//!    a walk that reached the tail saw fewer tasks than `tasks/` has children (a jump in
//!    numbering, or tasks created by name). The listing moves the head back or the tail on, and
//!    counts the children that are not tasks, so that the next walk need not list again.
//!
//! A walk costs one request per window; a scheduled run that claims one task probes one window.
//!
//! # The head
//!
//! The normal lane's head is `ROOT/head`, `{"next": n, "gone": [[a, b], …]}` (the high and low
//! lanes' are under `heads/`, a key lane's is its parent's data): `next` is the lowest number a
//! task may still have, and `gone` up to [`HEAD_RANGES`] ranges beyond it that consumers knew
//! gone, which a walk passes without a probe. The save is a version-checked write through the one
//! write loop (`write.rs`), tried up to eight times while another consumer's write got in first;
//! giving up loses knowledge, never correctness. Consumers that jumped over each other's tasks
//! after lost races each know only part of the queue; the head adds the parts up, so after four
//! drains it sits at the oldest task left, not at the first jump. An empty window at the head
//! doubles the next probe, up to [`WIDEST`] numbers.
//!
//! What a listing proves gone (every number below the lowest task, the gaps between tasks, under
//! the tail read before it) stays in the walk's knowledge for its save, even when its own head
//! write lost to another consumer's: it includes what the walk's consumer settled, which nobody
//! else knows.

use std::collections::BTreeSet;

use zookeeper_client as zk;

use super::Queue;
use super::ops::{Failed, Landed, Multi, Op};
use super::probe::{Along, AlongRead, Head, HeadData, LaneStart, Probed};
use super::ranges::Ranges;
use super::write::{Next, Read, Tries, Write};
use crate::error::Result;
use crate::lane::Lane;

/// Numbers in one probe.
pub const WINDOW: usize = 32;

/// The widest probe from the head before the walk lists `tasks/` instead.
pub const WIDEST: usize = 4_096;

/// Ranges known gone that the head keeps beyond its number, at most (the lowest ones).
pub const HEAD_RANGES: usize = 64;

/// Where a walk of one lane is.
#[derive(Debug)]
pub struct LaneWalk {
    lane: Lane,
    head: Option<Head>,
    /// The next number to probe.
    next: i64,
    /// The next number ZooKeeper will give, as far as the walk knows.
    tail: i64,
    /// Children of `tasks/` at the last probe.
    children: usize,
    /// Tasks found so far.
    seen: usize,
    /// Whether a task was found since the head (until then, probes start at the head).
    found_any: bool,
    /// Numbers in the next probe from the head.
    width: usize,
    listed: bool,
    ended: bool,
    /// Tasks found that are not known gone yet.
    open: BTreeSet<i64>,
    /// Numbers probed below the tail, settled, or known gone from the head: every one of them
    /// that is not in `open` is gone for good.
    known: Ranges,
    /// The highest number seen existing (never passed by the frontier while open).
    highest: i64,
    /// The tails of the other lanes, read with the last probe.
    others: Vec<(Lane, i64)>,
    /// `cversion` of `lanes/keys`, read with the last probe.
    key_lanes: Option<i32>,
    /// What the last probe read of other lanes' windows along (see [`Walk`]).
    ///
    /// [`Walk`]: super::walk::Walk
    along: Vec<AlongRead>,
}

impl LaneWalk {
    /// A walk of `lane` that starts at its head.
    pub fn new(lane: Lane) -> Self {
        LaneWalk {
            lane,
            others: Vec::new(),
            key_lanes: None,
            along: Vec::new(),
            head: None,
            next: 0,
            tail: 0,
            children: 0,
            seen: 0,
            found_any: false,
            width: WINDOW,
            listed: false,
            ended: false,
            open: BTreeSet::new(),
            known: Ranges::new(),
            highest: -1,
        }
    }

    /// A walk that starts where [`super::Probes::read_lanes`] found its lane: at its head (without
    /// one, as [`LaneWalk::new`]: it reads the head itself, and lists when there is none), and
    /// ended already when the lane has no task (its tail at its head, no child but junk).
    pub fn from_start(start: LaneStart) -> Self {
        let lane = start.lane;
        let Some(head) = start.head else {
            return LaneWalk {
                ended: start.children == 0,
                tail: start.tail,
                ..LaneWalk::new(lane)
            };
        };
        let tail = start.tail + head.data.tail_offset;
        // A lane with no child has no task, wherever its head is (a key lane's head may stay
        // short of its tail: see `not_worth_a_write`).
        let empty =
            start.children == 0 || (tail <= head.data.next && start.children <= head.data.junk);
        LaneWalk {
            next: head.data.next,
            known: Ranges::from_pairs(&head.data.gone),
            ended: empty,
            tail: tail.max(head.data.next),
            head: Some(head),
            ..LaneWalk::new(lane)
        }
    }

    /// The lane this walk goes through.
    pub fn lane(&self) -> &Lane {
        &self.lane
    }

    /// The tails of the other lanes that the last probe read (taken: each is learnt once).
    pub fn take_others(&mut self) -> Vec<(Lane, i64)> {
        std::mem::take(&mut self.others)
    }

    /// What the last probe read of the windows asked along (taken).
    pub fn take_along(&mut self) -> Vec<AlongRead> {
        std::mem::take(&mut self.along)
    }

    /// The window this lane would give next, when another lane's probe can read it along: the
    /// numbers from where it is to the tail it knows, a window at most. None for a walk that
    /// needs a probe of its own first (no head read yet, widening from its head, ended) or
    /// knows of nothing left.
    pub fn along_window(&mut self) -> Option<Along> {
        if self.ended || self.head.is_none() || (!self.found_any && self.width != WINDOW) {
            return None;
        }
        self.next = self.known.reach(self.next).min(self.tail.max(self.next));
        let left = self.left().min(WINDOW);
        (left > 0).then(|| Along {
            lane: self.lane.clone(),
            from: self.next,
            count: left,
        })
    }

    /// Takes what another lane's probe read of `window` (from [`LaneWalk::along_window`]):
    /// its tasks, as this lane's next window, or `None` when there were none (its own turn
    /// then probes on from past them).
    pub fn took_along(&mut self, window: &Along, read: AlongRead) -> Option<Vec<Probed>> {
        if window.from != self.next || self.ended {
            return None;
        }
        let offset = self.head_data().tail_offset;
        self.tail = self.tail.max(read.tail + offset);
        self.children = read.children;
        self.observe(&read.found, window.count, read.tail + offset);
        if read.found.is_empty() {
            return None;
        }
        self.found_any = true;
        self.seen += read.found.len();
        self.advance(window.count);
        self.end_at_tail();
        Some(read.found)
    }

    /// `cversion` of `lanes/keys` as the last probe read it.
    pub fn key_lanes_version(&self) -> Option<i32> {
        self.key_lanes
    }

    /// Another lane's probe read this lane's tail: past what the walk knew, there are tasks
    /// it has not seen, and an ended walk goes on.
    pub fn learn_tail(&mut self, tail: i64) -> bool {
        let tail = tail + self.head_data().tail_offset;
        if tail <= self.tail {
            return false;
        }
        self.tail = tail;
        self.ended = false;
        true
    }

    /// Whether the walk has reached the tail.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Lets an ended walk go on from where it stopped: tasks published since are past it.
    pub fn reopen(&mut self) {
        self.ended = false;
    }

    /// The first number from the head this walk has not seen or known gone: every task below
    /// it, the walk has looked at.
    pub fn contiguous_through(&self) -> i64 {
        let head = self.head.as_ref().map_or(0, |h| h.data.next);
        self.known.reach(head)
    }

    /// Numbers from the next probe to the tail, as far as the walk knows.
    pub fn left(&self) -> usize {
        (self.tail - self.next).max(0) as usize
    }

    /// Jumps `n` numbers ahead (after a lost race), never past the tail. The numbers jumped
    /// over are not known gone: the head will not pass them on this walk's word.
    pub fn skip(&mut self, n: usize) {
        self.next = (self.next + n as i64).min(self.tail.max(self.next));
    }

    /// Task `number` of this lane is gone for good (this walker completed, buried or moved it,
    /// or found it gone).
    pub fn mark_gone(&mut self, number: i64) {
        self.open.remove(&number);
        self.known.insert(number, number + 1);
    }

    /// What this walk knows gone, with what `head` keeps.
    fn gone(&self, head: &HeadData) -> Ranges {
        let mut gone = self.known.without(&self.open);
        gone.union(&Ranges::from_pairs(&head.gone));
        gone
    }

    /// The head `head` would become with this walk's knowledge: its number moved up to the
    /// first number not known gone, and the lowest [`HEAD_RANGES`] ranges known gone above it.
    fn head_after(&self, head: &HeadData) -> HeadData {
        let gone = self.gone(head);
        let next = gone.reach(head.next);
        HeadData {
            next,
            gone: gone.above(next).to_pairs(HEAD_RANGES),
            ..head.clone()
        }
    }

    /// Adds what this walk knows gone to the head, moving it up (a version-checked write,
    /// read again and tried again while another consumer's write got in first, a few times:
    /// consumers that end a drain together all write it at once, and each try that loses
    /// means another one landed; it never moves the head back).
    pub async fn save_head(&mut self, queue: &Queue) -> Result<()> {
        let save = SaveHead {
            walk: self,
            path: String::new(),
            write: None,
        };
        super::write::run(queue, save).await
    }

    /// Whether moving a key lane's head from `before` to `after` would save the next walk
    /// less than a probe: it starts at the head, and its first window covers a head short of
    /// a window behind (a lane with no task left costs a walk nothing: see `from_start`). A
    /// drain over 100 keys of 20 tasks wrote a head per key at its end, as many writes as its
    /// claims and completions together; a key lane's head is now written once it is a window
    /// behind, or when the ranges it keeps known gone beyond its number change (a slow task
    /// holding it back while the tasks after it went). Other lanes' heads are written as they move (a walk lists
    /// `tasks/` when it finds a head missing or far off, and the normal lane holds tasks of
    /// every producer).
    fn not_worth_a_write(&self, before: &HeadData, after: &HeadData) -> bool {
        matches!(self.lane, Lane::Key(_))
            && after.next - before.next < WINDOW as i64
            && after.gone == before.gone
    }

    /// The tasks of the next window that has any, in number order; `None` once the walk has
    /// reached the tail. Each probe also reads the tails of `others`, and the first the windows
    /// `along` (what it read of them: [`LaneWalk::take_along`]).
    pub async fn next_window(
        &mut self,
        queue: &Queue,
        others: &[Lane],
        along: &[Along],
    ) -> Result<Option<Vec<Probed>>> {
        if self.head.is_none() {
            self.start(queue).await?;
        }
        // Other lanes' windows ride along with the first probe only.
        let mut along = along;
        while !self.ended {
            // Ranges known gone (from the head, or settled) are passed without a probe.
            self.next = self.known.reach(self.next).min(self.tail.max(self.next));
            let count = if self.found_any { WINDOW } else { self.width };
            let mut probe = queue
                .probes()
                .probe_along(&self.lane, others, self.next, count, along)
                .await?;
            if !along.is_empty() {
                self.along = std::mem::take(&mut probe.along);
                along = &[];
            }
            self.others = probe.others.clone();
            self.key_lanes = probe.key_lanes;
            let offset = self.head_data().tail_offset;
            self.tail = self.tail.max(probe.tail + offset);
            self.children = probe.children;
            self.observe(&probe.found, count, probe.tail + offset);
            if probe.found.is_empty() {
                self.empty_window(queue, count).await?;
                continue;
            }
            self.found_any = true;
            self.seen += probe.found.len();
            self.advance(count);
            self.end_at_tail();
            return Ok(Some(probe.found));
        }
        Ok(None)
    }

    /// Takes a probe of `count` numbers from `self.next` into account, `tail` read in the same
    /// multi-read: its tasks are open, and the numbers it saw missing below `tail` are gone for
    /// good.
    fn observe(&mut self, found: &[Probed], count: usize, tail: i64) {
        for probed in found {
            self.open.insert(probed.number);
            self.highest = self.highest.max(probed.number);
        }
        let end = (self.next + count as i64).min(tail.max(self.highest + 1));
        self.known.insert(self.next, end);
    }

    fn head_data(&self) -> HeadData {
        self.head
            .as_ref()
            .map(|h| h.data.clone())
            .unwrap_or_default()
    }

    /// Reads the head; without one, lists the lane once to write it.
    async fn start(&mut self, queue: &Queue) -> Result<()> {
        match queue.probes().read_head_in(&self.lane).await? {
            Some(head) => {
                *self = LaneWalk {
                    next: head.data.next,
                    known: Ranges::from_pairs(&head.data.gone),
                    head: Some(head),
                    ..LaneWalk::new(self.lane.clone())
                }
            }
            None => {
                self.head = Some(Head::missing(self.lane.clone()));
                return self.list(queue).await;
            }
        }
        Ok(())
    }

    /// After a window with no task: widen the probe from the head, go on to the next window,
    /// or end at the tail (listing first if tasks are missing).
    async fn empty_window(&mut self, queue: &Queue, count: usize) -> Result<()> {
        let reached = self.next + count as i64 >= self.tail;
        if !reached && !self.found_any {
            if self.width < WIDEST {
                self.width *= 2;
                return Ok(());
            }
            return self.list(queue).await;
        }
        if !reached {
            self.advance(count);
            return Ok(());
        }
        let expected = self.children.saturating_sub(self.head_data().junk);
        if self.seen < expected && !self.listed {
            return self.list(queue).await;
        }
        self.advance(count);
        self.ended = true;
        Ok(())
    }

    /// A window that reached the tail read with it, the walk having seen as many tasks as the
    /// lane has children, is the lane's last: the walk ends without probing past the tail (a
    /// lane of a few tasks, a key's, costs one probe instead of two). Fewer seen than there are
    /// children goes on, to the listing an empty window at the tail makes.
    fn end_at_tail(&mut self) {
        let expected = self.children.saturating_sub(self.head_data().junk);
        if self.next >= self.tail && self.seen >= expected {
            self.ended = true;
        }
    }

    /// Past a probed window, but never past the tail: a walk that goes on after new tasks were
    /// published (the worker's refill) starts where they are.
    fn advance(&mut self, count: usize) {
        self.next = (self.next + count as i64).min(self.tail.max(self.next));
    }

    /// The fallback: lists the lane and puts the head, the tail and the junk count right.
    async fn list(&mut self, queue: &Queue) -> Result<()> {
        self.listed = true;
        // The tail before the listing: a number under it that the listing lacks was given
        // before it, so it is gone for good.
        let before = queue.probes().probe_in(&self.lane, &[], 0, 0).await?.tail;
        let (numbers, junk) = queue.probes().list_numbers(&self.lane).await?;
        let probe = queue.probes().probe_in(&self.lane, &[], 0, 0).await?;
        let head = self
            .head
            .clone()
            .unwrap_or_else(|| Head::missing(self.lane.clone()));
        let lowest = numbers.first().copied().unwrap_or(before);
        let highest_next = numbers.last().map_or(probe.tail, |n| n + 1);
        let data = HeadData {
            next: lowest,
            junk,
            tail_offset: (highest_next - probe.tail).max(0),
            gone: Vec::new(),
        };
        tracing::info!(
            tasks = numbers.len(),
            junk,
            head = lowest,
            tail = highest_next,
            lane = %self.lane,
            "tasks listed to find the head"
        );
        let written = if data != head.data || head.is_missing() {
            queue.probes().write_head(&head, &data).await?
        } else {
            None
        };
        self.head = match written {
            Some(written) => Some(written),
            None => queue.probes().read_head_in(&self.lane).await?,
        };
        self.children = numbers.len() + junk;
        self.tail = highest_next.max(probe.tail);
        // Walk again from the lowest task, counting afresh: every number below it is gone, and
        // so is every gap between the tasks listed. That knowledge is kept for the head even
        // when the write above lost to another consumer's: it holds what this walk's own
        // consumer settled, which no other consumer knows.
        self.next = lowest;
        self.known = listed_gaps(&numbers, lowest, before);
        self.open.clear();
        self.seen = 0;
        self.found_any = false;
        self.width = WINDOW;
        self.ended = numbers.is_empty();
        Ok(())
    }
}

/// What a listing of `numbers` (sorted, the lowest `lowest`, or none) proves gone, `before`
/// being the tail read before it: the numbers under `before` that it lacks, below the lowest
/// and between the numbers listed. Under the tail each was given before the listing, so it is
/// gone for good; a number at or past it (a task created by name beyond the tail) proves
/// nothing about the numbers below it that ZooKeeper has yet to give.
fn listed_gaps(numbers: &[i64], lowest: i64, before: i64) -> Ranges {
    let mut gone = Ranges::new();
    let mut insert = |from: i64, to: i64| {
        let to = to.min(before);
        if from < to {
            gone.insert(from, to);
        }
    };
    insert(0, lowest);
    for pair in numbers.windows(2) {
        insert(pair[0] + 1, pair[1]);
    }
    gone
}

/// A walk's head write (see [`LaneWalk::save_head`]).
struct SaveHead<'w> {
    walk: &'w mut LaneWalk,
    path: String,
    /// This try's head data and its bytes.
    write: Option<(HeadData, Vec<u8>)>,
}

impl Write for SaveHead<'_> {
    type Tag = ();
    type Out = ();
    const WHAT: &'static str = "save head";
    const TRIES: Tries = Tries::Few;

    /// Nothing to write: no head read, none yet (a listing makes it), nothing learned, or not
    /// worth a write.
    async fn read(&mut self, queue: &Queue) -> Result<Read<()>> {
        let Some(head) = &self.walk.head else {
            return Ok(Read::Stop(()));
        };
        let data = self.walk.head_after(&head.data);
        if data == head.data || head.is_missing() || self.walk.not_worth_a_write(&head.data, &data)
        {
            return Ok(Read::Stop(()));
        }
        self.path = queue.layout().lane_head(&head.lane);
        let bytes = serde_json::to_vec(&data)?;
        self.write = Some((data, bytes));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, ()>) {
        let (Some(head), Some((_, bytes))) = (&self.walk.head, &self.write) else {
            return;
        };
        let version = head.version().expect("a head read");
        multi.push((), Op::Set(&self.path, bytes, version));
    }

    async fn landed(self, _: &Queue, landed: Landed<()>) -> Result<()> {
        let (data, _) = self.write.expect("a try reads before it writes");
        let head = self.walk.head.as_ref().expect("a head read");
        let version = match landed.result(()) {
            Some(zk::MultiWriteResult::SetData { stat }) => stat.version,
            _ => head.version().unwrap_or_default() + 1,
        };
        tracing::debug!(next = data.next, ranges = data.gone.len(), "head moved up");
        self.walk.head = Some(head.written(data, version));
        Ok(())
    }

    /// Another consumer wrote it first: read again.
    async fn failed(&mut self, queue: &Queue, failed: Failed<()>) -> Result<Next<()>> {
        match failed.error {
            zk::Error::BadVersion => {
                self.walk.head = queue.probes().read_head_in(&self.walk.lane).await?;
                Ok(Next::Again)
            }
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<()> {
        tracing::debug!("head not moved: other consumers kept writing it first");
        Ok(())
    }
}

#[cfg(test)]
mod tests;
