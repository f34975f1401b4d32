//! The records' expiry: the reaper deletes whole buckets whose 10 minutes have passed.

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::Upkeep;
use crate::layout::DONE_BUCKET_MS;

/// Record znodes the reaper deletes per run, at most.
pub const PER_SWEEP: usize = 2_000;

/// Deletes the records of buckets that have expired by the upkeep's time, at most `limit`
/// znodes a call; returns how many went. A bucket goes once it is empty.
pub async fn expired(upkeep: &Upkeep, limit: usize) -> Result<usize> {
    let client = &upkeep.client;
    let mut due = crate::done_record::buckets(client, &upkeep.layout).await?;
    due.retain(|b| b.saturating_add(DONE_BUCKET_MS) <= upkeep.now.now_ms());
    due.sort_unstable();
    let mut swept = 0;
    for bucket in due {
        let path = upkeep.layout.done_bucket(bucket);
        let entries = match client.list_children(&path).await {
            Ok(entries) => entries,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(Error::zk("list", path, e)),
        };
        let take = entries.len().min(limit - swept);
        let deletes = entries[..take].iter().map(|entry| {
            let entry = format!("{path}/{entry}");
            async move {
                match client.delete(&entry, None).await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => Err(Error::zk("delete", entry, e)),
                }
            }
        });
        for deleted in futures::future::join_all(deletes).await {
            deleted?;
        }
        swept += take;
        if take == entries.len() {
            match client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => {}
                Err(e) => return Err(Error::zk("delete", path, e)),
            }
        }
        if swept == limit {
            break;
        }
    }
    Ok(swept)
}
