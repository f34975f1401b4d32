//! The dead letters: tasks that will not run again without an operator. List them, show one,
//! send them back to the queue (redrive), or delete them (purge).

use serde_json::Value;
use zookeeper_client as zk;

use crate::layout::{TASK_PREFIX, oldest_first};
use crate::queue::{Op, Queue};
use crate::task::{self, Body};
use crate::{Error, Result};

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
    Ok(oldest_first(names))
}

/// One record, if it exists.
pub async fn show(queue: &Queue, name: &str) -> Result<Option<Value>> {
    Ok(read(queue, name).await?.map(|(record, _)| record))
}

async fn read(queue: &Queue, name: &str) -> Result<Option<(Value, i32)>> {
    let path = queue.layout().dead_letter(name);
    match queue.client().get_data(&path).await {
        Ok((data, stat)) => {
            let record = serde_json::from_slice(&data)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&data).into()));
            Ok(Some((record, stat.version)))
        }
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(Error::zk("get", path, e)),
    }
}

/// What a redrive did with one dead letter.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Redriven {
    pub dead: String,
    /// The new task's name; the envelope keeps its id.
    pub task: String,
}

/// Sends dead letters back to the queue as new tasks, attempts reset and ids kept; each in one
/// multi-op with the removal of its record. Names that are not dead letters are skipped.
pub async fn redrive(queue: &Queue, names: &[String]) -> Result<Vec<Redriven>> {
    let mut done = Vec::new();
    for name in names {
        let Some((record, version)) = read(queue, name).await? else {
            continue;
        };
        let body = original_body(&record)?;
        let ops = [
            Op::CreateSequential(&queue.layout().task_prefix(), &body),
            Op::Delete(&queue.layout().dead_letter(name), version),
        ];
        match queue.commit("redrive", &ops).await? {
            Ok(results) => {
                let path = match results.first() {
                    Some(zk::MultiWriteResult::Create { path, .. }) => path.clone(),
                    other => {
                        return Err(Error::zk(
                            "redrive",
                            name,
                            zk::Error::UnexpectedError(format!("{other:?}")),
                        ));
                    }
                };
                let task = path.rsplit('/').next().unwrap_or(&path).to_string();
                debug_assert!(task.starts_with(TASK_PREFIX));
                done.push(Redriven {
                    dead: name.clone(),
                    task,
                });
            }
            Err((_, zk::Error::NoNode | zk::Error::BadVersion)) => {}
            Err((i, e)) => return Err(Error::zk("redrive", ops[i].path(), e)),
        }
    }
    Ok(done)
}

/// The body to queue again: an envelope with its attempts, error and backoff cleared, or the
/// original bytes of any other body.
fn original_body(record: &Value) -> Result<Vec<u8>> {
    if let Some(body) = record.get("body") {
        let bytes = serde_json::to_vec(body)?;
        return Ok(match task::parse(&bytes) {
            Body::Envelope(mut envelope) => {
                envelope.attempts = 0;
                envelope.last_error = None;
                envelope.retry_at = None;
                envelope.to_bytes()?
            }
            _ => bytes,
        });
    }
    if let Some(text) = record.get("body_text").and_then(Value::as_str) {
        return Ok(text.as_bytes().to_vec());
    }
    if let Some(b64) = record.get("body_base64").and_then(Value::as_str) {
        use base64::Engine as _;
        if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64) {
            return Ok(bytes);
        }
    }
    Err(Error::Json(serde::de::Error::custom(
        "dead-letter record holds no body",
    )))
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
