//! The dead letters: tasks that will not run again without an operator. List them, show one,
//! send them back to the queue ([`redrive()`]), or delete them (purge); and the [`DeadLetterSink`]
//! that receives a copy of each; a [`page`] of them picked by type and reason.

mod filter;
mod redrive;

#[cfg(test)]
pub(crate) use redrive::original_body;

pub use crate::queue::{DeadLetterSink, SendError};
pub use filter::{Filter, Page, event_type, page};
pub use redrive::{RedriveReport, Redriven, Skipped, redrive};

use serde_json::Value;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::layout::dead_oldest_first;
use crate::queue::Queue;
use crate::task::json;

/// Dead letters read in one request.
pub const PAGE: usize = 32;

/// Every dead-letter record, oldest task first, with its name; read [`PAGE`] to a request.
pub async fn list(queue: &Queue) -> Result<Vec<(String, Value)>> {
    let mut records = Vec::new();
    for page in names(queue).await?.chunks(PAGE) {
        records.extend(read_page(queue, page).await?);
    }
    Ok(records)
}

/// The records of `names` (those that still exist), in one request.
pub async fn read_page(queue: &Queue, names: &[String]) -> Result<Vec<(String, Value)>> {
    let paths: Vec<String> = names
        .iter()
        .map(|n| queue.layout().dead_letter(n))
        .collect();
    let reads = queue.read_paths(&paths).await?;
    Ok(names
        .iter()
        .zip(reads)
        .filter_map(|(name, read)| read.map(|(data, _)| (name.clone(), record_of(&data))))
        .collect())
}

/// A record's JSON; a record that is not JSON shows as its text.
fn record_of(data: &[u8]) -> Value {
    let text = String::from_utf8_lossy(data);
    json::parse(&text).unwrap_or_else(|_| Value::String(text.into()))
}

/// The names under `dead/`, oldest task first.
pub async fn names(queue: &Queue) -> Result<Vec<String>> {
    let dead = queue.layout().dead();
    let names = queue
        .client()
        .list_children(&dead)
        .await
        .map_err(|e| Error::zk("list", &dead, e))?;
    Ok(dead_oldest_first(names))
}

/// One record, if it exists.
pub async fn show(queue: &Queue, name: &str) -> Result<Option<Value>> {
    Ok(read(queue, name).await?.map(|(record, _)| record))
}

pub(crate) async fn read(queue: &Queue, name: &str) -> Result<Option<(Value, i32)>> {
    let path = queue.layout().dead_letter(name);
    match queue.client().get_data(&path).await {
        Ok((data, stat)) => Ok(Some((record_of(&data), stat.version))),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(Error::zk("get", path, e)),
    }
}

/// Deletes dead letters, [`PAGE`] in flight at a time; returns how many were deleted. A
/// resumable task's step znodes (`steps/<id>/`, which a redrive would have resumed from) go
/// with its dead letter.
pub async fn purge(queue: &Queue, names: &[String]) -> Result<usize> {
    let mut deleted = 0;
    for page in names.chunks(PAGE) {
        let stepped: Vec<(String, String)> = (read_page(queue, page).await?.into_iter())
            .filter_map(|(name, record)| Some((name, stepped_id(&record)?)))
            .collect();
        let deletes: Vec<_> = page
            .iter()
            .map(|n| queue.client().delete(&queue.layout().dead_letter(n), None))
            .collect();
        for (name, result) in page.iter().zip(futures::future::join_all(deletes).await) {
            match result {
                Ok(()) => deleted += 1,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(Error::zk("delete", queue.layout().dead_letter(name), e)),
            }
            if let Some((_, id)) = stepped.iter().find(|(n, _)| n == name) {
                queue.drop_steps(id).await?;
            }
        }
    }
    Ok(deleted)
}

/// The envelope id of a dead letter's task when its record keeps entries in step znodes.
fn stepped_id(record: &Value) -> Option<String> {
    let envelope = record.get("body")?;
    let stored = envelope.get("resume")?.get("stored")?.as_u64()?;
    (stored > 0).then(|| envelope.get("id")?.as_str().map(String::from))?
}
