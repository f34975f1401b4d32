//! The queue's operations on ZooKeeper: publish, claim, extend, complete, release, bury.
//!
//! # Fencing
//!
//! A claim is one multi-op: create the lease, write it once more (so our leases are never at
//! version 0, which is where a lease of a 000-design consumer stays), and rewrite the task
//! with its attempt count raised, checked against the version just read. The task's new
//! version is the claim's *fencing token*: every claim raises it, and nothing lowers it.
//!
//! Every later write of the holder (extend, complete, release, bury) checks both the task's
//! version and the lease's version. If the lease expired, was reaped and another consumer
//! claimed the task, the lease znode has the same path, perhaps even the same version, but the
//! task's version has moved on, so the stale holder's write fails and changes nothing.

use std::time::Duration;

use serde_json::json;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::layout::{Layout, oldest_first};
use crate::lease::{self, LeaseData};
use crate::task::{self, Body, Envelope, Task};
use crate::zk::failed_at;
use crate::{Config, Error, Result};

/// Bodies larger than this are not copied whole into a dead-letter record (base64 would take
/// a binary one past ZooKeeper's 1 MiB packet limit); the record keeps a digest and the head.
const DEAD_BODY_LIMIT: usize = 256 * 1024;
const DEAD_BODY_HEAD: usize = 4 * 1024;

/// How long a copy to the SQS dead-letter queue may take before it is given up (logged; the
/// record stays in ZooKeeper).
const DEAD_LETTER_SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors stored in a task or a dead letter are cut to this many characters.
const ERROR_CHARS: usize = 2_000;

/// An error message cut to [`ERROR_CHARS`].
fn short(error: String) -> String {
    match error.char_indices().nth(ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &error[..cut]),
        None => error,
    }
}

/// How many creates a bulk publish keeps in flight.
const PUBLISH_WINDOW: usize = 1_000;

/// One queue on one ZooKeeper session.
#[derive(Clone, Debug)]
pub struct Queue {
    client: zk::Client,
    layout: Layout,
    consumer_id: String,
    lease_timeout: Duration,
    max_attempts: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    acls: zk::Acls<'static>,
    /// Where dead letters also go, if anywhere.
    dead_letter_queue: Option<std::sync::Arc<crate::sink::sqs::DeadLetterQueue>>,
}

/// A claimed task and what its holder needs to settle it. A clone settles nothing twice: the
/// second write finds the versions moved on and reports [`Settled::LeaseLost`].
#[derive(Clone, Debug)]
pub struct Lease {
    pub task: Task,
    task_version: i32,
    lease_version: i32,
}

/// What a claim came to. (It lives for one `match`; boxing the lease would buy nothing.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ClaimOutcome {
    /// The task is ours until we settle it or the lease expires.
    Claimed(Lease),
    /// Another consumer holds (or just took) the task.
    Taken,
    /// The task was completed or removed before we got to it.
    Gone,
    /// The task waits out a retry backoff until this ZooKeeper time.
    Backoff { until_ms: i64 },
    /// The task could never run (poison body, attempts used up) and went to the dead letters.
    Buried { reason: String },
}

/// Whether a holder's write took effect.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// The lease is no longer ours (expired and reaped, perhaps claimed again): nothing changed.
    LeaseLost,
}

/// A list of pending tasks, taken at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Unleased task names, oldest first.
    pub candidates: Vec<String>,
    /// All task names.
    pub depth: usize,
    /// Lease names.
    pub leased: usize,
}

impl Queue {
    /// A queue over `client` with `config`'s root and lease settings.
    pub fn new(client: zk::Client, config: &Config, consumer_id: impl Into<String>) -> Self {
        Queue {
            client,
            layout: Layout::new(&config.root),
            consumer_id: consumer_id.into(),
            lease_timeout: config.lease_timeout,
            max_attempts: config.max_attempts,
            backoff_base: config.backoff_base,
            backoff_max: config.backoff_max,
            acls: crate::zk::acls(config),
            dead_letter_queue: None,
        }
    }

    fn persistent(&self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(self.acls)
    }

    fn sequential(&self) -> zk::CreateOptions<'static> {
        zk::CreateMode::PersistentSequential.with_acls(self.acls)
    }

    /// A consumer id for this process: `<prefix>-<random>`.
    pub fn new_consumer_id(prefix: &str) -> String {
        let suffix: String = (0..8).map(|_| fastrand::alphanumeric()).collect();
        format!("{prefix}-{}", suffix.to_lowercase())
    }

    pub fn client(&self) -> &zk::Client {
        &self.client
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn consumer_id(&self) -> &str {
        &self.consumer_id
    }

    pub fn lease_timeout(&self) -> Duration {
        self.lease_timeout
    }

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Creates the root, `tasks`, `leases`, `dead` and `clock` when missing.
    pub async fn ensure_paths(&self) -> Result<()> {
        let paths = self.layout.base_paths();
        let creates: Vec<_> = paths
            .iter()
            .map(|p| self.client.create(p, b"", &self.persistent()))
            .collect();
        for (path, created) in paths.iter().zip(futures::future::join_all(creates).await) {
            match created {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(Error::zk("create", path, e)),
            }
        }
        Ok(())
    }

    /// Reads ZooKeeper's time by touching the `clock` znode.
    pub async fn server_time(&self) -> Result<ZkTime> {
        let path = self.layout.clock();
        let stat = self
            .client
            .set_data(&path, b"", None)
            .await
            .map_err(|e| Error::zk("set", path, e))?;
        Ok(ZkTime::from_mtime(stat.mtime))
    }

    /// Publishes one envelope; returns the task's name.
    pub async fn publish(&self, envelope: &Envelope) -> Result<String> {
        self.publish_raw(&envelope.to_bytes()?).await
    }

    /// Publishes a body as it is (any producer's JSON); returns the task's name.
    pub async fn publish_raw(&self, body: &[u8]) -> Result<String> {
        task::check_size(body)?;
        let prefix = self.layout.task_prefix();
        let (_, seq) = self
            .client
            .create(&prefix, body, &self.sequential())
            .await
            .map_err(|e| Error::zk("create", &prefix, e))?;
        Ok(format!("{}{seq}", crate::layout::TASK_PREFIX))
    }

    /// Publishes many envelopes pipelined, keeping their order; returns the task names.
    pub async fn publish_many(&self, envelopes: &[Envelope]) -> Result<Vec<String>> {
        let bodies = envelopes
            .iter()
            .map(Envelope::to_bytes)
            .collect::<Result<Vec<_>>>()?;
        let prefix = self.layout.task_prefix();
        let mut names = Vec::with_capacity(bodies.len());
        for window in bodies.chunks(PUBLISH_WINDOW) {
            let creates: Vec<_> = window
                .iter()
                .map(|b| self.client.create(&prefix, b, &self.sequential()))
                .collect();
            for created in futures::future::join_all(creates).await {
                let (_, seq) = created.map_err(|e| Error::zk("create", &prefix, e))?;
                names.push(format!("{}{seq}", crate::layout::TASK_PREFIX));
            }
        }
        Ok(names)
    }

    /// Lists leases, then tasks, in one round trip. Leases first: a lease only exists for a
    /// task that exists, so a lease whose task is missing from the later list is an orphan.
    pub async fn list(&self) -> Result<(Vec<String>, Vec<String>)> {
        let (leases_path, tasks_path) = (self.layout.leases(), self.layout.tasks());
        let leases = self.client.list_children(&leases_path);
        let tasks = self.client.list_children(&tasks_path);
        let leases = leases
            .await
            .map_err(|e| Error::zk("list", &leases_path, e))?;
        let tasks = tasks.await.map_err(|e| Error::zk("list", &tasks_path, e))?;
        Ok((leases, tasks))
    }

    /// The unleased tasks, oldest first.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let (leases, tasks) = self.list().await?;
        let depth = tasks.len();
        let leased: std::collections::HashSet<&str> = leases.iter().map(String::as_str).collect();
        let free = tasks
            .into_iter()
            .filter(|t| !leased.contains(t.as_str()))
            .collect();
        Ok(Snapshot {
            candidates: oldest_first(free),
            depth,
            leased: leases.len(),
        })
    }

    /// Number of children of `path`, from its stat.
    pub async fn count(&self, path: &str) -> Result<usize> {
        match self.client.check_stat(path).await {
            Ok(stat) => Ok(stat.map_or(0, |s| s.num_children as usize)),
            Err(e) => Err(Error::zk("stat", path, e)),
        }
    }

    /// Tries to claim task `name`. Losing the race is [`ClaimOutcome::Taken`], not an error.
    pub async fn claim(&self, name: &str, now: &ZkTime) -> Result<ClaimOutcome> {
        let path = self.layout.task(name);
        match self.client.get_data(&path).await {
            Ok((body, stat)) => self.claim_read(name, &body, &stat, now).await,
            Err(zk::Error::NoNode) => Ok(ClaimOutcome::Gone),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Reads tasks in one request (a multi-read); `None` for a task that is gone.
    pub async fn read_tasks(&self, names: &[String]) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = self.client.new_multi_reader();
        for name in names {
            let path = self.layout.task(name);
            reader
                .add_get_data(&path)
                .map_err(|e| Error::zk("get", path, e))?;
        }
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", self.layout.tasks(), e))?;
        names
            .iter()
            .zip(results)
            .map(|(name, result)| match result {
                zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => {
                    Err(Error::zk("get", self.layout.task(name), err))
                }
                other => {
                    let msg = format!("multi-read returned {other:?}");
                    Err(Error::zk(
                        "get",
                        self.layout.task(name),
                        zk::Error::UnexpectedError(msg),
                    ))
                }
            })
            .collect()
    }

    /// Claims task `name` whose body and stat were just read.
    pub async fn claim_read(
        &self,
        name: &str,
        body: &[u8],
        stat: &zk::Stat,
        now: &ZkTime,
    ) -> Result<ClaimOutcome> {
        let mut envelope = match task::parse(body) {
            Body::Envelope(envelope) => envelope,
            Body::Plain(value) => Envelope::from_plain(name, value, stat.ctime),
            Body::Poison(reason) => {
                return self
                    .bury_unclaimed(name, body, stat.version, 0, reason, None)
                    .await;
            }
        };
        if let Some(until_ms) = envelope.retry_at.filter(|at| *at > now.now_ms()) {
            return Ok(ClaimOutcome::Backoff { until_ms });
        }
        if envelope.attempts >= self.max_attempts {
            let reason = format!("gave up after {} attempts", envelope.attempts);
            let last = envelope.last_error.clone();
            return self
                .bury_unclaimed(name, body, stat.version, envelope.attempts, reason, last)
                .await;
        }
        envelope.attempts += 1;
        envelope.retry_at = None;
        match envelope.to_bytes() {
            Ok(rewritten) => self.take(name, envelope, &rewritten, stat.version).await,
            // A body near ZooKeeper's limit (a plain body grows when wrapped) cannot be
            // rewritten, so it can never be claimed: it is poison.
            Err(Error::TooLarge { size, limit }) => {
                let reason = format!(
                    "task too large to claim: {size} bytes with its envelope, over {limit}"
                );
                self.bury_unclaimed(
                    name,
                    body,
                    stat.version,
                    envelope.attempts - 1,
                    reason,
                    None,
                )
                .await
            }
            Err(e) => Err(e),
        }
    }

    /// The claim's multi-op: lease created and bumped to version 1, task rewritten.
    async fn take(
        &self,
        name: &str,
        envelope: Envelope,
        body: &[u8],
        read_version: i32,
    ) -> Result<ClaimOutcome> {
        let token = read_version as i64 + 1;
        let lease_data = LeaseData::new(&self.consumer_id, token).to_bytes();
        let (task_path, lease_path) = (self.layout.task(name), self.layout.lease(name));
        let mut multi = self.client.new_multi_writer();
        multi
            .add_create(&lease_path, &lease_data, &self.persistent())
            .map_err(|e| Error::zk("claim", &lease_path, e))?;
        multi
            .add_set_data(&lease_path, &lease_data, Some(0))
            .map_err(|e| Error::zk("claim", &lease_path, e))?;
        multi
            .add_set_data(&task_path, body, Some(read_version))
            .map_err(|e| Error::zk("claim", &task_path, e))?;
        let results = match multi.commit().await {
            Ok(results) => results,
            Err(e) => return claim_failure(&e, &lease_path),
        };
        let (lease_version, task_version) = match results.as_slice() {
            [
                _,
                zk::MultiWriteResult::SetData { stat: l },
                zk::MultiWriteResult::SetData { stat: t },
            ] => (l.version, t.version),
            other => {
                let msg = format!("claim returned {other:?}");
                return Err(Error::zk(
                    "claim",
                    lease_path,
                    zk::Error::UnexpectedError(msg),
                ));
            }
        };
        let task = Task {
            name: name.to_string(),
            envelope,
            fencing_token: task_version as i64,
        };
        Ok(ClaimOutcome::Claimed(Lease {
            task,
            task_version,
            lease_version,
        }))
    }

    /// Buries a task nobody holds: lease created and deleted in the same multi-op, so it
    /// fails if someone holds the task, and the task deleted at the version we read.
    async fn bury_unclaimed(
        &self,
        name: &str,
        body: &[u8],
        version: i32,
        attempts: u32,
        reason: String,
        last_error: Option<String>,
    ) -> Result<ClaimOutcome> {
        let record_json = self.dead_record(name, body, &reason, attempts, last_error);
        let record = serde_json::to_vec(&record_json)?;
        let lease_data = LeaseData::new(&self.consumer_id, version as i64 + 1).to_bytes();
        let lease_path = self.layout.lease(name);
        let ops = [
            Op::Create(&lease_path, &lease_data),
            Op::Create(&self.layout.dead_letter(name), &record),
            Op::Delete(&self.layout.task(name), version),
            Op::Delete(&lease_path, -1),
        ];
        match self.commit("bury", &ops).await? {
            Ok(_) => {
                tracing::warn!(task = %name, consumer = %self.consumer_id, attempts, %reason, "task dead-lettered");
                self.forward_dead(name, &record_json).await;
                Ok(ClaimOutcome::Buried { reason })
            }
            Err((0, zk::Error::NodeExists)) | Err((2, zk::Error::BadVersion)) => {
                Ok(ClaimOutcome::Taken)
            }
            Err((2, zk::Error::NoNode)) => Ok(ClaimOutcome::Gone),
            Err((i, e)) => Err(Error::zk("bury", ops[i].path(), e)),
        }
    }

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
        let (task_path, lease_path) = (self.layout.task(name), self.layout.lease(name));
        let data = LeaseData::new(&self.consumer_id, lease.task.fencing_token).to_bytes();
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

    /// Whether the lease znode still holds our consumer id and this claim's fencing token; if
    /// so, `lease` takes its current version.
    async fn still_ours(&self, lease: &mut Lease) -> Result<bool> {
        let path = self.layout.lease(&lease.task.name);
        let (data, stat) = match self.client.get_data(&path).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(Error::zk("get", path, e)),
        };
        let ours = serde_json::from_slice::<LeaseData>(&data).is_ok_and(|held| {
            held.consumer_id == self.consumer_id
                && held.fencing_token == Some(lease.task.fencing_token)
        });
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
    /// [`Queue::complete`]. If one lease was lost, the multi-op changes nothing and names it;
    /// that task is reported lost and the rest are committed again without it.
    pub async fn complete_many(&self, mut leases: Vec<Lease>) -> Result<Vec<(String, Settled)>> {
        let mut settled = Vec::with_capacity(leases.len());
        while !leases.is_empty() {
            let paths: Vec<(String, String)> = leases
                .iter()
                .map(|l| {
                    (
                        self.layout.task(&l.task.name),
                        self.layout.lease(&l.task.name),
                    )
                })
                .collect();
            let ops: Vec<Op> = leases
                .iter()
                .zip(&paths)
                .flat_map(|(l, (task, lease))| {
                    [
                        Op::Delete(task, l.task_version),
                        Op::Delete(lease, l.lease_version),
                    ]
                })
                .collect();
            match self.commit("complete", &ops).await? {
                Ok(_) => settled.extend(leases.drain(..).map(|l| (l.task.name, Settled::Done))),
                Err((i, zk::Error::BadVersion | zk::Error::NoNode)) => {
                    let lost = leases.remove(i / 2);
                    tracing::warn!(task = %lost.task.name, fencing_token = lost.task.fencing_token, "lease lost before completing; nothing changed");
                    settled.push((lost.task.name, Settled::LeaseLost));
                }
                Err((i, e)) => return Err(Error::zk("complete", ops[i].path(), e)),
            }
        }
        Ok(settled)
    }

    /// Gives a held task back: `error` becomes its last error, and it is not claimable again
    /// for `delay`. With `count_attempt` false the claim is not counted (the run ran out of
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
        } = lease;
        let mut envelope = task.envelope;
        if !count_attempt {
            envelope.attempts = envelope.attempts.saturating_sub(1);
        }
        envelope.last_error = error.map(short).or(envelope.last_error);
        envelope.retry_at = (!delay.is_zero()).then(|| now.now_ms() + delay.as_millis() as i64);
        let body = match envelope.to_bytes() {
            Ok(body) => body,
            // The error made the body too large to write back: it cannot be retried.
            Err(Error::TooLarge { .. }) => {
                let lease = Lease {
                    task: Task { envelope, ..task },
                    task_version,
                    lease_version,
                };
                return self
                    .bury(lease, "task too large to release for a retry", None)
                    .await;
            }
            Err(e) => return Err(e),
        };
        let ops = [
            Op::Set(&self.layout.task(&task.name), &body, task_version),
            Op::Delete(&self.layout.lease(&task.name), lease_version),
        ];
        self.settle("release", &ops).await
    }

    /// The longest backoff.
    pub fn backoff_max(&self) -> Duration {
        self.backoff_max
    }

    /// The backoff before the next claim of a task that failed on `attempt`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        lease::backoff(attempt, self.backoff_base, self.backoff_max)
    }

    /// Moves a held task to the dead letters with `reason`, atomically with removing task and
    /// lease, if the lease is still ours.
    pub async fn bury(
        &self,
        lease: Lease,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<Settled> {
        let task = &lease.task;
        // The record keeps a capped copy of the body, so no size check here.
        let body = serde_json::to_vec(&task.envelope)?;
        let record_json = self.dead_record(&task.name, &body, reason, task.attempt(), last_error);
        let record = serde_json::to_vec(&record_json)?;
        let ops = [
            Op::Create(&self.layout.dead_letter(&task.name), &record),
            Op::Delete(&self.layout.task(&task.name), lease.task_version),
            Op::Delete(&self.layout.lease(&task.name), lease.lease_version),
        ];
        let settled = self.settle("bury", &ops).await?;
        if settled == Settled::Done {
            tracing::warn!(task = %task.name, consumer = %self.consumer_id, attempt = task.attempt(), reason, "task dead-lettered");
            self.forward_dead(&task.name, &record_json).await;
        }
        Ok(settled)
    }

    /// A dead-letter record: why, how often, the last error, and the body as it was.
    fn dead_record(
        &self,
        name: &str,
        body: &[u8],
        reason: &str,
        attempts: u32,
        last_error: Option<String>,
    ) -> serde_json::Value {
        let mut record = json!({
            "task": name,
            "reason": reason,
            "attempts": attempts,
            "last_error": last_error.map(short),
            "dead_at": chrono::Utc::now(),
            "consumer_id": self.consumer_id,
        });
        if body.len() > DEAD_BODY_LIMIT {
            // Keep the record well under ZooKeeper's packet limit: a digest and the head.
            use sha2::Digest as _;
            record["body_omitted"] = json!({
                "bytes": body.len(),
                "sha256": hex::encode(sha2::Sha256::digest(body)),
                "head": String::from_utf8_lossy(&body[..DEAD_BODY_HEAD]),
            });
            return record;
        }
        match std::str::from_utf8(body) {
            Ok(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(value) => record["body"] = value,
                Err(_) => record["body_text"] = text.into(),
            },
            Err(_) => {
                use base64::Engine as _;
                record["body_base64"] = base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .into();
            }
        }
        record
    }

    /// Also sends a dead letter to the SQS dead-letter queue, when there is one. The record
    /// stays under `ROOT/dead` either way, so a failed send loses nothing: it is logged.
    async fn forward_dead(&self, name: &str, record: &serde_json::Value) {
        let Some(dlq) = &self.dead_letter_queue else {
            return;
        };
        // Bounded, so an unreachable SQS cannot eat an invocation's deadline.
        let sent = tokio::time::timeout(DEAD_LETTER_SEND_TIMEOUT, dlq.send(name, record)).await;
        let error = match sent {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {DEAD_LETTER_SEND_TIMEOUT:?}"),
        };
        tracing::warn!(task = %name, queue = dlq.queue_url(), %error,
            "dead letter not sent to the SQS dead-letter queue; it stays in ZooKeeper");
    }

    /// Sends every dead letter to `dlq` too (`DEAD_LETTER_QUEUE_URL`).
    pub fn with_dead_letter_queue(mut self, dlq: crate::sink::sqs::DeadLetterQueue) -> Self {
        self.dead_letter_queue = Some(std::sync::Arc::new(dlq));
        self
    }

    /// Commits a holder's multi-op: a version or existence failure means the lease is lost.
    async fn settle(&self, what: &'static str, ops: &[Op<'_>]) -> Result<Settled> {
        match self.commit(what, ops).await? {
            Ok(_) => Ok(Settled::Done),
            Err((_, zk::Error::BadVersion | zk::Error::NoNode)) => Ok(Settled::LeaseLost),
            Err((i, e)) => Err(Error::zk(what, ops[i].path(), e)),
        }
    }

    /// Commits `ops`; an operation's failure comes back as a value with its index.
    pub(crate) async fn commit(
        &self,
        what: &'static str,
        ops: &[Op<'_>],
    ) -> Result<std::result::Result<Vec<zk::MultiWriteResult>, (usize, zk::Error)>> {
        let mut multi = self.client.new_multi_writer();
        for op in ops {
            let added = match *op {
                Op::Create(path, data) => multi.add_create(path, data, &self.persistent()),
                Op::CreateSequential(path, data) => {
                    multi.add_create(path, data, &self.sequential())
                }
                Op::Set(path, data, version) => multi.add_set_data(path, data, Some(version)),
                Op::Delete(path, version) => {
                    multi.add_delete(path, (version >= 0).then_some(version))
                }
                Op::Check(path, version) => multi.add_check_version(path, version),
            };
            added.map_err(|e| Error::zk(what, op.path(), e))?;
        }
        match multi.commit().await {
            Ok(results) => Ok(Ok(results)),
            Err(e) => match failed_at(&e) {
                Some((index, source)) => Ok(Err((index, source.clone()))),
                None => Err(Error::zk(what, ops[0].path(), e)),
            },
        }
    }
}

/// One write of a multi-op. A version of -1 means any version.
pub(crate) enum Op<'a> {
    Create(&'a str, &'a [u8]),
    CreateSequential(&'a str, &'a [u8]),
    Set(&'a str, &'a [u8], i32),
    Delete(&'a str, i32),
    Check(&'a str, i32),
}

impl Op<'_> {
    pub(crate) fn path(&self) -> &str {
        match *self {
            Op::Create(p, _)
            | Op::CreateSequential(p, _)
            | Op::Set(p, _, _)
            | Op::Delete(p, _)
            | Op::Check(p, _) => p,
        }
    }
}

fn claim_failure(err: &zk::MultiWriteError, lease_path: &str) -> Result<ClaimOutcome> {
    match failed_at(err) {
        Some((0, zk::Error::NodeExists)) | Some((2, zk::Error::BadVersion)) => {
            Ok(ClaimOutcome::Taken)
        }
        Some((2, zk::Error::NoNode)) => Ok(ClaimOutcome::Gone),
        _ => Err(Error::zk("claim", lease_path, err.clone())),
    }
}
