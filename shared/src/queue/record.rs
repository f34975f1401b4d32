//! Dead letters: the record of why a task died, how often it ran, its last error and its body
//! as it was (capped), written by one writer ([`DeadLetter`]) in the multi-op of whatever
//! buries the task (a bury, a child dying with its parent or cancelled, a publish whose parent
//! is dead), and copied to the [`DeadLetterSink`](super::DeadLetterSink) once it landed.

use std::time::Duration;

use serde_json::json;

use super::Queue;
use super::ops::{Multi, Op};
use crate::layout::DEAD_NAME_SUFFIX;
use crate::task::json;

/// The dead-letter reason of a cancelled task.
pub const CANCELLED: &str = "cancelled";

/// The largest dead-letter record: with the other operations of its multi-op it stays under
/// ZooKeeper's 1 MiB packet limit (`jute.maxbuffer`). A body that would take a record past it
/// (a binary body grows by a third in base64) is replaced by its size, digest and head.
pub(crate) const RECORD_LIMIT: usize = 1_040_000;
/// How much of an omitted body a record keeps.
const OMITTED_HEAD: usize = 4 * 1024;

/// How long a copy to the dead-letter sink may take before it is given up (logged; the record
/// stays in ZooKeeper).
const DEAD_LETTER_SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors stored in a task or a dead letter are cut to this many characters.
const ERROR_CHARS: usize = 2_000;

/// An error message cut to [`ERROR_CHARS`].
pub(crate) fn short(error: String) -> String {
    match error.char_indices().nth(ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &error[..cut]),
        None => error,
    }
}

/// A dead letter on its way to `dead/<name>`: the one writer of `dead/`. Whatever buries a
/// task adds [`DeadLetter::push`] to the multi-op that takes the task away, and calls
/// [`DeadLetter::landed`] once that multi-op committed.
#[derive(Clone, Debug)]
pub(crate) struct DeadLetter {
    /// Its name under `dead/` (the task's, or `after-<id>` for a child that never had one).
    pub(crate) name: String,
    pub(crate) reason: String,
    path: String,
    /// The path of a name of its own, when its name was taken (see [`DeadLetter::renamed`]).
    other: String,
    renamed: bool,
    json: serde_json::Value,
    bytes: Vec<u8>,
}

impl DeadLetter {
    /// Adds the record's create to `multi`, tagged `tag`.
    pub(crate) fn push<'a, T: Copy + PartialEq>(&'a self, multi: &mut Multi<'a, T>, tag: T) {
        match self.renamed {
            false => multi.push(tag, Op::Create(&self.path, &self.bytes)),
            true => multi.push(tag, Op::CreateSequential(&self.other, &self.bytes)),
        };
    }

    /// Its name was taken (a record of an earlier queue under the same root, or sequence
    /// numbers wrapped): the next push writes it under a name of its own, `<name>~<n>`. False
    /// when it had one already.
    pub(crate) fn rename(&mut self) -> bool {
        !std::mem::replace(&mut self.renamed, true)
    }

    /// After its multi-op committed: also sent to the dead-letter sink, when there is one.
    /// The record stays under `ROOT/dead` either way, so a failed send loses nothing: it is
    /// logged.
    pub(crate) async fn landed(&self, queue: &Queue) {
        let Some(sink) = &queue.dead_letters else {
            return;
        };
        let name = &self.name;
        // Bounded, so an unreachable sink cannot eat an invocation's deadline.
        let sent =
            tokio::time::timeout(DEAD_LETTER_SEND_TIMEOUT, sink.send(name, &self.json)).await;
        let error = match sent {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {DEAD_LETTER_SEND_TIMEOUT:?}"),
        };
        tracing::warn!(task = %name, destination = %sink.destination(), %error,
            "dead letter not copied to the dead-letter sink; it stays in ZooKeeper");
    }
}

impl Queue {
    /// The dead letter of task `name` (with `body`), dying for `reason` after `attempts`, its
    /// last error `last_error`, written by this consumer now; see [`build_record`].
    pub(crate) fn dead_letter_of(
        &self,
        name: &str,
        body: &[u8],
        reason: &str,
        attempts: u32,
        last_error: Option<String>,
    ) -> DeadLetter {
        let about = json!({
            "task": name,
            "reason": reason,
            "attempts": attempts,
            "last_error": last_error.map(short),
            "dead_at": chrono::Utc::now(),
            "consumer_id": self.consumer_id(),
        });
        let (json, bytes) = build_record(about, body);
        let path = self.layout().dead_letter(name);
        DeadLetter {
            name: name.to_string(),
            reason: reason.to_string(),
            other: format!("{path}{DEAD_NAME_SUFFIX}"),
            path,
            renamed: false,
            json,
            bytes,
        }
    }
}

/// Puts the body into `record`: as JSON when it is JSON that a record can nest one level deeper
/// and still read back, as text when it is other UTF-8, as base64 otherwise.
fn with_body(record: &mut serde_json::Value, body: &[u8]) {
    let Ok(text) = std::str::from_utf8(body) else {
        use base64::Engine as _;
        record["body_base64"] = base64::engine::general_purpose::STANDARD
            .encode(body)
            .into();
        return;
    };
    let nestable = json::depth(body) < json::MAX_DEPTH;
    match json::parse(text) {
        Ok(value) if nestable => record["body"] = value,
        _ => record["body_text"] = text.into(),
    }
}

/// A dead-letter record, and its bytes: `about` (why, how often, the last error, when, by whom)
/// with the body as it was: whole as long as the record stays under [`RECORD_LIMIT`], else its
/// size, SHA-256 and first 4 KiB.
pub(crate) fn build_record(
    mut record: serde_json::Value,
    body: &[u8],
) -> (serde_json::Value, Vec<u8>) {
    with_body(&mut record, body);
    let bytes = serde_json::to_vec(&record).expect("records are plain data");
    if bytes.len() <= RECORD_LIMIT {
        return (record, bytes);
    }
    // Keep the record under ZooKeeper's packet limit: a digest and the head.
    for key in ["body", "body_text", "body_base64"] {
        record.as_object_mut().expect("an object").remove(key);
    }
    use sha2::Digest as _;
    record["body_omitted"] = json!({
        "bytes": body.len(),
        "sha256": hex::encode(sha2::Sha256::digest(body)),
        "head": String::from_utf8_lossy(&body[..body.len().min(OMITTED_HEAD)]),
    });
    let bytes = serde_json::to_vec(&record).expect("records are plain data");
    (record, bytes)
}
