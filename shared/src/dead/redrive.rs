//! Redrive: dead letters back to the queue as new tasks, attempts reset and ids kept.
//!
//! A task published with an idempotency key lost its key when it died, and another task may
//! have taken the key since. Its redrive is a publish of that key again, and answers as one:
//! a free key is taken again in the multi-op that queues the task (so the redriven task is
//! deduplicated against as before, and frees or completes its key as any keyed task); a key
//! another task has queues nothing, and the letter stays, skipped with the task that has it.

use serde_json::Value;
use zookeeper_client as zk;

use super::read;
use crate::error::{Error, Result};
use crate::queue::{KeyState, Published, Queue, Requeued};
use crate::task::{self, Body};

/// What a redrive did with one dead letter.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Redriven {
    /// The dead letter's name (its record is gone now).
    pub dead: String,
    /// The new task's name; the envelope keeps its id.
    pub task: String,
    /// The idempotency key the task holds again, when it was published with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// A dead letter a redrive left where it is, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Skipped {
    /// The dead letter's name.
    pub dead: String,
    /// Why it was left.
    pub reason: String,
}

/// What a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The dead letters sent back, in the order done.
    pub redriven: Vec<Redriven>,
    /// The dead letters left where they are.
    pub skipped: Vec<Skipped>,
}

/// Sends dead letters back to the queue as new tasks, attempts reset and ids kept; each in one
/// multi-op with the removal of its record (and its idempotency key taken again, when it had
/// one). Names that are not dead letters are passed over; a record that cannot be sent back
/// (it kept no body, or its key belongs to another task now) is skipped with the reason, and
/// the rest are redriven.
///
/// # Notable errors
/// - [`Error::Zk`] when ZooKeeper fails; what was redriven before stays redriven.
pub async fn redrive(queue: &Queue, names: &[String]) -> Result<RedriveReport> {
    let mut report = RedriveReport::default();
    for name in names {
        match redrive_one(queue, name).await? {
            Some(Ok(done)) => report.redriven.push(done),
            Some(Err(skipped)) => {
                tracing::warn!(dead_letter = %skipped.dead, reason = %skipped.reason, "not redriven");
                report.skipped.push(skipped);
            }
            None => {}
        }
    }
    Ok(report)
}

/// Redrives one dead letter; `None` when there is no such record (any more).
async fn redrive_one(queue: &Queue, name: &str) -> Result<Option<Result<Redriven, Skipped>>> {
    let Some((record, version)) = read(queue, name).await? else {
        return Ok(None);
    };
    let body = match original_body(name, &record) {
        Ok(body) => body,
        Err(e) => {
            let reason = match e {
                Error::NotRedrivable { problem, .. } => problem,
                other => other.to_string(),
            };
            let dead = name.to_string();
            return Ok(Some(Err(Skipped { dead, reason })));
        }
    };
    let dead = name.to_string();
    let envelope = match task::parse(&body) {
        Body::Envelope(envelope) => Some(envelope),
        _ => None,
    };
    let key = (envelope.as_ref())
        .filter(|e| e.keyed)
        .and_then(|e| Some((e, e.idempotency_key.as_deref()?)));
    let letter = queue.layout().dead_letter(name);
    let Some(requeued) = queue
        .idempotency_keys()
        .redrive(&body, key, &letter, version)
        .await?
    else {
        // Redriven or purged meanwhile by someone else.
        return Ok(None);
    };
    let key = key.map(|(_, key)| key.to_string());
    Ok(Some(match requeued {
        Requeued::Created(task) => {
            if let Some(key) = &key {
                tracing::info!(dead_letter = %dead, %task, key, "redriven with its idempotency key");
            }
            Ok(Redriven {
                dead,
                task,
                idempotency_key: key,
            })
        }
        Requeued::KeyTaken(Published::Existing { task, state, .. }) => {
            let key = key.unwrap_or_default();
            let reason = key_taken(&key, task.as_deref(), state);
            Err(Skipped { dead, reason })
        }
        Requeued::KeyTaken(other) => {
            let problem = format!("redrive answered {other:?}");
            return Err(Error::zk(
                "redrive",
                letter,
                zk::Error::UnexpectedError(problem),
            ));
        }
    }))
}

/// Why a letter whose key another task has stays where it is.
fn key_taken(key: &str, task: Option<&str>, state: KeyState) -> String {
    let owner = task.unwrap_or("another task");
    format!(
        "its idempotency key {key:?} belongs to {owner} ({}), published after this one died; \
         redrive it once that key is free (its task dead, or its dedup window over), or purge it",
        state.as_str()
    )
}

/// The body to queue again: an envelope with its attempts, error and backoff cleared, or the
/// original bytes of any other body.
pub(crate) fn original_body(name: &str, record: &Value) -> Result<Vec<u8>> {
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
    let problem = match record.pointer("/body_omitted/bytes") {
        Some(bytes) => format!(
            "its record holds no body: the task's body ({bytes} bytes) was too large to keep \
             (the record has its SHA-256 and first 4 KiB)"
        ),
        None => "its record holds no body".into(),
    };
    Err(Error::NotRedrivable {
        name: name.to_string(),
        problem,
    })
}
