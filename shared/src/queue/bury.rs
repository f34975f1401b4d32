//! Burying a task nobody holds (a poison body, attempts used up, a cancel): into the dead
//! letters in one multi-op that fails if anyone holds it.

use zookeeper_client as zk;

use super::Queue;
use super::claim::ClaimOutcome;
use super::group::{HeldLock, Release};
use super::key_owner::OwnedKey;
use super::ops::Op;
use super::unclaimed::Unclaimed;
use crate::error::{Error, Result};
use crate::lease::LeaseData;
use crate::task::{self, Body, OnDead};

impl Queue {
    /// Buries a task nobody holds: lease created and deleted in the same multi-op, so it
    /// fails if someone holds the task, and the task deleted at the version read; its
    /// idempotency key goes with it (at the version read, when it names the task's id), and a
    /// group lock it holds (a grouped task whose consumer died) is released, or turned into
    /// the group's pause.
    pub(super) async fn bury_unclaimed(
        &self,
        task: Unclaimed<'_>,
        reason: String,
        last_error: Option<String>,
    ) -> Result<ClaimOutcome> {
        let Unclaimed {
            name,
            body,
            version,
            attempts,
            on_dead,
        } = task;
        let (record_json, record) = self.dead_record(name, body, &reason, attempts, last_error);
        let lease_data = LeaseData::new(self.consumer_id()).to_bytes();
        let lease_path = self.layout().lease(name);
        let (dead, task_path) = (self.layout().dead_letter(name), self.layout().task(name));
        // Its key and its group's lock go with it, when they are still its own.
        let (mut key, mut lock) = futures::future::try_join(
            self.owned_key_of_body(body),
            self.lock_to_release(name, body, on_dead, &reason),
        )
        .await?;
        let committed = loop {
            let mut ops = vec![
                Op::Create(&lease_path, &lease_data),
                Op::Create(&dead, &record),
                Op::Delete(&task_path, version),
                Op::Delete(&lease_path, -1),
            ];
            ops.extend(key.as_ref().map(OwnedKey::delete));
            ops.extend(lock.as_ref().map(Release::op));
            match self.commit_bury(&ops, 1).await? {
                // A key or lock gone (or changed hands) meanwhile is no reason not to bury.
                Err((i, e @ (zk::Error::NoNode | zk::Error::BadVersion))) if i >= 4 => {
                    match (i, key.take()) {
                        (4, Some(owned)) => key = owned.after_failure(&e),
                        (_, owned) => (key, lock) = (owned, None),
                    }
                }
                committed => break committed,
            }
        };
        match committed {
            Ok(_) => {
                tracing::warn!(task = %name, consumer = %self.consumer_id(), attempts, %reason, "task dead-lettered");
                self.forward_dead(name, &record_json).await;
                Ok(ClaimOutcome::Buried { reason })
            }
            Err((0, zk::Error::NodeExists)) | Err((2, zk::Error::BadVersion)) => {
                Ok(ClaimOutcome::Taken)
            }
            Err((2, zk::Error::NoNode)) => Ok(ClaimOutcome::Gone),
            Err((i, e)) => {
                let path = [&lease_path, &dead, &task_path, &lease_path]
                    .get(i)
                    .map_or(String::new(), |p| p.to_string());
                Err(Error::zk("bury", path, e))
            }
        }
    }

    /// What burying the task in `body` (named `name`) does to its group's lock, when the
    /// task holds it: release it, or pause the group.
    async fn lock_to_release(
        &self,
        name: &str,
        body: &[u8],
        on_dead: OnDead,
        reason: &str,
    ) -> Result<Option<Release>> {
        let Body::Envelope(envelope) = task::parse(body) else {
            return Ok(None);
        };
        let Some(group) = &envelope.group else {
            return Ok(None);
        };
        let Some(read) = self.group_lock(group).await? else {
            return Ok(None);
        };
        if read.lock.id != envelope.id {
            return Ok(None);
        }
        let held = HeldLock {
            path: self.layout().group(group),
            version: read.version,
        };
        Ok(Some(self.release_lock(
            held,
            &envelope.id,
            name,
            on_dead,
            reason,
        )?))
    }
}
