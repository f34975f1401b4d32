//! Ordered groups: tasks with the same `group` run one at a time, in publish order.
//!
//! A group's lock, `groups/<group>`, exists while one of its tasks runs, waits for a retry, or
//! the group is paused, and names that task's id. A claim of a grouped task creates the lock in
//! its multi-op (so of two claims of one group, one fails), without reading it first unless the
//! task goes through a gate: only a create that fails reads the lock, and takes it over when it
//! names the task's own id (a retry come back, a task whose consumer died), in the multi-op
//! sent again. Completing the task deletes
//! the lock in the same multi-op; a retry keeps it, so the group waits for its head; burying
//! deletes it, or marks the group paused when the task or its route asks. Which task of a group
//! is next is decided by the walk (see `process::pass`): only a walk that has seen every number
//! from the head up to a grouped task may claim it, and only the first of its group it saw.
//!
//! A grouped task met not due yet (a producer's delay) is left where it is, holding its group
//! back, instead of being moved to wait. A paused group stays paused until `resume --group`
//! deletes its lock.
//!
//! # Costs
//!
//! A task without a group pays one scan of its bytes for the word `"group"` when probed, and
//! nothing else. A grouped task costs one more operation per claim (and a `getData` of the lock
//! when the group is busy, or when the task goes through a gate) and one more per completion. A
//! group held back for long (a retry's backoff, a pause) keeps its later tasks in their lane,
//! where every walk reads past them and the head cannot pass them; `stats` reads the locks (a
//! request per 32) to list paused groups. A 000-design consumer knows nothing of groups and
//! claims grouped tasks in any order.

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use crate::error::{Error, Result};

recipe!(
    /// Ordered groups: their locks (`groups/<group>`), and the places that keep a grouped
    /// task's turn in its lane while it waits elsewhere (`group_lock`, `place`).
    Groups,
    groups
);

/// `groups/<group>`'s data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLock {
    /// The id of the task that holds the group.
    pub id: String,
    /// Its name when it took the lock.
    pub task: String,
    /// Set when the group is paused: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    /// Where the task waits out its retry's backoff: its node under `delayed/`
    /// (`<bucket>/<due>~<task>`), written by the release that moved it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Set when its backoff ended and it went back to the tail of its lane, under a name the
    /// lock learns when the task is claimed again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moved: bool,
}

impl GroupLock {
    /// The lock of task `id`, named `name` when it took it.
    pub fn held_by(id: &str, name: &str) -> Self {
        GroupLock {
            id: id.to_string(),
            task: name.to_string(),
            paused: None,
            waiting: None,
            moved: false,
        }
    }
}

/// A group's lock as read, with its version.
#[derive(Clone, Debug)]
pub struct LockRead {
    /// The lock's data.
    pub lock: GroupLock,
    /// The lock znode's version when read: a write back checks it.
    pub version: i32,
}

impl LockRead {
    /// The lock at `path` from its data and stat; unreadable data is an error naming it.
    fn parse(path: String, bytes: Vec<u8>, stat: zk::Stat) -> Result<LockRead> {
        let lock = serde_json::from_slice(&bytes).map_err(|e| Error::Unreadable {
            path,
            problem: e.to_string(),
        })?;
        Ok(LockRead {
            lock,
            version: stat.version,
        })
    }
}

impl Groups<'_> {
    /// Group `group`'s lock, if it has one.
    pub async fn group_lock(self, group: &str) -> Result<Option<LockRead>> {
        let path = self.layout().group(group);
        let read = self.read_path(&path).await?;
        read.map(|(bytes, stat)| LockRead::parse(path, bytes, stat))
            .transpose()
    }

    /// [`Groups::unpause_group`], under its former name.
    #[deprecated(note = "renamed `Groups::unpause_group`: \"resume\" is for resumable tasks")]
    pub async fn resume_group(self, group: &str) -> Result<bool> {
        self.unpause_group(group).await
    }

    /// Lifts the pause of a group paused after one of its tasks went to the dead letters
    /// (`event-bridge resume --group`): deletes its lock if it is a pause. Whether it was
    /// paused.
    pub async fn unpause_group(self, group: &str) -> Result<bool> {
        let Some(read) = self.group_lock(group).await? else {
            return Ok(false);
        };
        if read.lock.paused.is_none() {
            return Ok(false);
        }
        let path = self.layout().group(group);
        match self.client().delete(&path, Some(read.version)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }

    /// The paused groups (their encoded names) and why, a bounded number.
    pub async fn paused_groups(self, limit: usize) -> Result<Vec<(String, String)>> {
        let root = self.layout().groups();
        let names = self.children_of(&root).await?;
        let paths: Vec<String> = names.iter().map(|n| format!("{root}/{n}")).collect();
        let mut paused = Vec::new();
        for (chunk, names) in paths.chunks(32).zip(names.chunks(32)) {
            for (read, name) in self.read_paths(chunk).await?.into_iter().zip(names) {
                let reason = read
                    .and_then(|(bytes, _)| serde_json::from_slice::<GroupLock>(&bytes).ok())
                    .and_then(|lock| lock.paused);
                if let Some(reason) = reason {
                    paused.push((crate::layout::decode_segment(name), reason));
                }
                if paused.len() == limit {
                    return Ok(paused);
                }
            }
        }
        Ok(paused)
    }
}

/// What a claim of a grouped task does to its group's lock.
#[derive(Clone, Debug)]
pub(super) enum LockOp {
    /// No lock: create it.
    Create { path: String, data: Vec<u8> },
    /// The lock names this very task: take it over at the version read.
    TakeOver {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
}

impl LockOp {
    pub(super) fn path(&self) -> &str {
        match self {
            LockOp::Create { path, .. } | LockOp::TakeOver { path, .. } => path,
        }
    }
}

/// Whether a grouped task may take its group now.
pub(super) enum LockDecision {
    Free(LockOp),
    /// Another task holds the group (its id), or the group is paused (`None`).
    Busy(Option<String>),
}

/// A held group lock: its path and version, for the holder's last write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLock {
    /// The lock znode's path.
    pub path: String,
    /// Its version as the holder left it: the holder's last write checks it.
    pub version: i32,
}

impl Groups<'_> {
    /// What a claim of task `name` (of `envelope`'s group) does to the group's lock. Most
    /// claims find their group free (the task before completed), so a claim creates the lock
    /// without reading it first and reads it only when the create meets one
    /// ([`Groups::lock_met`]), unless `read_first`: a task that goes through a gate reads the
    /// lock before, so that a busy or paused group never takes a place in the gate (nor a
    /// token of its bucket) from a task that can run.
    pub(super) async fn lock_for_claim(
        self,
        group: &str,
        name: &str,
        envelope: &crate::task::Envelope,
        read_first: bool,
    ) -> Result<LockDecision> {
        if !read_first {
            return Ok(LockDecision::Free(LockOp::Create {
                path: self.layout().group(group),
                data: self.lock_data(name, envelope)?,
            }));
        }
        Ok(
            match self.read_lock_decision(group, name, envelope).await? {
                Some(decision) => decision,
                None => LockDecision::Free(LockOp::Create {
                    path: self.layout().group(group),
                    data: self.lock_data(name, envelope)?,
                }),
            },
        )
    }

    /// The lock a claim of task `name` holds.
    fn lock_data(&self, name: &str, envelope: &crate::task::Envelope) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(&GroupLock::held_by(&envelope.id, name))?)
    }

    /// Whether a claim of task `name` whose create of its group's lock met one may take the
    /// group: when the lock names this very task (a retry come back, a task whose consumer
    /// died), by taking it over at the version read; otherwise the group is busy (with its
    /// holder's id), or paused, or its lock went meanwhile (busy, for a later pass).
    pub(super) async fn lock_met(
        self,
        group: &str,
        name: &str,
        envelope: &crate::task::Envelope,
    ) -> Result<LockDecision> {
        let decision = self.read_lock_decision(group, name, envelope).await?;
        Ok(decision.unwrap_or(LockDecision::Busy(None)))
    }

    /// The group's lock read: taken over when it names this very task, else busy (with the
    /// holder's id, or `None` when paused); `None` when there is no lock.
    async fn read_lock_decision(
        self,
        group: &str,
        name: &str,
        envelope: &crate::task::Envelope,
    ) -> Result<Option<LockDecision>> {
        let Some(read) = self.group_lock(group).await? else {
            return Ok(None);
        };
        Ok(Some(match read {
            read if read.lock.paused.is_some() => LockDecision::Busy(None),
            read if read.lock.id == envelope.id => LockDecision::Free(LockOp::TakeOver {
                path: self.layout().group(group),
                data: self.lock_data(name, envelope)?,
                version: read.version,
            }),
            read => LockDecision::Busy(Some(read.lock.id)),
        }))
    }

    /// The data of a paused group's lock, held by the task `id` named `name`.
    pub(super) fn paused_lock(&self, id: &str, name: &str, reason: &str) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(&GroupLock {
            paused: Some(format!("{name} went to the dead letters: {reason}")),
            ..GroupLock::held_by(id, name)
        })?)
    }
}

/// A rewrite of a group's lock at the version its holder knows.
pub(super) struct LockWrite {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    pub(super) version: i32,
}

impl LockWrite {
    fn new(path: String, lock: &GroupLock, version: i32) -> Result<Self> {
        Ok(LockWrite {
            path,
            data: serde_json::to_vec(lock)?,
            version,
        })
    }
}

impl Groups<'_> {
    /// The write that tells `held`, the lock of task `id` (named `name`), where the task waits
    /// out its retry's backoff (`waiting`: its bucket and node under `delayed/`), in the
    /// release that moves it there: so that the audit finds the group's task where its lock
    /// says.
    pub(super) fn waiting_lock(
        &self,
        held: &HeldLock,
        id: &str,
        name: &str,
        bucket: i64,
        node: &str,
    ) -> Result<LockWrite> {
        let lock = GroupLock {
            waiting: Some(format!("{bucket:013}/{node}")),
            ..GroupLock::held_by(id, name)
        };
        LockWrite::new(held.path.clone(), &lock, held.version)
    }

    /// The write that tells the lock of a grouped task waiting at `name` under `delayed/`
    /// (`body`) that its task goes back to its lane, in the promotion's multi-op; none for a
    /// task that holds no lock (its group's lock is another's, or paused, or gone).
    pub(super) async fn moved_lock(self, body: &[u8], name: &str) -> Result<Option<LockWrite>> {
        let crate::task::Body::Envelope(envelope) = crate::task::parse(body) else {
            return Ok(None);
        };
        let Some(group) = &envelope.group else {
            return Ok(None);
        };
        let Some(read) = self.group_lock(group).await? else {
            return Ok(None);
        };
        if read.lock.id != envelope.id || read.lock.paused.is_some() {
            return Ok(None);
        }
        let lock = GroupLock {
            moved: true,
            ..GroupLock::held_by(&envelope.id, name)
        };
        LockWrite::new(self.layout().group(group), &lock, read.version).map(Some)
    }
}

/// What the end of a grouped task's life does to its group's lock.
#[derive(Clone, Debug)]
pub(super) enum Release {
    /// The group goes on: its next task may run.
    Delete { path: String, version: i32 },
    /// The group stays paused until an operator unpauses it.
    Pause {
        path: String,
        version: i32,
        data: Vec<u8>,
    },
    /// A task at its group's turn that did not take the lock yet pauses the group: the lock
    /// made, paused.
    PauseFree { path: String, data: Vec<u8> },
}

impl Release {
    /// The operation, in the multi-op that ends the task.
    pub(super) fn op(&self) -> super::ops::Op<'_> {
        match self {
            Release::Delete { path, version } => super::ops::Op::Delete(path, *version),
            Release::Pause {
                path,
                version,
                data,
            } => super::ops::Op::Set(path, data, *version),
            Release::PauseFree { path, data } => super::ops::Op::Create(path, data),
        }
    }
}

impl Groups<'_> {
    /// How burying task `name` (id `id`), which holds `held`, releases its group.
    pub(super) fn release_lock(
        &self,
        held: HeldLock,
        id: &str,
        name: &str,
        on_dead: crate::task::OnDead,
        reason: &str,
    ) -> Result<Release> {
        let HeldLock { path, version } = held;
        Ok(match on_dead {
            crate::task::OnDead::Continue => Release::Delete { path, version },
            crate::task::OnDead::Pause => Release::Pause {
                data: self.paused_lock(id, name, reason)?,
                path,
                version,
            },
        })
    }
}
