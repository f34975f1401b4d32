//! A walk over the queue from its head, a window of numbers at a time, with no listing of
//! `tasks/` on the way (see [`super::probe`] for why numbers can be probed).
//!
//! 1. The walk starts at the head. Its first probe moves the head up to the first task it sees
//!    (all numbers below it in that probe are gone for good). If that window is empty, the
//!    window doubles, still from the head, up to [`WIDEST`] numbers.
//! 2. It goes on window by window until the tail (the next number ZooKeeper will give).
//! 3. Only as a fallback it lists `tasks/`: when there is no head yet (a new queue, or one
//!    written by an earlier version), when [`WIDEST`] numbers from the head are empty, or when
//!    a walk that reached the tail saw fewer tasks than `tasks/` has children (a jump in
//!    numbering, or tasks created by name). The listing moves the head back or the tail on, and
//!    counts the children that are not tasks, so that the next walk need not list again.
//!
//! A walk costs one request per window; a scheduled run that claims one task probes one window.

use super::Queue;
use super::probe::{Head, HeadData, Probed};
use crate::error::Result;

/// Numbers in one probe.
pub const WINDOW: usize = 32;

/// The widest probe from the head before the walk lists `tasks/` instead.
pub const WIDEST: usize = 4_096;

/// Where a walk is.
#[derive(Debug)]
pub struct Walk {
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
}

impl Default for Walk {
    fn default() -> Self {
        Walk::new()
    }
}

impl Walk {
    /// A walk that starts at the head.
    pub fn new() -> Self {
        Walk {
            head: None,
            next: 0,
            tail: 0,
            children: 0,
            seen: 0,
            found_any: false,
            width: WINDOW,
            listed: false,
            ended: false,
        }
    }

    /// Whether the walk has reached the tail.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The tail and the children of `tasks/` at the last probe.
    pub fn depth(&self) -> usize {
        self.children
    }

    /// Lets an ended walk go on from where it stopped: tasks published since are past it.
    pub fn resume(&mut self) {
        self.ended = false;
    }

    /// Jumps `n` numbers ahead (after a lost race), never past the tail.
    pub fn skip(&mut self, n: usize) {
        self.next = (self.next + n as i64).min(self.tail.max(self.next));
    }

    /// The tasks of the next window that has any, in number order; `None` once the walk has
    /// reached the tail.
    pub async fn next_window(&mut self, queue: &Queue) -> Result<Option<Vec<Probed>>> {
        if self.head.is_none() {
            self.start(queue).await?;
        }
        while !self.ended {
            let count = if self.found_any { WINDOW } else { self.width };
            let probe = queue.probe(self.next, count).await?;
            let offset = self.head_data().tail_offset;
            self.tail = self.tail.max(probe.tail + offset);
            self.children = probe.children;
            if probe.found.is_empty() {
                self.empty_window(queue, count).await?;
                continue;
            }
            if !self.found_any {
                self.found_any = true;
                self.move_head(queue, probe.found[0].number).await?;
            }
            self.seen += probe.found.len();
            self.advance(count);
            return Ok(Some(probe.found));
        }
        Ok(None)
    }

    fn head_data(&self) -> HeadData {
        self.head
            .as_ref()
            .map(|h| h.data.clone())
            .unwrap_or_default()
    }

    /// Reads the head; without one, lists `tasks/` once to write it.
    async fn start(&mut self, queue: &Queue) -> Result<()> {
        let head = match queue.read_head().await? {
            Some(head) => head,
            None => {
                let fresh = Head::missing();
                self.head = Some(fresh);
                self.list(queue).await?;
                return Ok(());
            }
        };
        self.next = head.data.next;
        self.head = Some(head);
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

    /// Past a probed window, but never past the tail: a walk that goes on after new tasks were
    /// published (the worker's refill) starts where they are.
    fn advance(&mut self, count: usize) {
        self.next = (self.next + count as i64).min(self.tail.max(self.next));
    }

    /// Moves the head up to `number`, the first task the probe from the head saw.
    async fn move_head(&mut self, queue: &Queue, number: i64) -> Result<()> {
        let Some(head) = &self.head else {
            return Ok(());
        };
        if number <= head.data.next {
            return Ok(());
        }
        let data = HeadData {
            next: number,
            ..head.data.clone()
        };
        if queue.write_head(head, &data).await? {
            // Written: re-read it next time for its version.
            self.head = queue.read_head().await?;
        }
        Ok(())
    }

    /// The fallback: lists `tasks/` and puts the head, the tail and the junk count right.
    async fn list(&mut self, queue: &Queue) -> Result<()> {
        self.listed = true;
        let (numbers, junk) = queue.list_numbers().await?;
        let probe = queue.probe(0, 0).await?;
        let head = self.head.clone().unwrap_or_else(Head::missing);
        let lowest = numbers.first().copied().unwrap_or(probe.tail);
        let highest_next = numbers.last().map_or(probe.tail, |n| n + 1);
        let data = HeadData {
            next: lowest,
            junk,
            tail_offset: (highest_next - probe.tail).max(0),
        };
        tracing::info!(
            tasks = numbers.len(),
            junk,
            head = lowest,
            tail = highest_next,
            "tasks listed to find the head"
        );
        if data != head.data || head.is_missing() {
            queue.write_head(&head, &data).await?;
        }
        self.head = queue.read_head().await?;
        self.children = numbers.len() + junk;
        self.tail = highest_next.max(probe.tail);
        // Walk again from the lowest task, counting afresh.
        self.next = lowest;
        self.seen = 0;
        self.found_any = false;
        self.width = WINDOW;
        self.ended = numbers.is_empty();
        Ok(())
    }
}
