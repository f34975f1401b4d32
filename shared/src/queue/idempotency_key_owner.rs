//! What settling a keyed task does to its key: a key is the task's own only while it names the
//! task's id and has no `completed_at` (after the task died, another task may have taken it).
//! Completion marks an own key completed and files it for expiry; a bury deletes it; both at
//! the version read, so a key that changed hands since fails the multi-op instead of being
//! overwritten. (Publishing with a key and sweeping expired keys are in `keys`.)

use crate::queue::IdempotencyKeys;
use zookeeper_client as zk;

use super::idempotency_keys::KeyData;
use super::ops::Op;
use crate::error::Result;
use crate::layout::KEY_BUCKET_MS;
use crate::task::{Envelope, Task};

/// A key read as a task's own: it names the task's id and is not completed. Its write or
/// delete is sent at the version read, so a key that changed hands since fails the multi-op
/// instead of being overwritten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnedKey {
    pub(crate) path: String,
    pub(crate) version: i32,
}

impl OwnedKey {
    /// Deletes the key, if it is still as read.
    pub(crate) fn delete(&self) -> Op<'_> {
        Op::Delete(&self.path, self.version)
    }

    /// The key to send again after its operation failed with `error`, if it is still the
    /// task's. A key read before its publisher wrote the task's name into it (version 0)
    /// moves to version 1 when that write lands, and stays the task's: nothing else writes a
    /// key its task holds. Any other failure means the key went or changed hands.
    pub(crate) fn after_failure(self, error: &zk::Error) -> Option<OwnedKey> {
        match (self.version, error) {
            (0, zk::Error::BadVersion) => Some(OwnedKey { version: 1, ..self }),
            _ => None,
        }
    }
}

impl IdempotencyKeys<'_> {
    /// The key of the task in `body` (any producer's), read, if it is that task's own.
    pub(crate) async fn owned_key_of_body(self, body: &[u8]) -> Result<Option<OwnedKey>> {
        match crate::task::parse(body) {
            crate::task::Body::Envelope(envelope) => self.owned_key(&envelope).await,
            _ => Ok(None),
        }
    }

    /// The key of `envelope`'s task, read, if it is that task's own: one `getData`, and none
    /// for a task without a key.
    pub(crate) async fn owned_key(self, envelope: &Envelope) -> Result<Option<OwnedKey>> {
        let Some(path) = self.key_path(envelope) else {
            return Ok(None);
        };
        let read = self.read_path(&path).await?;
        Ok(owned(path, &envelope.id, read))
    }

    /// The keys of `tasks` that are their own, read in one multi-read (no request when none
    /// has a key).
    async fn owned_keys(self, tasks: &[&Task]) -> Result<Vec<Option<OwnedKey>>> {
        let paths: Vec<Option<String>> = tasks.iter().map(|t| self.key_path(&t.envelope)).collect();
        let wanted: Vec<String> = paths.iter().flatten().cloned().collect();
        let mut reads = self.read_paths(&wanted).await?.into_iter();
        Ok(paths
            .into_iter()
            .zip(tasks)
            .map(|(path, task)| {
                let path = path?;
                owned(path, &task.envelope.id, reads.next().flatten())
            })
            .collect())
    }

    /// What completing each of `tasks` writes for its key: for a task whose key is its own,
    /// the key marked completed now (at the version read) and the path of its expiry entry
    /// (whose bucket is made here); nothing for a task without a key, or whose key another
    /// task has.
    pub(crate) async fn completed_keys(self, tasks: &[&Task]) -> Result<Vec<Option<CompletedKey>>> {
        let owned = self.owned_keys(tasks).await?;
        if owned.iter().all(Option::is_none) {
            return Ok(owned.into_iter().map(|_| None).collect());
        }
        let now = chrono::Utc::now().timestamp_millis();
        let expires = now.saturating_add(crate::lease::millis(self.settings().dedup_window));
        let bucket = expires - expires.rem_euclid(KEY_BUCKET_MS);
        if !self.memory.key_bucket.is(bucket) {
            self.cancels()
                .ensure_parent(&self.layout().key_expiry())
                .await?;
            self.cancels()
                .ensure_parent(&self.layout().key_expiry_bucket(bucket))
                .await?;
            self.memory.key_bucket.set(bucket);
        }
        tasks
            .iter()
            .zip(owned)
            .map(|(task, owned)| {
                let Some(owned) = owned else { return Ok(None) };
                let key = task.envelope.idempotency_key.as_deref().unwrap_or_default();
                let data = KeyData {
                    id: task.envelope.id.clone(),
                    task: Some(task.name.clone()),
                    completed_at: Some(now),
                };
                Ok(Some(CompletedKey {
                    entry: self.layout().key_expiry_entry(bucket, key),
                    data: serde_json::to_vec(&data)?,
                    key: owned,
                }))
            })
            .collect()
    }
}

/// What completing a keyed task writes: its key, at the version read, marked completed, and
/// its expiry entry.
#[derive(Debug)]
pub(crate) struct CompletedKey {
    pub key: OwnedKey,
    pub data: Vec<u8>,
    pub entry: String,
}

/// The key at `path`, as `read`, if it is the own key of the task with envelope id `id`: it
/// names that id and is not completed. A key another task took, one already completed, or
/// one that cannot be read is not touched.
fn owned(path: String, id: &str, read: Option<(Vec<u8>, zk::Stat)>) -> Option<OwnedKey> {
    let (bytes, stat) = read?;
    let ours = serde_json::from_slice::<KeyData>(&bytes)
        .is_ok_and(|key| key.id == id && key.completed_at.is_none());
    if !ours {
        tracing::info!(key = %path, task_id = %id, "idempotency key not this task's; left as it is");
        return None;
    }
    Some(OwnedKey {
        path,
        version: stat.version,
    })
}
