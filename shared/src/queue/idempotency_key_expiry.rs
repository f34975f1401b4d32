//! Expiry of idempotency keys as a publish meets it: a completed key is free again once its
//! window (`DEDUP_WINDOW_MS`) has passed, and a publish that meets such a key deletes it. (The
//! reaper's sweep of keys filed by when they expire is the feature's, in
//! `features/idempotency_keys/sweep.rs`.)

use crate::queue::IdempotencyKeys;
use zookeeper_client as zk;

use super::idempotency_keys::KeyData;
use crate::error::{Error, Result};

impl IdempotencyKeys<'_> {
    /// Whether a key whose task completed at `completed_at` (ms since the epoch) is past its
    /// window by this machine's clock.
    pub(super) fn key_expired(&self, completed_at: i64) -> bool {
        KeyData::past_window(completed_at, self.settings().dedup_window)
    }

    /// Deletes the key at `key_path` if it is still an expired completed key.
    pub(super) async fn delete_expired_key(self, key_path: &str) -> Result<bool> {
        let Some((bytes, stat)) = self.read_path(key_path).await? else {
            return Ok(false);
        };
        if !KeyData::completed_at_in(&bytes).is_some_and(|at| self.key_expired(at)) {
            return Ok(false);
        }
        self.delete_key_at(key_path, stat.version).await
    }

    /// Deletes the key at `key_path` if it is still at `version` (read as an expired completed
    /// key: free, whoever had it); `false` when it changed or went meanwhile.
    pub(super) async fn delete_key_at(self, key_path: &str, version: i32) -> Result<bool> {
        match self.client().delete(key_path, Some(version)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
            Err(e) => Err(Error::zk("delete", key_path, e)),
        }
    }
}
