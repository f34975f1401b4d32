//! What completing tasks writes for their records: each record and its id's entry, in a
//! bucket made sure of first.

use chrono::Utc;
use serde_json::Value;
use std::time::Duration;

use super::DoneRecords;
use crate::done_record::DoneRecord;
use crate::error::Result;
use crate::feature::{EndWrite, Leaving, Site};
use crate::handler::Delivered;
use crate::layout::DONE_BUCKET_MS;
use crate::task_result::{MAX_RESULT_BYTES, ResultOmitted, TaskResult};

/// The writes of the records of `leaving`, kept for `keep`, by the index of each task: its
/// record, and its id's entry.
pub(super) async fn records(
    feature: &DoneRecords,
    site: &Site<'_>,
    leaving: &[Leaving<'_>],
    keep: Duration,
) -> Result<Vec<(usize, EndWrite)>> {
    let now = Utc::now().timestamp_millis();
    let until = now.saturating_add(crate::lease::millis(keep));
    let bucket = until - until.rem_euclid(DONE_BUCKET_MS);
    let (parent, path) = (site.layout.done(), site.layout.done_bucket(bucket));
    (site.ensure_bucket(&feature.made, bucket, &parent, &path)).await?;
    let mut writes = Vec::with_capacity(leaving.len() * 2);
    for (i, one) in leaving.iter().enumerate() {
        let Some(task) = one.held else { continue };
        let (result, result_omitted) = kept_result(&task.name, one.delivered);
        let record = DoneRecord {
            task: task.name.clone(),
            id: task.envelope.id.clone(),
            event_type: task.envelope.event_type.clone(),
            time: task.envelope.time,
            completed_at_ms: now,
            kept_until_ms: until,
            attempts: task.envelope.attempts,
            fencing_token: task.fencing_token,
            delivered: one.delivered.cloned(),
            moved_from: task.envelope.moved_from.clone(),
            result,
            result_omitted,
        };
        writes.push((
            i,
            EndWrite::Create {
                path: site.layout.done_record(bucket, &task.name),
                data: serde_json::to_vec(&record)?,
            },
        ));
        writes.push((
            i,
            EndWrite::Create {
                path: site.layout.done_id(bucket, &task.envelope.id),
                data: task.name.clone().into_bytes(),
            },
        ));
    }
    Ok(writes)
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
