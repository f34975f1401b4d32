//! Dead-letter records: why a task died, how often it ran, its last error and its body as it
//! was (capped); and their copy to the [`DeadLetterSink`](super::DeadLetterSink).

use std::time::Duration;

use serde_json::json;

use super::Queue;
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

impl Queue {
    /// A dead-letter record written by this consumer now; see [`build_record`].
    pub(crate) fn dead_record(
        &self,
        name: &str,
        body: &[u8],
        reason: &str,
        attempts: u32,
        last_error: Option<String>,
    ) -> (serde_json::Value, Vec<u8>) {
        let about = json!({
            "task": name,
            "reason": reason,
            "attempts": attempts,
            "last_error": last_error.map(short),
            "dead_at": chrono::Utc::now(),
            "consumer_id": self.consumer_id(),
        });
        build_record(about, body)
    }

    /// Also sends a committed dead letter to the dead-letter sink, when there is one. The
    /// record stays under `ROOT/dead` either way, so a failed send loses nothing: it is logged.
    pub(crate) async fn forward_dead(&self, name: &str, record: &serde_json::Value) {
        let Some(sink) = &self.dead_letters else {
            return;
        };
        // Bounded, so an unreachable sink cannot eat an invocation's deadline.
        let sent = tokio::time::timeout(DEAD_LETTER_SEND_TIMEOUT, sink.send(name, record)).await;
        let error = match sent {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {DEAD_LETTER_SEND_TIMEOUT:?}"),
        };
        tracing::warn!(task = %name, destination = %sink.destination(), %error,
            "dead letter not copied to the dead-letter sink; it stays in ZooKeeper");
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
