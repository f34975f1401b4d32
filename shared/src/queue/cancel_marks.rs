//! Cancelling tasks. A task nobody holds goes to the dead letters at once with the reason
//! `cancelled`. A held task cannot be touched without breaking its holder's fencing, so it
//! gets a mark instead, `cancelled/<id>`: its holder's completion still counts, but it is not
//! run again. A release to wait out a backoff fails on the mark (the release creates and
//! deletes it in its multi-op, which fails when it exists), and a claim of a marked task
//! buries it (a run reads the marks when it starts). The reaper sweeps marks whose task left
//! `tasks/`.
//!
//! # How
//!
//! A task nobody holds is cancelled with the multi-op that buries poison: a guard lease created
//! and deleted (so it fails if anyone holds the task), the dead letter created, the task deleted
//! at the version read; a waiting one with `create dead/T` and `delete delayed/B/…` at its
//! version. After making a mark, `cancel` looks again: a task released meanwhile is cancelled
//! where it went. Every release (with a backoff or in place) creates and deletes the mark in its
//! own multi-op, which fails with `NodeExists` when the mark is there: the holder then buries the
//! task with the reason `cancelled` and deletes the mark. A run reads the marks when it starts and
//! before each pass (one `getChildren`), and a claim of a marked task buries it, which covers a
//! holder that died (the reaper frees its lease; the task stays under its name). A completion
//! ignores the mark: the attempt that was running when the cancel came may still succeed. The
//! reaper deletes marks whose task has left `tasks/` (up to 100 a run, three requests each).
//!
//! # Costs
//!
//! A release has two operations more; a claim, none. The mark is by envelope id: two live tasks
//! with one id (a producer error) are both buried if the second is claimed or released while the
//! first's mark lasts. Our producers refuse an id given twice in one publish, but do not look for
//! an id a live task has: that would be a walk of the whole queue per id.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::bury::{Burial, attempts_in};
use super::held::Settled;
use super::outcome::TaskOutcome;
use super::record::CANCELLED;
use crate::error::{Error, Result};
use crate::layout::encode_segment;
use crate::task::OnDead;

recipe!(
    /// Cancelling: the marks of tasks cancelled while held, and the cancel of a pending or
    /// waiting task (`cancel_marks`).
    Cancels,
    cancels
);

/// What a cancel mark holds.
#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    /// The task's name when it was marked (it keeps it while held).
    task: String,
    /// When, by the cancelling client's clock (ms since the epoch).
    since: i64,
}

impl Cancels<'_> {
    /// The marks (envelope ids, encoded as znode names) of tasks cancelled while held.
    pub async fn cancel_marks(self) -> Result<BTreeSet<String>> {
        let path = self.layout().cancelled();
        match self.client().list_children(&path).await {
            Ok(names) => Ok(names.into_iter().collect()),
            Err(zk::Error::NoNode) => Ok(BTreeSet::new()),
            Err(e) => Err(Error::zk("list", path, e)),
        }
    }

    /// Whether the task whose envelope id is `id` is marked cancelled in `marks`.
    pub fn is_marked(marks: &BTreeSet<String>, id: &str) -> bool {
        !marks.is_empty() && marks.contains(&encode_segment(id))
    }

    /// Marks the task with envelope id `id`, held under `name`, cancelled; `false` when it
    /// was marked already.
    pub async fn mark_cancelled(self, id: &str, name: &str) -> Result<bool> {
        let path = self.layout().cancel_mark(id);
        let mark = Mark {
            task: name.to_string(),
            since: chrono::Utc::now().timestamp_millis(),
        };
        let data = serde_json::to_vec(&mark)?;
        self.ensure_parent(&self.layout().cancelled()).await?;
        match self
            .client()
            .create(&path, &data, &self.created(zk::CreateMode::Persistent))
            .await
        {
            Ok(_) => Ok(true),
            Err(zk::Error::NodeExists) => Ok(false),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// Removes the mark of `id`, if there is one.
    pub async fn unmark_cancelled(self, id: &str) -> Result<()> {
        let path = self.layout().cancel_mark(id);
        match self.client().delete(&path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }

    /// Cancels pending task `name` (read at `version`), which nobody may hold: to the dead
    /// letters with the reason `cancelled`. [`TaskOutcome::Taken`] when someone holds it now.
    pub async fn cancel_pending(
        self,
        name: &str,
        body: &[u8],
        version: i32,
    ) -> Result<TaskOutcome> {
        let task = Burial::Unclaimed {
            name,
            body,
            version,
            attempts: attempts_in(body),
            on_dead: OnDead::Continue,
            marked: false,
        };
        Ok(match self.bury(task, CANCELLED, None).await? {
            Settled::Done => TaskOutcome::DeadLettered {
                reason: CANCELLED.into(),
            },
            Settled::Gone => TaskOutcome::Gone,
            _ => TaskOutcome::Taken,
        })
    }

    /// Cancels a task waiting at `path` under `delayed/` (read at `version`): to the dead
    /// letters, and its group goes on. `false` when it moved or went meanwhile.
    pub async fn cancel_waiting(
        self,
        path: &str,
        name: &str,
        body: &[u8],
        version: i32,
    ) -> Result<bool> {
        let task = Burial::Waiting {
            path,
            name,
            body,
            version,
        };
        Ok(self.bury(task, CANCELLED, None).await? == Settled::Done)
    }

    /// Removes marks whose task is no longer in `tasks/` under the name it was marked with
    /// (completed or buried: a marked task cannot move away), at most `limit` per call.
    /// Returns how many went.
    pub async fn sweep_cancel_marks(self, limit: usize) -> Result<usize> {
        let mut swept = 0;
        for mark in self.cancel_marks().await?.into_iter().take(limit) {
            let path = format!("{}/{mark}", self.layout().cancelled());
            let Some((data, stat)) = self.read_path(&path).await? else {
                continue;
            };
            let Ok(Mark { task, .. }) = serde_json::from_slice(&data) else {
                continue;
            };
            let task_path = self.layout().task(&task);
            let present = self
                .client()
                .check_stat(&task_path)
                .await
                .map_err(|e| Error::zk("stat", &task_path, e))?;
            if present.is_some() {
                continue;
            }
            match self.client().delete(&path, Some(stat.version)).await {
                Ok(()) => swept += 1,
                Err(zk::Error::NoNode | zk::Error::BadVersion) => {}
                Err(e) => return Err(Error::zk("delete", path, e)),
            }
        }
        Ok(swept)
    }

    /// Creates `path` (a base path of ours) when a queue made by an earlier version lacks it.
    pub(crate) async fn ensure_parent(self, path: &str) -> Result<()> {
        match self
            .client()
            .create(path, b"", &self.created(zk::CreateMode::Persistent))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }
}
