//! Redrive: dead letters back to the queue as new tasks, attempts reset and ids kept.

use serde_json::Value;
use zookeeper_client as zk;

use super::read;
use crate::error::{Error, Result};
use crate::layout::TASK_PREFIX;
use crate::queue::{Op, Queue};
use crate::task::{self, Body};

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
        let body = original_body(name, &record)?;
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
fn original_body(name: &str, record: &Value) -> Result<Vec<u8>> {
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
    Err(Error::NotRedrivable {
        name: name.to_string(),
        problem: "its record holds no body".into(),
    })
}
