//! Expiry of idempotency keys (see [`super::keys`]): a completed key is free again once its
//! window (`DEDUP_WINDOW_MS`) has passed. A publish that meets such a key deletes it; the
//! reaper sweeps the keys filed under `keys-expiry/` by when they expire, a bounded number per
//! run.

use crate::queue::IdempotencyKeys;
use zookeeper_client as zk;

use super::idempotency_keys::KeyData;
use crate::clock::ZkTime;
use crate::error::{Error, Result};

impl IdempotencyKeys<'_> {
    /// Whether a key whose task completed at `completed_at` (ms since the epoch) is past its
    /// window by this machine's clock.
    pub(super) fn key_expired(&self, completed_at: i64) -> bool {
        let window = crate::lease::millis(self.settings().dedup_window);
        completed_at.saturating_add(window) <= chrono::Utc::now().timestamp_millis()
    }

    /// Deletes the key at `key_path` if it is still an expired completed key.
    pub(super) async fn delete_expired_key(self, key_path: &str) -> Result<bool> {
        let Some((bytes, stat)) = self.read_path(key_path).await? else {
            return Ok(false);
        };
        if !completed_at(&bytes).is_some_and(|at| self.key_expired(at)) {
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

    /// Deletes the keys whose window has passed (with their entries), at most `limit`
    /// looked at; returns how many keys went. Buckets are looked at from their start on;
    /// an entry not due yet stays.
    pub async fn sweep_keys(self, now: &ZkTime, limit: usize) -> Result<usize> {
        let root = self.layout().key_expiry();
        let buckets = match self.client().list_children(&root).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::zk("list", root, e)),
        };
        let mut due: Vec<i64> = buckets.iter().filter_map(|b| b.parse().ok()).collect();
        due.retain(|b| *b <= now.now_ms());
        due.sort_unstable();
        let (mut looked, mut swept) = (0, 0);
        for bucket in due {
            let path = self.layout().key_expiry_bucket(bucket);
            let entries = match self.client().list_children(&path).await {
                Ok(entries) => entries,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(Error::zk("list", path, e)),
            };
            let mut left = 0;
            for entry in &entries {
                if looked == limit {
                    return Ok(swept);
                }
                looked += 1;
                match self.expire(&path, entry).await? {
                    Expiry::Expired => swept += 1,
                    Expiry::Stale => {}
                    Expiry::NotYet => left += 1,
                }
            }
            if left == 0 {
                match self.client().delete(&path, None).await {
                    Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => {}
                    Err(e) => return Err(Error::zk("delete", path, e)),
                }
            }
        }
        Ok(swept)
    }

    /// Looks at key `entry` (an encoded key) filed in `bucket_path`: a completed key past its
    /// window goes with its entry; an entry whose key is gone or was taken again since goes
    /// alone; a key still in its window stays.
    async fn expire(self, bucket_path: &str, entry: &str) -> Result<Expiry> {
        let key = format!("{}/{entry}", self.layout().keys());
        let entry_path = format!("{bucket_path}/{entry}");
        let completed = self
            .read_path(&key)
            .await?
            .and_then(|(bytes, stat)| Some((completed_at(&bytes)?, stat.version)));
        // Deleted at the version read: a key taken again since is another task's.
        let expiry = match completed {
            Some((at, _)) if !self.key_expired(at) => return Ok(Expiry::NotYet),
            Some((_, version)) if self.delete_key_at(&key, version).await? => Expiry::Expired,
            _ => Expiry::Stale,
        };
        match self.client().delete(&entry_path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(expiry),
            Err(e) => Err(Error::zk("delete", entry_path, e)),
        }
    }
}

/// What the sweep found of one filed key.
enum Expiry {
    Expired,
    Stale,
    NotYet,
}

/// When the key in `bytes` was completed, if it was (and is readable).
fn completed_at(bytes: &[u8]) -> Option<i64> {
    serde_json::from_slice::<KeyData>(bytes).ok()?.completed_at
}
