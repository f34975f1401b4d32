//! Taking a task: the claim's multi-op, and burying a task nobody can claim (a poison body,
//! attempts used up).

use zookeeper_client as zk;

use super::Queue;
use super::ops::Op;
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::lease::LeaseData;
use crate::task::{self, Body, Envelope, Task, json};

/// A claimed task and what its holder needs to settle it. A clone settles nothing twice: the
/// second write finds the versions moved on and reports [`super::Settled::LeaseLost`].
#[derive(Clone, Debug)]
pub struct Lease {
    pub task: Task,
    pub(super) task_version: i32,
    pub(super) lease_version: i32,
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

impl Queue {
    /// Tries to claim task `name`. Losing the race is [`ClaimOutcome::Taken`], not an error.
    pub async fn claim(&self, name: &str, now: &ZkTime) -> Result<ClaimOutcome> {
        let path = self.layout().task(name);
        match self.client().get_data(&path).await {
            Ok((body, stat)) => self.claim_read(name, &body, &stat, now).await,
            Err(zk::Error::NoNode) => Ok(ClaimOutcome::Gone),
            Err(e) => Err(Error::zk("get", path, e)),
        }
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
            // Its envelope nests it one level deeper: past the limit it could not be read back.
            Body::Plain(_) if json::depth(body) >= json::MAX_DEPTH => {
                let reason = format!(
                    "body is nested {} levels deep: in its envelope it would pass the limit of {}",
                    json::depth(body),
                    json::MAX_DEPTH
                );
                return self
                    .bury_unclaimed(name, body, stat.version, 0, reason, None)
                    .await;
            }
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
        if envelope.attempts >= self.max_attempts() {
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
                let attempts = envelope.attempts - 1;
                self.bury_unclaimed(name, body, stat.version, attempts, reason, None)
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
        let lease_data = LeaseData::new(self.consumer_id()).to_bytes();
        let (task_path, lease_path) = (self.layout().task(name), self.layout().lease(name));
        let ops = [
            Op::Create(&lease_path, &lease_data),
            Op::Set(&lease_path, &lease_data, 0),
            Op::Set(&task_path, body, read_version),
        ];
        let results = match self.commit("claim", &ops).await? {
            Ok(results) => results,
            Err((0, zk::Error::NodeExists)) | Err((2, zk::Error::BadVersion)) => {
                return Ok(ClaimOutcome::Taken);
            }
            Err((2, zk::Error::NoNode)) => return Ok(ClaimOutcome::Gone),
            Err((i, e)) => return Err(Error::zk("claim", ops[i].path(), e)),
        };
        // The lease's `czxid` is the claim's zxid: the fencing token.
        let (lease_version, task_version, token) = match results.as_slice() {
            [
                _,
                zk::MultiWriteResult::SetData { stat: l },
                zk::MultiWriteResult::SetData { stat: t },
            ] => (l.version, t.version, l.czxid),
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
            fencing_token: token,
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
        let (record_json, record) = self.dead_record(name, body, &reason, attempts, last_error);
        let lease_data = LeaseData::new(self.consumer_id()).to_bytes();
        let lease_path = self.layout().lease(name);
        let (dead, task_path) = (self.layout().dead_letter(name), self.layout().task(name));
        let ops = [
            Op::Create(&lease_path, &lease_data),
            Op::Create(&dead, &record),
            Op::Delete(&task_path, version),
            Op::Delete(&lease_path, -1),
        ];
        match self.commit_bury(&ops, 1).await? {
            Ok(_) => {
                tracing::warn!(task = %name, consumer = %self.consumer_id(), attempts, %reason, "task dead-lettered");
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
}
