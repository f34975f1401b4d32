//! The reaper's sweep of keys past their window, found by their expiry entries.

use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::Upkeep;
use crate::queue::KeyData;

/// Expiry entries looked at per sweep, at most (a key and its entry deleted for each that is
/// due).
pub const PER_SWEEP: usize = 1_000;

/// Deletes the keys whose `window` has passed (with their entries), at most `limit` entries
/// looked at; how many keys went. Buckets due by the upkeep's time are looked at from their
/// start on; an entry not due yet stays, and a bucket left empty goes.
pub async fn expired(upkeep: &Upkeep, window: Duration, limit: usize) -> Result<usize> {
    let root = upkeep.layout.key_expiry();
    let buckets = upkeep.children(&root).await?;
    let mut due: Vec<i64> = buckets.iter().filter_map(|b| b.parse().ok()).collect();
    due.retain(|b| *b <= upkeep.now.now_ms());
    due.sort_unstable();
    let (mut looked, mut swept) = (0, 0);
    for bucket in due {
        let path = upkeep.layout.key_expiry_bucket(bucket);
        let entries = match upkeep.client.list_children(&path).await {
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
            match expire(upkeep, window, &path, entry).await? {
                Expiry::Expired => swept += 1,
                Expiry::Stale => {}
                Expiry::NotYet => left += 1,
            }
        }
        if left == 0 {
            match upkeep.client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => {}
                Err(e) => return Err(Error::zk("delete", path, e)),
            }
        }
    }
    Ok(swept)
}

/// What the sweep found of one filed key.
enum Expiry {
    Expired,
    Stale,
    NotYet,
}

/// Looks at key `entry` (an encoded key) filed in `bucket_path`: a completed key past its
/// `window` goes with its entry; an entry whose key is gone or was taken again since goes
/// alone; a key still in its window stays.
async fn expire(
    upkeep: &Upkeep,
    window: Duration,
    bucket_path: &str,
    entry: &str,
) -> Result<Expiry> {
    let key = format!("{}/{entry}", upkeep.layout.keys());
    let entry_path = format!("{bucket_path}/{entry}");
    let completed = match upkeep.client.get_data(&key).await {
        Ok((bytes, stat)) => KeyData::completed_at_in(&bytes).map(|at| (at, stat.version)),
        Err(zk::Error::NoNode) => None,
        Err(e) => return Err(Error::zk("get", key, e)),
    };
    // Deleted at the version read: a key taken again since is another task's.
    let expiry = match completed {
        Some((at, _)) if !KeyData::past_window(at, window) => return Ok(Expiry::NotYet),
        Some((_, version)) => match upkeep.client.delete(&key, Some(version)).await {
            Ok(()) => Expiry::Expired,
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Expiry::Stale,
            Err(e) => return Err(Error::zk("delete", key, e)),
        },
        None => Expiry::Stale,
    };
    match upkeep.client.delete(&entry_path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(expiry),
        Err(e) => Err(Error::zk("delete", entry_path, e)),
    }
}
