//! The dead letters: tasks that will not run again without an operator. List them, show one,
//! send them back to the queue ([`redrive`]), or delete them (purge); and the [`DeadLetterSink`]
//! that receives a copy of each.

mod redrive;

#[cfg(test)]
pub(crate) use redrive::original_body;

pub use crate::queue::{DeadLetterSink, SendError};
pub use redrive::{RedriveReport, Redriven, Skipped, redrive};

use serde_json::Value;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::layout::dead_oldest_first;
use crate::queue::Queue;
use crate::task::json;

/// Every dead-letter record, oldest task first, with its name.
pub async fn list(queue: &Queue) -> Result<Vec<(String, Value)>> {
    let names = names(queue).await?;
    let reads: Vec<_> = names.iter().map(|n| read(queue, n)).collect();
    let mut records = Vec::with_capacity(names.len());
    for (name, read) in names.iter().zip(futures::future::join_all(reads).await) {
        if let Some((record, _)) = read? {
            records.push((name.clone(), record));
        }
    }
    Ok(records)
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
        Ok((data, stat)) => {
            let text = String::from_utf8_lossy(&data);
            let record = json::parse(&text).unwrap_or_else(|_| Value::String(text.into()));
            Ok(Some((record, stat.version)))
        }
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(Error::zk("get", path, e)),
    }
}

/// Deletes dead letters; returns how many were deleted.
pub async fn purge(queue: &Queue, names: &[String]) -> Result<usize> {
    let deletes: Vec<_> = names
        .iter()
        .map(|n| queue.client().delete(&queue.layout().dead_letter(n), None))
        .collect();
    let mut deleted = 0;
    for (name, result) in names.iter().zip(futures::future::join_all(deletes).await) {
        match result {
            Ok(()) => deleted += 1,
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(Error::zk("delete", queue.layout().dead_letter(name), e)),
        }
    }
    Ok(deleted)
}
