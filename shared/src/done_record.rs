//! A completion record: what a completed task leaves behind, when `KEEP_DONE` is set, and how
//! one is found by task name or envelope id.
//!
//! The records are written and swept by their feature (`features/done_records/`); this module
//! is their format and their reader, which `status`, `explain` and the feature's
//! [`crate::feature::Feature::find_ended`] share. A record sits at `done/<bucket>/<name>`, and
//! `done/<bucket>/@<id>` holds its name, where `<bucket>` is the start of the 10 minutes
//! ([`crate::layout::DONE_BUCKET_MS`]) in which the record expires. Finding one costs a list
//! of `done/` (a bucket per 10 minutes of the window) and a read of each bucket's entry.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::Site;
use crate::handler::Delivered;
use crate::layout::{self, Layout};
use crate::task_result::ResultOmitted;

/// What a completed task leaves behind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoneRecord {
    /// Its name when it completed.
    pub task: String,
    /// Its envelope id.
    pub id: String,
    /// Its event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the event happened, by the producer.
    pub time: DateTime<Utc>,
    /// When it completed, by the completing consumer's clock (ms since the epoch).
    pub completed_at_ms: i64,
    /// The record is kept until then (ms since the epoch).
    pub kept_until_ms: i64,
    /// Attempts it took, the successful one included.
    pub attempts: u32,
    /// The fencing token of the claim that completed it.
    pub fencing_token: i64,
    /// What the sink answered, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<Delivered>,
    /// Names it had before (after a backoff it came back under a new one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved_from: Vec<String>,
    /// What the handler answered, when it is JSON of at most 64 KiB (see
    /// [`crate::task_result`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What it answered otherwise: its size and type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_omitted: Option<ResultOmitted>,
}

/// The completion record of the task named `key` (a task name) or with envelope id `key`,
/// newest first, if one is kept and not expired by this machine's clock.
pub async fn find(site: &Site<'_>, key: &str) -> Result<Option<DoneRecord>> {
    let found = find_all(site, &[key.to_string()]).await?;
    Ok(found.into_iter().next().flatten())
}

/// [`find`] for each of `keys`, with one listing of `done/` for them all.
pub async fn find_all(site: &Site<'_>, keys: &[String]) -> Result<Vec<Option<DoneRecord>>> {
    let mut buckets = buckets(site.client, site.layout).await?;
    if buckets.is_empty() {
        return Ok(keys.iter().map(|_| None).collect());
    }
    buckets.sort_unstable_by(|a, b| b.cmp(a));
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        found.push(find_in(site, &buckets, key).await?);
    }
    Ok(found)
}

/// The record of `key` in `buckets` (newest first).
async fn find_in(site: &Site<'_>, buckets: &[i64], key: &str) -> Result<Option<DoneRecord>> {
    let by_name = layout::sequence(key).is_some();
    // Every bucket's entry read at once (pipelined on the session), then looked at newest
    // first.
    let entries: Vec<String> = (buckets.iter())
        .map(|b| match by_name {
            true => site.layout.done_record(*b, key),
            false => site.layout.done_id(*b, key),
        })
        .collect();
    let reads = futures::future::join_all(entries.iter().map(|p| read(site, p))).await;
    let now = Utc::now().timestamp_millis();
    for ((bucket, entry), read_entry) in buckets.iter().zip(entries).zip(reads) {
        let Some(data) = read_entry? else { continue };
        let (path, data) = match by_name {
            true => (entry, Some(data)),
            false => {
                let path = (site.layout).done_record(*bucket, &String::from_utf8_lossy(&data));
                let data = read(site, &path).await?;
                (path, data)
            }
        };
        let Some(data) = data else { continue };
        let record: DoneRecord = serde_json::from_slice(&data).map_err(|e| Error::Unreadable {
            path,
            problem: e.to_string(),
        })?;
        if record.kept_until_ms >= now {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

/// The buckets under `done/` of the queue at `layout`.
pub async fn buckets(client: &zk::Client, layout: &Layout) -> Result<Vec<i64>> {
    let dir = layout.done();
    match client.list_children(&dir).await {
        Ok(names) => Ok(names.iter().filter_map(|b| b.parse().ok()).collect()),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Error::zk("list", dir, e)),
    }
}

/// The data of `path`, if it exists.
async fn read(site: &Site<'_>, path: &str) -> Result<Option<Vec<u8>>> {
    match site.client.get_data(path).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(Error::zk("get", path, e)),
    }
}
