//! Dead-letter records: why a task died, how often it ran, its last error and its body as it
//! was (capped); and their copy to the [`DeadLetterSink`](super::DeadLetterSink).

use std::time::Duration;

use serde_json::json;

use super::Queue;

/// Bodies larger than this are not copied whole into a dead-letter record (base64 would take
/// a binary one past ZooKeeper's 1 MiB packet limit); the record keeps a digest and the head.
const DEAD_BODY_LIMIT: usize = 256 * 1024;
const DEAD_BODY_HEAD: usize = 4 * 1024;

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
    /// A dead-letter record: why, how often, the last error, and the body as it was.
    pub(crate) fn dead_record(
        &self,
        name: &str,
        body: &[u8],
        reason: &str,
        attempts: u32,
        last_error: Option<String>,
    ) -> serde_json::Value {
        let mut record = json!({
            "task": name,
            "reason": reason,
            "attempts": attempts,
            "last_error": last_error.map(short),
            "dead_at": chrono::Utc::now(),
            "consumer_id": self.consumer_id(),
        });
        if body.len() > DEAD_BODY_LIMIT {
            // Keep the record well under ZooKeeper's packet limit: a digest and the head.
            use sha2::Digest as _;
            record["body_omitted"] = json!({
                "bytes": body.len(),
                "sha256": hex::encode(sha2::Sha256::digest(body)),
                "head": String::from_utf8_lossy(&body[..DEAD_BODY_HEAD]),
            });
            return record;
        }
        match std::str::from_utf8(body) {
            Ok(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Ok(value) => record["body"] = value,
                Err(_) => record["body_text"] = text.into(),
            },
            Err(_) => {
                use base64::Engine as _;
                record["body_base64"] = base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .into();
            }
        }
        record
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
