//! What the holder of a lease does next: extend it, complete the task, release it for a
//! retry, or bury it. Each write checks the task's and the lease's versions (see the module
//! documentation of [`crate::queue`]).
//!
//! # Notable behaviour
//!
//! An extension can reach ZooKeeper and its reply be lost: the lease's version has moved on
//! and the holder does not know it. Every write of a holder therefore reads the lease again
//! when only the lease's version is off; if the lease is still the one its claim created (its
//! `czxid` is the claim's fencing token) and holds our consumer id, the write is sent again at
//! the lease's version.

use std::time::Duration;

use zookeeper_client as zk;

use super::Queue;
use super::claim::Lease;
use super::done::DoneWrite;
use super::group::{HeldLock, Release};
use super::key_owner::{CompletedKey, OwnedKey};
use super::ops::Op;
use super::record::short;
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::lease::LeaseData;
use crate::task::{OnDead, Task};

/// What an operation of a completion's multi-op writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Task,
    Lease,
    Key,
    Lock,
    Done,
    DoneId,
}

/// What completing one task writes besides deleting task and lease.
struct Extras {
    key: Option<CompletedKey>,
    lock: Option<HeldLock>,
    done: Option<DoneWrite>,
}

/// A completion's multi-op for `leases` (with their task and lease `paths`), and for each
/// operation the index of its lease and what it writes.
fn completion_ops<'a>(
    leases: &'a [Lease],
    paths: &'a [(String, String)],
    extras: &'a [Extras],
) -> (Vec<Op<'a>>, Vec<(usize, Part)>) {
    let (mut ops, mut owners) = (Vec::new(), Vec::new());
    for (i, ((l, (task, lease)), extra)) in leases.iter().zip(paths).zip(extras).enumerate() {
        ops.push(Op::Delete(task, l.task_version));
        ops.push(Op::Delete(lease, l.lease_version));
        owners.extend([(i, Part::Task), (i, Part::Lease)]);
        if let Some(key) = &extra.key {
            ops.push(Op::Set(&key.key.path, &key.data, key.key.version));
            ops.push(Op::Create(&key.entry, b""));
            owners.extend([(i, Part::Key), (i, Part::Key)]);
        }
        if let Some(lock) = &extra.lock {
            ops.push(Op::Delete(&lock.path, lock.version));
            owners.push((i, Part::Lock));
        }
        if let Some(done) = &extra.done {
            ops.push(Op::Create(&done.record, &done.record_data));
            owners.push((i, Part::Done));
            if let Some(entry) = &done.id_entry {
                ops.push(Op::Create(entry, &done.id_data));
                owners.push((i, Part::DoneId));
            }
        }
    }
    (ops, owners)
}

/// Whether a holder's write took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// The lease is no longer ours (expired and reaped, perhaps claimed again): nothing changed.
    LeaseLost,
    /// Nothing changed, because what the write would have done is done: the task is gone (or,
    /// for a release, already released). Sent after an earlier try of the same write whose
    /// reply was lost, this is that try having landed; otherwise another holder settled the
    /// task after our lease passed on.
    Gone,
    /// Nothing changed: the task was cancelled while held, so it may not be given back for
    /// another run (its holder buries it instead). Only a release says so.
    Cancelled,
}

impl Queue {
    /// Refreshes a held lease (its `mtime` and `timestamp`), if it is still ours.
    pub async fn extend(&self, lease: &mut Lease) -> Result<Settled> {
        match self.try_extend(lease).await? {
            // The lease's version moved: an earlier extension whose reply was lost may have
            // landed. If the lease still carries our id and token, it is ours: catch up, retry.
            Err(1) if self.still_ours(lease).await? => match self.try_extend(lease).await? {
                Ok(()) => Ok(Settled::Done),
                Err(_) => Ok(Settled::LeaseLost),
            },
            Ok(()) => Ok(Settled::Done),
            Err(_) => Ok(Settled::LeaseLost),
        }
    }

    /// One extension; a fencing failure comes back as the index of the operation that failed
    /// (0: the task moved on, 1: the lease's version differs).
    async fn try_extend(&self, lease: &mut Lease) -> Result<std::result::Result<(), usize>> {
        let name = &lease.task.name;
        let (task_path, lease_path) = (self.layout().task(name), self.layout().lease(name));
        let data = LeaseData::new(self.consumer_id()).to_bytes();
        let ops = [
            Op::Check(&task_path, lease.task_version),
            Op::Set(&lease_path, &data, lease.lease_version),
        ];
        match self.commit("extend", &ops).await? {
            Ok(results) => {
                if let Some(zk::MultiWriteResult::SetData { stat }) = results.last() {
                    lease.lease_version = stat.version;
                }
                tracing::debug!(task = %name, fencing_token = lease.task.fencing_token, "lease extended");
                Ok(Ok(()))
            }
            Err((i, zk::Error::BadVersion | zk::Error::NoNode)) => Ok(Err(i)),
            Err((i, e)) => Err(Error::zk("extend", ops[i].path(), e)),
        }
    }

    /// Whether the lease znode is still the one this claim created (its `czxid` is the claim's
    /// fencing token) and holds our consumer id; if so, `lease` takes its current version.
    pub(super) async fn still_ours(&self, lease: &mut Lease) -> Result<bool> {
        let path = self.layout().lease(&lease.task.name);
        let (data, stat) = match self.client().get_data(&path).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(Error::zk("get", path, e)),
        };
        let ours = stat.czxid == lease.task.fencing_token
            && serde_json::from_slice::<LeaseData>(&data)
                .is_ok_and(|held| held.consumer_id == self.consumer_id());
        if ours {
            lease.lease_version = stat.version;
        }
        Ok(ours)
    }

    /// Deletes task and lease together, if the lease is still ours.
    pub async fn complete(&self, lease: Lease) -> Result<Settled> {
        let mut settled = self.complete_many(vec![lease]).await?;
        Ok(settled.pop().map_or(Settled::LeaseLost, |(_, s)| s))
    }

    /// Completes several held tasks in one multi-op, each delete checked as in
    /// [`Queue::complete`]; a task published with an idempotency key also marks its key
    /// completed and files it by when it expires; with `KEEP_DONE`, each leaves its completion
    /// record (see `done`). If one write fails, the multi-op changes
    /// nothing and names it: that lease is read again when only its version is off (and kept
    /// when it is still ours), else its task is reported lost or gone, and the rest are
    /// committed again without it. A key that is missing is left out.
    pub async fn complete_many(&self, mut leases: Vec<Lease>) -> Result<Vec<(String, Settled)>> {
        let mut settled = Vec::with_capacity(leases.len());
        let mut reread = std::collections::HashSet::new();
        let mut extras = self.completion_extras(&leases).await?;
        while !leases.is_empty() {
            let paths: Vec<(String, String)> = leases
                .iter()
                .map(|l| {
                    let name = &l.task.name;
                    (self.layout().task(name), self.layout().lease(name))
                })
                .collect();
            let (ops, owners) = completion_ops(&leases, &paths, &extras);
            let (index, error) = match self.commit("complete", &ops).await? {
                Ok(_) => {
                    settled.extend(leases.drain(..).map(|l| (l.task.name, Settled::Done)));
                    break;
                }
                Err((i, e @ (zk::Error::BadVersion | zk::Error::NoNode))) => (i, e),
                Err((i, zk::Error::NodeExists))
                    if matches!(owners[i].1, Part::Key | Part::Done | Part::DoneId) =>
                {
                    (i, zk::Error::NodeExists)
                }
                Err((i, e)) => return Err(Error::zk("complete", ops[i].path(), e)),
            };
            let (at, part) = owners[index];
            if self.leave_out(&mut extras[at], part, &leases[at].task.name, &error) {
                continue;
            }
            let lease = &mut leases[at];
            let on_lease = part == Part::Lease;
            if on_lease
                && error == zk::Error::BadVersion
                && reread.insert(lease.task.name.clone())
                && self.still_ours(lease).await?
            {
                continue;
            }
            let outcome = if !on_lease && error == zk::Error::NoNode {
                Settled::Gone
            } else {
                Settled::LeaseLost
            };
            let lost = leases.remove(at);
            extras.remove(at);
            match outcome {
                Settled::Gone => {
                    tracing::info!(task = %lost.task.name, "already gone: nothing to complete")
                }
                _ => {
                    tracing::warn!(task = %lost.task.name, fencing_token = lost.task.fencing_token, "lease lost before completing; nothing changed")
                }
            }
            settled.push((lost.task.name, outcome));
        }
        Ok(settled)
    }

    /// What completing each of `leases` writes besides deleting task and lease: its key marked
    /// completed, its group's lock released, its completion record.
    async fn completion_extras(&self, leases: &[Lease]) -> Result<Vec<Extras>> {
        let tasks: Vec<&Task> = leases.iter().map(|l| &l.task).collect();
        let (dones, keys) =
            futures::future::try_join(self.done_writes(leases), self.completed_keys(&tasks))
                .await?;
        let extras = leases.iter().zip(dones).zip(keys);
        Ok(extras
            .map(|((lease, done), key)| Extras {
                key,
                // A grouped task's lock goes with it: the group's next task may run.
                lock: lease.group_lock.clone(),
                done,
            })
            .collect())
    }

    /// Leaves out of a completion the `part` of one task that failed it, when the task can be
    /// completed without; `false` for its task or lease, which decide the task's outcome.
    fn leave_out(&self, extras: &mut Extras, part: Part, name: &str, error: &zk::Error) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match part {
            // A key named meanwhile by its publisher is still ours: at its new version. One
            // gone, taken by another task, or already filed: complete the task without it.
            // Its expiry bucket may have been swept: make sure of it next time.
            Part::Key => {
                extras.key = extras.key.take().and_then(|mut k| {
                    k.key = k.key.after_failure(error)?;
                    Some(k)
                });
                if extras.key.is_none() {
                    self.key_bucket.store(i64::MIN, Relaxed);
                }
            }
            // The lock changed hands (an operator resumed the group): not ours to delete.
            Part::Lock => extras.lock = None,
            // An earlier task with this id left its record within the window (a redriven
            // task, a producer's own id): that entry stays, this record goes in by name.
            Part::DoneId => {
                if let Some(done) = extras.done.as_mut() {
                    done.id_entry = None;
                }
            }
            // The record cannot be written: complete the task without it.
            Part::Done => {
                tracing::info!(task = %name, error = %error, "completed without a record");
                extras.done = None;
                self.done_bucket.store(i64::MIN, Relaxed);
            }
            Part::Task | Part::Lease => return false,
        }
        true
    }

    /// Gives a held task back: `error` becomes its last error, and it is not claimable again
    /// for `delay`: with a delay it waits under `delayed/` and comes back at the tail of
    /// `tasks/` under a new name; without one it stays where it is. With `count_attempt` false the claim is not counted (the run ran out of
    /// time before the handler finished, which says nothing about the task).
    pub async fn release(
        &self,
        lease: Lease,
        error: Option<String>,
        delay: Duration,
        now: &ZkTime,
        count_attempt: bool,
    ) -> Result<Settled> {
        let Lease {
            task,
            task_version,
            lease_version,
            group_lock,
            ..
        } = lease;
        let mut envelope = task.envelope;
        if !count_attempt {
            envelope.attempts = envelope.attempts.saturating_sub(1);
        }
        envelope.last_error = error.map(short).or(envelope.last_error);
        envelope.retry_at =
            (!delay.is_zero()).then(|| now.now_ms().saturating_add(crate::lease::millis(delay)));
        let body = match envelope.to_bytes() {
            Ok(body) => body,
            // The error made the body too large to write back: it cannot be retried.
            Err(Error::TooLarge { .. }) => {
                let lease = Lease {
                    task: Task { envelope, ..task },
                    task_version,
                    lease_version,
                    group_lock,
                    delivered: None,
                    slot: None,
                };
                return self
                    .bury(lease, "task too large to release for a retry", None)
                    .await;
            }
            Err(e) => return Err(e),
        };
        let due = envelope.retry_at;
        let mut lease = Lease {
            task: Task { envelope, ..task },
            task_version,
            lease_version,
            group_lock,
            delivered: None,
            slot: None,
        };
        // A backoff is waited out under `delayed/`, not at the head of `tasks/`.
        if let Some(due) = due {
            return self.release_until(&mut lease, &body, due).await;
        }
        let (task_path, lease_path) = (
            self.layout().task(&lease.task.name),
            self.layout().lease(&lease.task.name),
        );
        // Creating and deleting the cancel mark fails when it exists (see `cancel`).
        let mark = self.layout().cancel_mark(&lease.task.envelope.id);
        for first in [true, false, false] {
            let ops = [
                Op::Set(&task_path, &body, lease.task_version),
                Op::Delete(&lease_path, lease.lease_version),
                Op::Create(&mark, b""),
                Op::Delete(&mark, -1),
            ];
            match self.commit("release", &ops).await? {
                Ok(_) => return Ok(Settled::Done),
                Err((2, zk::Error::NodeExists)) => return Ok(Settled::Cancelled),
                Err((2, zk::Error::NoNode)) => {
                    self.ensure_parent(&self.layout().cancelled()).await?
                }
                Err((1, zk::Error::BadVersion)) if first && self.still_ours(&mut lease).await? => {}
                Err((0, zk::Error::NoNode)) => return Ok(Settled::Gone),
                Err((0, zk::Error::BadVersion)) if self.released(&lease).await? => {
                    return Ok(Settled::Gone);
                }
                Err((_, zk::Error::BadVersion | zk::Error::NoNode)) => {
                    return Ok(Settled::LeaseLost);
                }
                Err((i, e)) => return Err(Error::zk("release", ops[i].path(), e)),
            }
        }
        Ok(Settled::LeaseLost)
    }

    /// Whether `lease`'s task looks released by its holder already: the lease is gone and the
    /// task one write past the version the holder knew (a claim since would have left a lease).
    async fn released(&self, lease: &Lease) -> Result<bool> {
        let (task_path, lease_path) = (
            self.layout().task(&lease.task.name),
            self.layout().lease(&lease.task.name),
        );
        let lease_stat = self.client().check_stat(&lease_path);
        let task_stat = self.client().check_stat(&task_path);
        let lease_stat = lease_stat
            .await
            .map_err(|e| Error::zk("stat", &lease_path, e))?;
        let task_stat = task_stat
            .await
            .map_err(|e| Error::zk("stat", &task_path, e))?;
        Ok(lease_stat.is_none()
            && task_stat.is_some_and(|stat| stat.version == lease.task_version + 1))
    }

    /// Moves a held task to the dead letters with `reason`, atomically with removing task and
    /// lease, if the lease is still ours; a grouped task's group goes on unless the task asks
    /// to pause it ([`Queue::bury_with`] takes a route's word too).
    pub async fn bury(
        &self,
        lease: Lease,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<Settled> {
        let on_dead = lease.task.envelope.on_dead.unwrap_or_default();
        self.bury_with(lease, reason, last_error, on_dead).await
    }

    /// As [`Queue::bury`]; `on_dead` says what the task's group does.
    pub async fn bury_with(
        &self,
        lease: Lease,
        reason: &str,
        last_error: Option<String>,
        on_dead: OnDead,
    ) -> Result<Settled> {
        let task = &lease.task;
        // The record keeps a capped copy of the body, so no size check here.
        let body = serde_json::to_vec(&task.envelope)?;
        let (record_json, record) =
            self.dead_record(&task.name, &body, reason, task.attempt(), last_error);
        let (dead, task_path) = (
            self.layout().dead_letter(&task.name),
            self.layout().task(&task.name),
        );
        let lease_path = self.layout().lease(&task.name);
        // A dead task's idempotency key goes with it, if the key is still its own: the key may
        // be published again.
        let mut key = self.owned_key(&task.envelope).await?;
        let mut lock = match lease.group_lock.clone() {
            Some(held) => {
                Some(self.release_lock(held, &task.envelope.id, &task.name, on_dead, reason)?)
            }
            None => None,
        };
        let mut lease = lease.clone();
        let mut settled = Settled::LeaseLost;
        let mut first = true;
        // One try, and one more for each write that may be sent again: the key (twice: named
        // meanwhile, then gone), the lock, the lease.
        for _ in 0..5 {
            let mut ops = vec![
                Op::Create(&dead, &record),
                Op::Delete(&task_path, lease.task_version),
                Op::Delete(&lease_path, lease.lease_version),
            ];
            ops.extend(key.as_ref().map(OwnedKey::delete));
            ops.extend(lock.as_ref().map(Release::op));
            settled = match self.commit_bury(&ops, 0).await? {
                Ok(_) => Settled::Done,
                // A key or lock gone (or changed hands) meanwhile is no reason not to bury.
                Err((i, e @ (zk::Error::NoNode | zk::Error::BadVersion))) if i >= 3 => {
                    match (i, key.take()) {
                        (3, Some(owned)) => key = owned.after_failure(&e),
                        (_, owned) => (key, lock) = (owned, None),
                    }
                    continue;
                }
                Err((2, zk::Error::BadVersion)) if first && self.still_ours(&mut lease).await? => {
                    first = false;
                    continue;
                }
                Err((1, zk::Error::NoNode)) => Settled::Gone,
                Err((_, zk::Error::BadVersion | zk::Error::NoNode)) => Settled::LeaseLost,
                Err((i, e)) => return Err(Error::zk("bury", ops[i].path(), e)),
            };
            break;
        }
        let task = &lease.task;
        if settled == Settled::Done {
            tracing::warn!(task = %task.name, consumer = %self.consumer_id(), attempt = task.attempt(), reason, "task dead-lettered");
            self.forward_dead(&task.name, &record_json).await;
        }
        Ok(settled)
    }
}
