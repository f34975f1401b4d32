//! The one optimistic-write loop. A write reads what it builds on, builds one multi-op,
//! commits it, and answers a failed operation by what that operation was for (its tag): read
//! again and retry, retry after a pause, or stop with an outcome. [`run`] runs that
//! loop for every [`Write`]; its tries and pauses live here ([`Tries`], [`pause`]).
//!
//! The tries: a few, 8, for a write that rarely meets another; 64, with jittered
//! pauses of 1 to 50 ms, for a batch's counters or a child's parents that many write at once;
//! and, for the ending, as many as its answers allow (each failed try ends one of its tasks,
//! leaves a part out, or counts a re-read of a batch or a marker against 64). Once a multi-op
//! lands, the write takes its results (`ops::Landed`, each with its operation's tag) and says
//! what it came to.
//!
//! Through it go: the ending (`Queue::end`, so completion, burial, a blocked child's death and
//! cancel), a release, a keyed publish, a debounced publish, the all-or-nothing publish, a
//! redrive, a deferral under `delayed/`, a place's end, sealing a batch and a member chunk's
//! join, a child's settlement under a parent that ended (its death goes through the ending), a
//! walk's head write, a handler's slot frees, a schedule's change (pause, resume) and removal,
//! and the queue's pause. Not through it, as they are no optimistic writes: a write that fails
//! only when a parent znode is missing (making a key lane, opening a batch) makes it and tries
//! once more; a slot's free lost with the link is sent again in the background every second
//! until its session ends; and `cancel` looks its task up again when the task moved between its
//! status and the write for that status (each of those writes goes through the loop).

use super::Queue;
use super::ops::{Failed, Landed, Multi};
use crate::error::Result;

/// What a try's read comes to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read<O> {
    /// Build this try's multi-op and commit it.
    Write,
    /// Read again, counting a try: what was read moved under the read (another writer got
    /// in first on a write the read itself made).
    Again,
    /// Stop with this outcome, without a write.
    Stop(O),
}

/// What a write does after a try failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<O> {
    /// Read and build again at once: what failed was read again, or left out.
    Again,
    /// Again after a short pause: another writer got in first on a znode many write.
    Pause,
    /// Stop with this outcome.
    Stop(O),
}

/// How many tries a write makes, at most.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Tries {
    /// A write that meets another writer rarely (a key, a debounce key, a schedule, a
    /// place, a waiting child, a released task): a few tries.
    Few,
    /// A write to a znode many settlements and publishes change at once (a batch's counters,
    /// a child's parents' markers): many tries, with pauses between.
    Contended,
    /// A write whose every failed try ends one of its tasks, leaves a part out, or counts a
    /// read again against a bound of its own (the ending, `end`): as many as those allow.
    Answers,
}

impl Tries {
    pub(crate) const fn most(self) -> usize {
        match self {
            Tries::Few => 8,
            Tries::Contended => 64,
            Tries::Answers => usize::MAX,
        }
    }
}

/// Waits before try number `attempt` (from 1) of a write another writer just got in first
/// on: a few milliseconds, growing to 50, jittered, so that writers that met spread out.
pub(crate) async fn pause(attempt: usize) {
    let most = (2u64 << attempt.min(5)).min(50);
    tokio::time::sleep(std::time::Duration::from_millis(fastrand::u64(1..=most))).await;
}

/// One optimistic write (see the module documentation).
pub(crate) trait Write {
    /// What each operation is for.
    type Tag: Copy + PartialEq;
    /// What the write comes to.
    type Out;
    /// Its name, in errors.
    const WHAT: &'static str;
    /// Its tries, at most.
    const TRIES: Tries;

    /// Its name in errors, when one type makes writes of several names.
    fn what(&self) -> &'static str {
        Self::WHAT
    }

    /// Reads what the next try builds on (the first one's too), and says whether to write.
    async fn read(&mut self, _queue: &Queue) -> Result<Read<Self::Out>> {
        Ok(Read::Write)
    }

    /// Builds this try's multi-op.
    fn build<'a>(&'a self, multi: &mut Multi<'a, Self::Tag>);

    /// What it came to, once its multi-op landed (`landed`: its results).
    async fn landed(self, queue: &Queue, landed: Landed<Self::Tag>) -> Result<Self::Out>
    where
        Self: Sized;

    /// Answers the operation that failed a try. Nothing of the try landed.
    async fn failed(&mut self, queue: &Queue, failed: Failed<Self::Tag>)
    -> Result<Next<Self::Out>>;

    /// What it comes to when every try failed (an error, for most).
    fn exhausted(&self) -> Result<Self::Out>;
}

/// Runs `write` on `queue` until it lands or stops, at most its tries.
pub(crate) async fn run<W: Write>(queue: &Queue, mut write: W) -> Result<W::Out> {
    for attempt in 1..=W::TRIES.most() {
        match write.read(queue).await? {
            Read::Write => {}
            Read::Again => continue,
            Read::Stop(out) => return Ok(out),
        }
        let committed = {
            let mut multi = Multi::new();
            write.build(&mut multi);
            match queue.commit(write.what(), &multi).await? {
                Ok(results) => Ok(multi.landed(results)),
                Err(failed) => Err(failed),
            }
        };
        let failed = match committed {
            Ok(landed) => return write.landed(queue, landed).await,
            Err(failed) => failed,
        };
        match write.failed(queue, failed).await? {
            Next::Again => {}
            Next::Pause => pause(attempt).await,
            Next::Stop(out) => return Ok(out),
        }
    }
    write.exhausted()
}
