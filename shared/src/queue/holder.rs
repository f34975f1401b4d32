//! What the holder of a lease does while it runs its task and after: extend the lease,
//! release the task for another run (completing is in `complete`, burying in `bury`). Each
//! write checks the task's and the lease's versions (see the module documentation of
//! [`crate::queue`]).
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
use super::delay::waiting_name;
use super::end::push_write;
use super::group_lock::LockWrite;
use super::held::{Lease, Settled};
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::record::short;
use super::write::{Next, Read, Tries, Write};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::feature::{AfterFailure, EndWrite};
use crate::layout::delay_bucket_of;
use crate::lease::LeaseData;
use crate::resume::store::Unwritten;

impl Queue {
    /// Refreshes a held lease (its `mtime` and `timestamp`), if it is still ours, writing the
    /// handler's latest progress (`lease.task.progress`) into it, and a resumable handler's
    /// record (`lease.task.steps`) into the task's body when it changed since the last write:
    /// a step's checkpoint is this write, in the same multi-op.
    pub async fn extend(&self, lease: &mut Lease) -> Result<Settled> {
        match self.try_extend(lease).await? {
            // The lease's version moved: an earlier extension whose reply was lost may have
            // landed. If the lease still carries our id and token, it is ours: catch up, retry.
            Err(Part::Lease) if self.still_ours(lease).await? => {
                match self.try_extend(lease).await? {
                    Ok(()) => Ok(Settled::Done),
                    Err(_) => Ok(Settled::LeaseLost),
                }
            }
            // The task's version moved: an earlier extension that wrote the record may have
            // landed, its reply lost. The task then holds that record, and the lease is ours.
            Err(Part::Task)
                if record_landed(self, lease).await? && self.still_ours(lease).await? =>
            {
                match self.try_extend(lease).await? {
                    Ok(()) => Ok(Settled::Done),
                    Err(_) => Ok(Settled::LeaseLost),
                }
            }
            Ok(()) => Ok(Settled::Done),
            Err(_) => Ok(Settled::LeaseLost),
        }
    }

    /// One extension; a fencing failure comes back as what failed it (the task moved on, or
    /// the lease's version differs).
    async fn try_extend(&self, lease: &mut Lease) -> Result<std::result::Result<(), Part>> {
        let name = &lease.task.name;
        let (task_path, lease_path) = (self.layout().task(name), self.layout().lease(name));
        // The handler's latest progress rides in the write the extension makes anyway.
        let data = LeaseData::new(self.consumer_id())
            .with_progress(lease.task.progress.latest())
            .to_bytes();
        let write = lease.task.steps.unwritten();
        let body = match &write {
            Some(write) => Some(with_record(&lease.task.envelope, &write.record)?),
            None => None,
        };
        let chunk = self
            .chunk_of(&lease.task.envelope.id, write.as_ref())
            .await?;
        let mut multi = Multi::new();
        match &body {
            Some(body) => multi.push(Part::Task, Op::Set(&task_path, body, lease.task_version)),
            None => multi.push(Part::Task, Op::Check(&task_path, lease.task_version)),
        };
        multi.push(
            Part::Lease,
            Op::Set(&lease_path, &data, lease.lease_version),
        );
        if let Some((path, data)) = &chunk {
            multi.push(Part::Steps, Op::Create(path, data));
        }
        match self.commit("extend", &multi).await? {
            Ok(results) => {
                if let Some(zk::MultiWriteResult::SetData { stat }) =
                    multi.result(&results, Part::Lease)
                {
                    lease.lease_version = stat.version;
                }
                if let (Some(zk::MultiWriteResult::SetData { stat }), Some(write)) =
                    (multi.result(&results, Part::Task), write)
                {
                    lease.task_version = stat.version;
                    lease.task.envelope.resume = Some(write.record.clone());
                    lease.task.steps.wrote(&write);
                }
                tracing::debug!(task = %name, fencing_token = lease.task.fencing_token, "lease extended");
                Ok(Ok(()))
            }
            Err(failed) if matches!(failed.error, zk::Error::BadVersion | zk::Error::NoNode) => {
                Ok(Err(failed.tag))
            }
            Err(failed) => Err(failed.unexpected("extend")),
        }
    }

    /// The step znode `write` stores (its path and bytes) for the task whose envelope id is
    /// `id`, when it stores entries; its folder is made first when it is the task's first.
    async fn chunk_of(
        &self,
        id: &str,
        write: Option<&Unwritten>,
    ) -> Result<Option<(String, Vec<u8>)>> {
        let Some(write) = write else { return Ok(None) };
        let Some(data) = write.chunk_bytes()? else {
            return Ok(None);
        };
        if write.first == 0 {
            self.ensure_steps_folder(id).await?;
        }
        Ok(Some((self.layout().step_chunk(id, write.first), data)))
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

    /// Gives a held task back for another run as `back` says: `back.error` becomes its last
    /// error, and it is not claimable again before `back.due_ms` ([`GiveBack::after`]). Due
    /// later, it waits under `delayed/` and comes back at the tail of `tasks/` under a new
    /// name; due now, it stays where it is. With `count_attempt` false the claim is not counted (a run's deadline came before the
    /// handler finished, which says nothing about the task). One multi-op either way: the task
    /// rewritten (or moved under `delayed/`) and the lease deleted, both version-checked, with
    /// the writes registered features add (`Feature::at_release`): a feature that answers its
    /// write's failure with `AfterFailure::Cancelled` keeps the task from being given back
    /// ([`Settled::Cancelled`]; its holder buries it), as cancel marks do.
    ///
    /// A resumable handler's record goes with it, and the writes a feature adds (`back.extra`:
    /// a wait's registrations, a signal consumed) in the same multi-op; when one of those fails
    /// nothing changed ([`Settled::Raced`]).
    pub async fn release(&self, lease: Lease, back: GiveBack) -> Result<Settled> {
        let mut lease = Lease {
            delivered: None,
            slots: Vec::new(),
            ..lease
        };
        let write = lease.task.steps.record();
        let chunk = (self.chunk_of(&lease.task.envelope.id, write.as_ref())).await?;
        let envelope = &mut lease.task.envelope;
        if !back.count_attempt {
            envelope.attempts = envelope.attempts.saturating_sub(1);
        }
        envelope.last_error = back.error.map(short).or(envelope.last_error.take());
        envelope.retry_at = back.due_ms;
        if let Some(write) = write {
            envelope.resume = Some(write.record);
        }
        let body = match envelope.to_bytes() {
            Ok(body) => body,
            // The error made the body too large to write back: it cannot be retried.
            Err(Error::TooLarge { .. }) => {
                let reason = "task too large to release for a retry";
                return self.bury(lease, reason, None).await;
            }
            Err(e) => return Err(e),
        };
        let name = lease.task.name.clone();
        let (task_path, lease_path) = (self.layout().task(&name), self.layout().lease(&name));
        let features = self.features().at_release(self.layout(), &lease.task);
        // A backoff is waited out under `delayed/`, not at the head of `tasks/`.
        let due = lease.task.envelope.retry_at;
        let node = due.map(|due| (delay_bucket_of(due), waiting_name(due, &name)));
        let lock = match (&node, &lease.group_lock) {
            (Some((bucket, node)), Some(held)) => {
                let (id, name) = (&lease.task.envelope.id, &lease.task.name);
                Some(self.groups().waiting_lock(held, id, name, *bucket, node)?)
            }
            _ => None,
        };
        let waiting =
            node.map(|(bucket, node)| (bucket, self.layout().delayed_task(bucket, &node)));
        super::write::run(
            self,
            Release {
                lease,
                body,
                task_path,
                lease_path,
                features,
                waiting,
                lock,
                reread: false,
                extra: back.extra,
                chunk,
            },
        )
        .await
    }
}

/// How a held task is given back ([`Queue::release`]).
#[derive(Clone, Debug, Default)]
pub struct GiveBack {
    /// Its last error, from now on.
    pub error: Option<String>,
    /// When it is due again (ZooKeeper time, ms): it waits under `delayed/` until then; none,
    /// it stays where it is, claimable at once.
    pub due_ms: Option<i64>,
    /// Whether the claim counts as an attempt.
    pub count_attempt: bool,
    /// Writes a feature adds to the multi-op.
    pub(crate) extra: Vec<Extra>,
}

/// A write a feature adds to a release's multi-op.
#[derive(Clone, Debug)]
pub(crate) enum Extra {
    /// The znode is at this version.
    Check(String, i32),
    Create(String, Vec<u8>),
    /// The znode exists, and is deleted.
    Delete(String),
}

impl GiveBack {
    /// Given back with `error`, due again `delay` after `now` (in place when zero), the claim
    /// counted as an attempt or not.
    pub fn after(
        error: Option<String>,
        delay: Duration,
        now: &ZkTime,
        count_attempt: bool,
    ) -> Self {
        GiveBack {
            error,
            due_ms: (!delay.is_zero())
                .then(|| now.now_ms().saturating_add(crate::lease::millis(delay))),
            count_attempt,
            extra: Vec::new(),
        }
    }
}

impl Extra {
    fn op(&self) -> Op<'_> {
        match self {
            Extra::Check(path, version) => Op::Check(path, *version),
            Extra::Create(path, data) => Op::Create(path, data),
            Extra::Delete(path) => Op::Delete(path, -1),
        }
    }
}

/// Whether `lease`'s task looks released by its holder already: the lease is gone and the
/// task one write past the version the holder knew (a claim since would have left a lease).
async fn released(queue: &Queue, lease: &Lease) -> Result<bool> {
    let (task_path, lease_path) = (
        queue.layout().task(&lease.task.name),
        queue.layout().lease(&lease.task.name),
    );
    let lease_stat = queue.client().check_stat(&lease_path);
    let task_stat = queue.client().check_stat(&task_path);
    let lease_stat = lease_stat
        .await
        .map_err(|e| Error::zk("stat", &lease_path, e))?;
    let task_stat = task_stat
        .await
        .map_err(|e| Error::zk("stat", &task_path, e))?;
    Ok(
        lease_stat.is_none()
            && task_stat.is_some_and(|stat| stat.version == lease.task_version + 1),
    )
}

/// Whether the task holds the record an extension whose reply was lost wrote; if so,
/// `lease` takes the task's version and the record counts as written.
async fn record_landed(queue: &Queue, lease: &mut Lease) -> Result<bool> {
    let Some(write) = lease.task.steps.unwritten() else {
        return Ok(false);
    };
    let path = queue.layout().task(&lease.task.name);
    let (data, stat) = match queue.client().get_data(&path).await {
        Ok(read) => read,
        Err(zk::Error::NoNode) => return Ok(false),
        Err(e) => return Err(Error::zk("get", path, e)),
    };
    if data != with_record(&lease.task.envelope, &write.record)? {
        return Ok(false);
    }
    lease.task_version = stat.version;
    lease.task.envelope.resume = Some(write.record.clone());
    lease.task.steps.wrote(&write);
    Ok(true)
}

/// `envelope` with `record` as its resumable handler's record, as bytes.
fn with_record(
    envelope: &crate::task::Envelope,
    record: &crate::resume::Record,
) -> Result<Vec<u8>> {
    let mut envelope = envelope.clone();
    envelope.resume = Some(record.clone());
    envelope.to_bytes()
}

/// A held task given back: rewritten in place, or moved under `delayed/` (`waiting`: its due
/// bucket and path there), its lease deleted, with the writes features add.
struct Release {
    lease: Lease,
    body: Vec<u8>,
    task_path: String,
    lease_path: String,
    /// The writes registered features add, each with the feature's index.
    features: Vec<(usize, EndWrite)>,
    waiting: Option<(i64, String)>,
    /// The group's lock told where the task waits, when it holds one and waits.
    lock: Option<LockWrite>,
    /// Whether the lease was read again once already.
    reread: bool,
    /// Writes a feature added.
    extra: Vec<Extra>,
    /// The step znode the record's write stores, if any (its path and bytes).
    chunk: Option<(String, Vec<u8>)>,
}

impl Write for Release {
    type Tag = Part;
    type Out = Settled;
    const WHAT: &'static str = "release";
    const TRIES: Tries = Tries::Few;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Settled>> {
        if let Some((bucket, _)) = &self.waiting {
            queue.delays().ensure_bucket(*bucket).await?;
        }
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        let version = self.lease.task_version;
        match &self.waiting {
            Some((_, path)) => multi
                .push(Part::Waiting, Op::Create(path, &self.body))
                .push(Part::Task, Op::Delete(&self.task_path, version)),
            None => multi.push(Part::Task, Op::Set(&self.task_path, &self.body, version)),
        };
        multi.push(
            Part::Lease,
            Op::Delete(&self.lease_path, self.lease.lease_version),
        );
        for (k, (_, write)) in self.features.iter().enumerate() {
            push_write(multi, Part::Feature(k as u16), write);
        }
        if let Some(lock) = &self.lock {
            multi.push(Part::Lock, Op::Set(&lock.path, &lock.data, lock.version));
        }
        for extra in &self.extra {
            multi.push(Part::Signal, extra.op());
        }
        if let Some((path, data)) = &self.chunk {
            multi.push(Part::Steps, Op::Create(path, data));
        }
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<Settled> {
        Ok(Settled::Done)
    }

    async fn failed(&mut self, queue: &Queue, failed: Failed<Part>) -> Result<Next<Settled>> {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        // Our lease's version moved: an extension whose reply was lost may have landed.
        if (failed.tag, &failed.error) == (Part::Lease, &BadVersion)
            && !std::mem::replace(&mut self.reread, true)
            && queue.still_ours(&mut self.lease).await?
        {
            return Ok(Next::Again);
        }
        let settled = match (failed.tag, &failed.error) {
            (Part::Signal, _) => Settled::Raced,
            (Part::Feature(k), _) => {
                let (at, write) = &self.features[usize::from(k)];
                match queue.features().after_failure(*at, write, &failed.error) {
                    AfterFailure::Cancelled => Settled::Cancelled,
                    AfterFailure::Unexpected => return Err(failed.unexpected(Self::WHAT)),
                    answer => {
                        answer.apply(&mut self.features, usize::from(k));
                        return Ok(Next::Again);
                    }
                }
            }
            // The bucket was promoted away between its creation and this: once more.
            (Part::Waiting, NoNode) => return Ok(Next::Again),
            // The lock changed hands (an operator unpaused the group): not ours to write.
            (Part::Lock, BadVersion | NoNode) => {
                self.lock = None;
                return Ok(Next::Again);
            }
            // Our own earlier try landed (same due, same task), or the task is gone.
            (Part::Waiting, NodeExists) | (Part::Task, NoNode) => Settled::Gone,
            (Part::Task, BadVersion)
                if self.waiting.is_none() && released(queue, &self.lease).await? =>
            {
                Settled::Gone
            }
            (Part::Task | Part::Lease, BadVersion | NoNode) => Settled::LeaseLost,
            _ => return Err(failed.unexpected(Self::WHAT)),
        };
        Ok(Next::Stop(settled))
    }

    fn exhausted(&self) -> Result<Settled> {
        Ok(Settled::LeaseLost)
    }
}
