//! Completion records (`KEEP_DONE`): a completed task leaves `done/<bucket>/<name>` (what it
//! was, when it completed, after how many attempts, with which fencing token, what the sink
//! answered, the handler's result) and `done/<bucket>/@<id>` (its name), both created in the
//! completion's own multi-op, so a record exists exactly when the completion landed. A record
//! is at most about 66 KB (a result over 64 KiB is kept as its size), and a completion puts
//! at most [`RECORD_BYTES_PER_REQUEST`] of records in one multi-op, so that a batch of large
//! results stays within ZooKeeper's request limit. `<bucket>` is the start of
//! the 10 minutes in which the record expires; the reaper deletes whole expired buckets, a
//! bounded number of records per run. `status` finds a record by name or id with one list of
//! `done/` (a bucket per 10 minutes of the window) and one multi-read.
//!
//! When an earlier task with the same id left its entry in the bucket (a redriven task, a
//! producer's own id), the completion is committed again without the entry, and the id keeps
//! finding the first record. 32 tasks completing together with results at the limit go out as
//! five multi-ops instead of one, each all or nothing, in order (a lost link after the first
//! sends the whole batch again, and the tasks already completed are found gone: the first try
//! landed); small results leave a batch as it was.
//!
//! # Costs
//!
//! Per task, the two creates inside a completion multi-op that is sent anyway (the result rides
//! in the record's create), plus, once per 10-minute bucket and process, making the bucket; the
//! reaper deletes whole buckets whose 10 minutes have passed, up to 2 000 znodes a run. Without
//! `KEEP_DONE` nothing is written and a result is dropped. `make bench` measures the drain rate
//! with and without records.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use zookeeper_client as zk;

use super::held::Lease;
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::handler::Delivered;
use crate::layout::{self, DONE_BUCKET_MS};
use crate::task_result::{MAX_RESULT_BYTES, ResultOmitted, TaskResult};

recipe!(
    /// Completion records (`KEEP_DONE`): written with the completion, found by name or id, swept
    /// when they expire (`done`).
    Done,
    done
);

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

/// The record's `result` and `result_omitted` for `delivered`; a value a handler built over
/// the limit is kept as its size, and said so in the log, the completion going on.
fn kept_result(
    task: &str,
    delivered: Option<&Delivered>,
) -> (Option<Value>, Option<ResultOmitted>) {
    let Some(result) = delivered.and_then(|d| d.result.clone()) else {
        return (None, None);
    };
    let built = matches!(result, TaskResult::Json(_));
    let (value, omitted) = result.kept();
    if let (true, Some(omitted)) = (built, &omitted) {
        tracing::warn!(
            task,
            bytes = omitted.bytes,
            limit = MAX_RESULT_BYTES,
            "result over the limit: the completion record keeps its size only"
        );
    }
    (value, omitted)
}

/// What completing one task writes for its record.
#[derive(Debug)]
pub(super) struct DoneWrite {
    pub(super) record: String,
    pub(super) record_data: Vec<u8>,
    /// Absent once an earlier task with the same id turned out to have one in the bucket.
    pub(super) id_entry: Option<String>,
    pub(super) id_data: Vec<u8>,
}

/// The most bytes of completion records one completion multi-op carries. With the rest of up
/// to 32 completions (paths, keys of up to 4 KiB written twice) it stays well under
/// ZooKeeper's 1 MiB `jute.maxbuffer`: eight records with results at the 64 KiB limit.
pub(super) const RECORD_BYTES_PER_REQUEST: usize = 512 * 1024;

impl DoneWrite {
    /// What its record and id entry add to a request, paths and data.
    pub(super) fn bytes(&self) -> usize {
        self.record.len()
            + self.record_data.len()
            + self.id_data.len()
            + self.id_entry.as_ref().map_or(0, String::len)
    }
}

/// `items` in order, in runs whose `bytes` add up to at most [`RECORD_BYTES_PER_REQUEST`]
/// (an item over it alone makes a run of one).
pub(super) fn within_request<T>(items: Vec<T>, bytes: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut runs: Vec<Vec<T>> = Vec::new();
    let mut total = 0;
    for item in items {
        let size = bytes(&item);
        match runs.last_mut() {
            Some(run) if total + size <= RECORD_BYTES_PER_REQUEST => {
                total += size;
                run.push(item);
            }
            _ => {
                total = size;
                runs.push(vec![item]);
            }
        }
    }
    runs
}

impl Done<'_> {
    /// The records completing `leases` writes, when `KEEP_DONE` is set (the bucket made here,
    /// once per bucket and queue).
    pub(super) async fn done_writes(self, leases: &[Lease]) -> Result<Vec<Option<DoneWrite>>> {
        let Some(keep) = self.settings().keep_done else {
            return Ok(leases.iter().map(|_| None).collect());
        };
        let now = Utc::now().timestamp_millis();
        let until = now.saturating_add(crate::lease::millis(keep));
        let bucket = until - until.rem_euclid(DONE_BUCKET_MS);
        if !self.memory.done_bucket.is(bucket) {
            self.cancels().ensure_parent(&self.layout().done()).await?;
            self.cancels()
                .ensure_parent(&self.layout().done_bucket(bucket))
                .await?;
            self.memory.done_bucket.set(bucket);
        }
        leases
            .iter()
            .map(|lease| {
                let task = &lease.task;
                let (result, result_omitted) = kept_result(&task.name, lease.delivered.as_ref());
                let record = DoneRecord {
                    task: task.name.clone(),
                    id: task.envelope.id.clone(),
                    event_type: task.envelope.event_type.clone(),
                    time: task.envelope.time,
                    completed_at_ms: now,
                    kept_until_ms: until,
                    attempts: task.envelope.attempts,
                    fencing_token: task.fencing_token,
                    delivered: lease.delivered.clone(),
                    moved_from: task.envelope.moved_from.clone(),
                    result,
                    result_omitted,
                };
                Ok(Some(DoneWrite {
                    record: self.layout().done_record(bucket, &task.name),
                    record_data: serde_json::to_vec(&record)?,
                    id_entry: Some(self.layout().done_id(bucket, &task.envelope.id)),
                    id_data: task.name.clone().into_bytes(),
                }))
            })
            .collect()
    }

    /// The completion record of the task named `key` (a task name) or with envelope id `key`,
    /// newest first, if one is kept.
    pub async fn find_done(self, key: &str) -> Result<Option<DoneRecord>> {
        let mut buckets = self.done_buckets().await?;
        buckets.sort_unstable_by(|a, b| b.cmp(a));
        let by_name = layout::sequence(key).is_some();
        let paths: Vec<String> = buckets
            .iter()
            .map(|b| match by_name {
                true => self.layout().done_record(*b, key),
                false => self.layout().done_id(*b, key),
            })
            .collect();
        let now = Utc::now().timestamp_millis();
        for (bucket, read) in buckets.iter().zip(self.read_paths(&paths).await?) {
            let Some((data, _)) = read else { continue };
            let path = match by_name {
                true => self.layout().done_record(*bucket, key),
                false => {
                    let name = String::from_utf8_lossy(&data).to_string();
                    self.layout().done_record(*bucket, &name)
                }
            };
            let data = match by_name {
                true => Some(data),
                false => self.read_path(&path).await?.map(|(data, _)| data),
            };
            let Some(data) = data else { continue };
            let record: DoneRecord =
                serde_json::from_slice(&data).map_err(|e| Error::Unreadable {
                    path,
                    problem: e.to_string(),
                })?;
            if record.kept_until_ms >= now {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    /// Deletes the records of buckets that have expired by `now`, at most `limit` znodes a
    /// call; returns how many went. A bucket goes once it is empty.
    pub async fn sweep_done(self, now: &ZkTime, limit: usize) -> Result<usize> {
        let mut swept = 0;
        let mut due: Vec<i64> = self.done_buckets().await?;
        due.retain(|b| b.saturating_add(DONE_BUCKET_MS) <= now.now_ms());
        due.sort_unstable();
        for bucket in due {
            let path = self.layout().done_bucket(bucket);
            let entries = match self.client().list_children(&path).await {
                Ok(entries) => entries,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(Error::zk("list", path, e)),
            };
            let take = entries.len().min(limit - swept);
            let deletes = entries[..take].iter().map(|entry| {
                let entry = format!("{path}/{entry}");
                async move {
                    match self.client().delete(&entry, None).await {
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
                match self.client().delete(&path, None).await {
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

    /// The buckets under `done/`.
    async fn done_buckets(self) -> Result<Vec<i64>> {
        let dir = self.layout().done();
        match self.client().list_children(&dir).await {
            Ok(names) => Ok(names.iter().filter_map(|b| b.parse().ok()).collect()),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Error::zk("list", dir, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_split_into_runs_within_a_request() {
        const K: usize = 1024;
        for (sizes, runs) in [
            (vec![], vec![]),
            (vec![0; 32], vec![32]),
            (vec![66 * K; 32], vec![7, 7, 7, 7, 4]),
            (vec![600 * K, 1, 1], vec![1, 2]),
            (vec![1, 600 * K, 1], vec![1, 1, 1]),
            (vec![256 * K, 256 * K, 1], vec![2, 1]),
        ] {
            let split = within_request(sizes.clone(), |s| *s);
            let lengths: Vec<usize> = split.iter().map(Vec::len).collect();
            assert_eq!(lengths, runs, "{sizes:?}");
            assert_eq!(split.concat(), sizes, "order and every item kept");
        }
    }
}
