//! Tasks that wait (a retry's backoff, a producer's delay) wait outside `tasks/`, so that no
//! walk reads them again and again at the head of the queue:
//!
//! ```text
//! delayed/<bucket>/<due>~<task name>    bucket: the start of the 10 s in which it is due
//! ```
//!
//! - A release with a backoff moves the task there ([`Queue::release`]: create the waiting
//!   node, delete task and lease, all version-checked).
//! - A walk that meets a task not due yet (a producer's `retry_at`) moves it there likewise,
//!   with a lease created and deleted in the same multi-op so that it fails if anyone holds it.
//! - Every run (and the worker, and the reaper) promotes what is due: it lists `delayed/` (one
//!   name per 10 s that has waiting tasks, not one per task), lists the due buckets, and moves
//!   each due task back to the tail of `tasks/` as a new sequential node, in one multi-op with
//!   the removal of its waiting node. The task keeps its id, attempts and last error; its
//!   earlier names go to `moved_from`, and its next claim's fencing token (a zxid) is higher
//!   than any before.

use zookeeper_client as zk;

use super::Queue;
use super::group_lock::LockWrite;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::write::{self, Next, Read, Tries, Write};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::layout::delay_bucket_of;
use crate::lease::LeaseData;
use crate::task::{self, Body};

recipe!(
    /// Delays: tasks that wait out a retry's backoff or a producer's delay under `delayed/`,
    /// deferred there and promoted back to their lane's tail when due (`delay`).
    Delays,
    delays
);

/// Separates a waiting node's due time from its task's name.
pub const DUE_SEPARATOR: char = '~';

/// The waiting node's name of task `name` due at `due`.
pub fn waiting_name(due: i64, name: &str) -> String {
    format!("{due:013}{DUE_SEPARATOR}{name}")
}

/// A waiting node's due time and task name.
pub fn parse_waiting(node: &str) -> Option<(i64, &str)> {
    let (due, name) = node.split_once(DUE_SEPARATOR)?;
    Some((due.parse().ok()?, name))
}

/// What moving a task that is not due yet came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deferred {
    /// It waits under `delayed/` now.
    Moved,
    /// Someone holds it, or it changed since it was read.
    Taken,
    /// It was no longer in its lane: completed, removed, or moved there by another consumer.
    Gone,
}

impl Delays<'_> {
    /// Moves task `name` (read at `version`, nobody holding it) out of `tasks/` until `due`,
    /// with `body` as it is.
    pub async fn defer(self, name: &str, body: &[u8], version: i32, due: i64) -> Result<Deferred> {
        let bucket = delay_bucket_of(due);
        let defer = Defer {
            bucket,
            waiting: self.layout().delayed_task(bucket, &waiting_name(due, name)),
            guard: LeaseData::new(self.consumer_id()).to_bytes(),
            lease_path: self.layout().lease(name),
            task_path: self.layout().task(name),
            version,
            body,
        };
        write::run(&self, defer).await
    }

    pub(super) async fn ensure_bucket(self, bucket: i64) -> Result<()> {
        let path = self.layout().delay_bucket(bucket);
        match self
            .client()
            .create(&path, b"", &self.created(zk::CreateMode::Persistent))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// How many tasks wait under `delayed/`: one stat per bucket.
    pub async fn count_delayed(self) -> Result<usize> {
        let buckets = self.buckets().await?;
        let counts: Vec<_> = buckets
            .iter()
            .map(|b| self.count_children(self.layout().delay_bucket(*b)))
            .collect();
        let mut total = 0;
        for count in futures::future::join_all(counts).await {
            total += count?;
        }
        Ok(total)
    }

    async fn count_children(self, path: String) -> Result<usize> {
        self.count(&path).await
    }

    /// The buckets under `delayed/`, oldest first.
    pub async fn buckets(self) -> Result<Vec<i64>> {
        let path = self.layout().delayed();
        let names = self.children_of(&path).await?;
        let mut buckets: Vec<i64> = names.iter().filter_map(|n| n.parse().ok()).collect();
        buckets.sort_unstable();
        Ok(buckets)
    }

    /// The waiting nodes of `bucket` (due time, node name), soonest first.
    pub async fn waiting_in(self, bucket: i64) -> Result<Vec<(i64, String)>> {
        let path = self.layout().delay_bucket(bucket);
        let names = match self.client().list_children(&path).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(Error::zk("list", path, e)),
        };
        let mut waiting: Vec<(i64, String)> = names
            .into_iter()
            .filter_map(|n| Some((parse_waiting(&n)?.0, n)))
            .collect();
        waiting.sort_unstable();
        Ok(waiting)
    }

    /// Moves tasks due by `now` back to the tail of `tasks/`, at most `limit`; returns how many
    /// it moved. Empty due buckets are removed.
    pub async fn promote_due(self, now: &ZkTime, limit: usize) -> Result<usize> {
        let now_ms = now.now_ms();
        let mut moved = 0;
        for bucket in self.buckets().await? {
            if bucket > now_ms || moved >= limit {
                break;
            }
            let waiting = self.waiting_in(bucket).await?;
            let due: Vec<&String> = waiting
                .iter()
                .filter(|(due, _)| *due <= now_ms)
                .map(|(_, n)| n)
                .take(limit - moved)
                .collect();
            for node in &due {
                moved += self.promote(bucket, node).await? as usize;
            }
            if due.len() == waiting.len() {
                self.remove_bucket(bucket).await?;
            }
        }
        if moved > 0 {
            tracing::debug!(moved, "due tasks back in the queue");
        }
        Ok(moved)
    }

    /// Moves one waiting node back to the tail of `tasks/`; `false` when someone else did.
    async fn promote(self, bucket: i64, node: &str) -> Result<bool> {
        let path = format!("{}/{node}", self.layout().delay_bucket(bucket));
        let (body, stat) = match self.client().get_data(&path).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(Error::zk("get", path, e)),
        };
        let name = parse_waiting(node).map_or(node, |(_, name)| name);
        let lock = self.groups().moved_lock(&body, name).await?;
        let body = back_in_line(&body, name);
        let moved = self
            .to_lane_tail(
                "promote",
                &path,
                stat.version,
                &body,
                lock.as_ref(),
                Vec::new(),
            )
            .await?;
        if let Some(new) = &moved {
            tracing::debug!(task = %name, now = %new, "due task back in the queue");
        }
        Ok(moved.is_some())
    }

    async fn remove_bucket(self, bucket: i64) -> Result<()> {
        let path = self.layout().delay_bucket(bucket);
        match self.client().delete(&path, None).await {
            Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => Ok(()),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }
}

/// A waiting task's body as it goes back in line: due now, its name until now remembered.
fn back_in_line(body: &[u8], name: &str) -> Vec<u8> {
    let Body::Envelope(mut envelope) = task::parse(body) else {
        return body.to_vec();
    };
    envelope.retry_at = None;
    envelope.moved_from.push(name.to_string());
    envelope.to_bytes().unwrap_or_else(|_| body.to_vec())
}

impl Delays<'_> {
    /// Moves a task that waits at `waiting` (read at `version`, with `body`) to the tail of
    /// the lane its body names: [`Delays::to_lane_tail`] without a lock or other writes (a
    /// debounced publish's firing). Its new name; `None` when the waiting node changed or went
    /// meanwhile.
    pub(crate) async fn waiting_to_lane_tail(
        self,
        what: &'static str,
        waiting: &str,
        version: i32,
        body: &[u8],
    ) -> Result<Option<String>> {
        self.to_lane_tail(what, waiting, version, body, None, Vec::new())
            .await
    }

    /// Moves a task that waits at `waiting` (read at `version`, with `body`) to the tail of
    /// the lane its body names, in one multi-op: the delete at that version and the sequential
    /// create, and the rewrite of its group's lock when it holds one (`lock`). Promoting a due
    /// task and firing a debounced one are both this move. Its new name; `None` when the
    /// waiting node changed or went meanwhile (another mover, or a publish that replaced it),
    /// or the lock did (the next run moves it), or one of `extra` failed (a signal's wake
    /// deletes the signal and the task's registrations with the move).
    pub(super) async fn to_lane_tail(
        self,
        what: &'static str,
        waiting: &str,
        version: i32,
        body: &[u8],
        lock: Option<&LockWrite>,
        extra: Vec<Op<'_>>,
    ) -> Result<Option<String>> {
        let lane = self.key_lanes().lane_of_body(body).await?;
        let prefix = self.layout().lane_prefix(&lane);
        let mut multi = Multi::new();
        multi
            .push(Part::Waiting, Op::Delete(waiting, version))
            .push(Part::NewTask, Op::CreateSequential(&prefix, body));
        if let Some(lock) = lock {
            multi.push(Part::Lock, Op::Set(&lock.path, &lock.data, lock.version));
        }
        for op in extra {
            multi.push(Part::Signal, op);
        }
        match self.commit(what, &multi).await? {
            Ok(results) => {
                let created = multi.result(&results, Part::NewTask);
                super::idempotency_keys::created_name(created, &prefix).map(Some)
            }
            Err(failed) if matches!(failed.error, zk::Error::NoNode | zk::Error::BadVersion) => {
                if failed.tag == Part::NewTask {
                    // Its key's lane deleted by hand: made again by the next try.
                    self.key_lanes().forget_key_lane(&lane);
                }
                Ok(None)
            }
            Err(failed) => Err(failed.unexpected(what)),
        }
    }
}

/// A task not due yet moved under `delayed/` (see [`Delays::defer`]), with a guard lease
/// created and deleted around it: the multi-op fails when someone holds the task.
struct Defer<'b> {
    bucket: i64,
    waiting: String,
    guard: Vec<u8>,
    lease_path: String,
    task_path: String,
    /// The task's version, as read.
    version: i32,
    body: &'b [u8],
}

impl Write for Defer<'_> {
    type Tag = Part;
    type Out = Deferred;
    const WHAT: &'static str = "defer";
    const TRIES: Tries = Tries::Few;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Deferred>> {
        queue.delays().ensure_bucket(self.bucket).await?;
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        multi
            .push(Part::Guard, Op::Create(&self.lease_path, &self.guard))
            .push(Part::Waiting, Op::Create(&self.waiting, self.body))
            .push(Part::Task, Op::Delete(&self.task_path, self.version))
            .push(Part::Guard, Op::Delete(&self.lease_path, -1));
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<Deferred> {
        Ok(Deferred::Moved)
    }

    async fn failed(&mut self, _: &Queue, failed: Failed<Part>) -> Result<Next<Deferred>> {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        Ok(match (failed.tag, &failed.error) {
            // The bucket was promoted away between its creation and this: made again.
            (Part::Waiting, NoNode) => Next::Again,
            (Part::Guard, NodeExists) | (Part::Task, BadVersion) => Next::Stop(Deferred::Taken),
            (Part::Waiting, NodeExists) | (Part::Task, NoNode) => Next::Stop(Deferred::Gone),
            _ => return Err(failed.unexpected(Self::WHAT)),
        })
    }

    fn exhausted(&self) -> Result<Deferred> {
        Ok(Deferred::Taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_names_carry_the_due_time_and_the_task() {
        let node = waiting_name(1_763_805_612_345, "task-0000000007");
        assert_eq!(node, "1763805612345~task-0000000007");
        assert_eq!(
            parse_waiting(&node),
            Some((1_763_805_612_345, "task-0000000007"))
        );
        assert_eq!(parse_waiting("junk"), None);
    }
}
