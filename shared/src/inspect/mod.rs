//! Looking into the queue for operators: pending tasks with their leases, one task's status,
//! counts by event type. Every look pages through the queue a window at a time from its head
//! (no listing of `tasks/`), in bounded memory; a look at the whole queue (a status by id, the
//! full count by type) costs a request per window of pending tasks, so it is for the CLI, not
//! for every invocation ([`crate::stats`] is the cheap look).
//!
//! - `pending` (here): the oldest pending tasks, each with its lease.
//! - [`status()`]: where one task is, by name or by id (`debounced`: a debounced publish
//!   pending under its key, shown as [`DebouncedInfo`]).
//! - `counts`: counts by type, from a sample of the head or from the whole queue.
//! - [`leased()`]: the tasks held right now, with holders and expiry (no walk: `leases/`).
//! - [`explain()`]: why a task is where it is, and what would let it go.

mod ahead;
mod audit;
mod counts;
mod debounced;
mod explain;
mod leased;
mod status;

pub use audit::{
    AUDIT_PER_RUN, Audit, PARENTS_LOOKED_FOR, SLOT_GRACE_MS, Stuck, audit, keep as keep_audit,
};
pub use counts::{DetailedStats, SAMPLE, detailed_stats};
pub use debounced::DebouncedInfo;
pub use explain::{
    AHEAD_WINDOWS_FLAT, Explanation, PARENTS_LOOKED_UP, Parent, Reason, explain, explain_status,
    status_and_why,
};
pub use leased::leased;
pub use status::{Status, find_done, status};

use serde::Serialize;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::feature::{Features, Found};
use crate::progress::ProgressReport;
use crate::queue::{LeaseSeen, Probed, Queue, TaskRead, Walk};
use crate::task::{self, Body, Envelope, Place, StandsFor};

/// A task as `list` and `status` show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task znode's name.
    pub name: String,
    /// The envelope's id (the task name for a plain body, absent for poison).
    pub id: Option<String>,
    /// The envelope's event type (absent for poison and for a task we may not read).
    pub event_type: Option<String>,
    /// Attempts counted so far (the envelope's `attempts`).
    pub attempts: u32,
    /// Time since the task was created, by ZooKeeper's clock.
    pub age_ms: i64,
    /// Time left of its retry backoff or delay, if any.
    pub backoff_left_ms: Option<i64>,
    /// The error of its last failed attempt, if any.
    pub last_error: Option<String>,
    /// Who holds it, if anyone.
    pub lease: Option<LeaseInfo>,
    /// Why it will go to the dead letters when claimed, for a body that cannot run.
    pub poison: Option<String>,
    /// Set when our credentials may not read it (its creator shut others out).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
    /// Set when a feature leaves it where it is (its event type, or the whole queue, is
    /// paused): no consumer claims it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Set for a place (see [`crate::task::Place`]): not a task, but the turn in its group
    /// of the task it stands for (its `id`), which waits elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<PlaceInfo>,
    /// The envelope (or plain body wrapped as one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
}

/// What a place keeps the turn of.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlaceInfo {
    /// The group whose order it keeps.
    pub group: String,
    /// What its task waits for: its parents (under `after/`), its debounce (under
    /// `debounce/<key>`), or nothing more: it died, and the group pauses at its turn.
    pub stands_for: StandsFor,
}

/// A lease as `list` and `status` show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The holder's consumer id, as its lease records it (absent when the lease is unreadable).
    pub consumer_id: Option<String>,
    /// The claim's fencing token: the lease znode's `czxid`.
    pub fencing_token: i64,
    /// Time until the reaper may free it (negative: overdue), by ZooKeeper's clock.
    pub expires_in_ms: i64,
    /// Its handler's latest progress, as of the holder's last extension.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressReport>,
}

/// Pending tasks in the order consumers take them (high first; normal's lanes, `tasks/` and
/// the key lanes, a window each in turn; each lane oldest first), at most `limit`, each with
/// its lease: a window of the walk at a time.
pub async fn pending(queue: &Queue, now: &ZkTime, limit: usize) -> Result<Vec<TaskInfo>> {
    let seen = queue.read_features().await?;
    let mut walk = Walk::new();
    let mut infos = Vec::new();
    while infos.len() < limit {
        let Some(window) = walk.next_window(queue).await? else {
            break;
        };
        for probed in window.into_iter().take(limit - infos.len()) {
            let info = info(queue, &probed, now).await?;
            infos.push(info.marked(queue.features(), &seen, now.now_ms()));
        }
    }
    Ok(infos)
}

/// What a probe saw of a task, as operators see it.
pub(crate) async fn info(queue: &Queue, probed: &Probed, now: &ZkTime) -> Result<TaskInfo> {
    let lease = probed.lease.as_ref().map(|l| lease_info(l, queue, now));
    match &probed.read {
        TaskRead::Found { body, stat } => Ok(TaskInfo {
            lease,
            ..body_info(&probed.name, body, stat, now)
        }),
        _ => unreadable(queue, &probed.name, lease, now).await,
    }
}

/// A task's body as operators see it.
pub(crate) fn body_info(name: &str, body: &[u8], stat: &zk::Stat, now: &ZkTime) -> TaskInfo {
    let (envelope, poison) = match task::parse(body) {
        Body::Envelope(e) => (Some(e), None),
        Body::Place(place) => return place_info(name, place, stat, now),
        Body::Plain(v) => (Some(Envelope::from_plain(name, v, stat.ctime)), None),
        Body::Poison(reason) => (None, Some(reason)),
    };
    let now_ms = now.now_ms();
    TaskInfo {
        name: name.to_string(),
        id: envelope.as_ref().map(|e| e.id.clone()),
        event_type: envelope.as_ref().map(|e| e.event_type.clone()),
        attempts: envelope.as_ref().map_or(0, |e| e.attempts),
        age_ms: now_ms - stat.ctime,
        backoff_left_ms: envelope
            .as_ref()
            .and_then(|e| e.retry_at)
            .map(|at| at - now_ms)
            .filter(|l| *l > 0),
        last_error: envelope.as_ref().and_then(|e| e.last_error.clone()),
        lease: None,
        poison,
        unreadable: false,
        paused: false,
        place: None,
        envelope,
    }
}

/// A place as operators see it: the task it keeps the turn of, and what that task waits for.
fn place_info(name: &str, place: Place, stat: &zk::Stat, now: &ZkTime) -> TaskInfo {
    TaskInfo {
        name: name.to_string(),
        id: Some(place.id),
        event_type: Some(place.event_type),
        attempts: 0,
        age_ms: now.now_ms() - stat.ctime,
        backoff_left_ms: None,
        last_error: None,
        lease: None,
        poison: None,
        unreadable: false,
        paused: false,
        place: Some(PlaceInfo {
            group: place.group,
            stands_for: place.stands_for,
        }),
        envelope: None,
    }
}

impl TaskInfo {
    /// Marked `paused` when a feature leaves it where it is at `now_ms` (its type paused), as
    /// a claim would with what the features' start read found (`seen`). A task known only by
    /// its type is asked about as a task of that type.
    pub(crate) fn marked(mut self, features: &Features, seen: &Found, now_ms: i64) -> Self {
        let stand_in;
        let envelope = match (&self.envelope, &self.event_type) {
            (Some(envelope), _) => envelope,
            (None, Some(event_type)) => {
                stand_in = Envelope::new(event_type.clone(), serde_json::Value::Null);
                &stand_in
            }
            (None, None) => return self,
        };
        self.paused = features.any_leaves(envelope, now_ms, seen);
        self
    }
}

/// A task we may not read: only what its stat says (a stat needs no permission).
async fn unreadable(
    queue: &Queue,
    name: &str,
    lease: Option<LeaseInfo>,
    now: &ZkTime,
) -> Result<TaskInfo> {
    let path = queue.layout().task(name);
    let stat = queue
        .client()
        .check_stat(&path)
        .await
        .map_err(|e| Error::zk("stat", &path, e))?;
    Ok(TaskInfo {
        name: name.to_string(),
        id: None,
        event_type: None,
        attempts: 0,
        age_ms: stat.map_or(0, |s| now.now_ms() - s.ctime),
        backoff_left_ms: None,
        last_error: None,
        lease,
        poison: None,
        unreadable: true,
        paused: false,
        place: None,
        envelope: None,
    })
}

pub(crate) fn lease_info(lease: &LeaseSeen, queue: &Queue, now: &ZkTime) -> LeaseInfo {
    LeaseInfo {
        consumer_id: lease.consumer_id.clone(),
        fencing_token: lease.fencing_token,
        expires_in_ms: lease
            .mtime
            .saturating_add(crate::lease::millis(queue.settings().lease_timeout))
            - now.now_ms(),
        progress: lease.progress.clone(),
    }
}
