//! The SQS dead-letter queue (`DEAD_LETTER_QUEUE_URL`): a copy of every dead-letter record.

use futures::future::BoxFuture;
use serde_json::Value;

use super::classify::classify;
use super::fifo::{fifo_token, is_fifo, queue_name};
use super::message::attributes;
use super::{ATTEMPTS, EVENT_NAME, REASON, SOURCE, SOURCE_VALUE, TASK_ID};
use crate::queue::{DeadLetterSink, SendError};
use crate::sink::error::SinkError;
use crate::task::FORMAT;
use aws_sdk_sqs::Client;

/// The optional SQS dead-letter queue (`DEAD_LETTER_QUEUE_URL`).
#[derive(Clone, Debug)]
pub struct DeadLetterQueue {
    client: Client,
    queue_url: String,
    /// Whether the queue is FIFO, from its URL.
    fifo: bool,
    /// The queue's name, for error messages.
    name: String,
}

impl DeadLetterQueue {
    /// The dead-letter queue at `queue_url`; a FIFO one when the URL ends in `.fifo`.
    pub fn new(client: Client, queue_url: String) -> Self {
        DeadLetterQueue {
            fifo: is_fifo(&queue_url),
            name: queue_name(&queue_url).to_string(),
            client,
            queue_url,
        }
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends a dead-letter record (the JSON the library writes under `ROOT/dead`, see queue.rs
    /// `dead_record`) with attributes `Reason`, `Attempts`, `TaskId`, `EventName` (and
    /// `Source`). The error names the queue; the caller keeps the ZooKeeper dead letter.
    pub async fn send(&self, task_name: &str, record: &Value) -> Result<(), SinkError> {
        let about = DeadLetter::read(task_name, record);
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(record.to_string())
            .set_message_attributes(Some(
                attributes([
                    (REASON, "String", about.reason.clone()),
                    (ATTEMPTS, "Number", about.attempts.clone()),
                    (TASK_ID, "String", about.task_id.clone()),
                    (EVENT_NAME, "String", about.event_name.clone()),
                    (SOURCE, "String", SOURCE_VALUE.to_string()),
                ])
                .0,
            ));
        if self.fifo {
            let dead_at = record.get("dead_at").and_then(Value::as_str);
            request = request
                .message_group_id(fifo_token(about.group.as_deref().unwrap_or(&about.task_id)))
                .message_deduplication_id(fifo_token(&format!(
                    "{task_name}/{}",
                    dead_at.unwrap_or_default()
                )));
        }
        match request.send().await {
            Ok(_) => {
                tracing::debug!(task = %task_name, queue = %self.name, "dead letter sent to sqs");
                Ok(())
            }
            Err(e) => Err(classify(&self.name, &e).into_sink_error()),
        }
    }
}

/// What a dead-letter record says about its task, for the attributes.
#[derive(Debug, PartialEq, Eq)]
struct DeadLetter {
    reason: String,
    /// Decimal, or empty when the record has none (the attribute is then left out).
    attempts: String,
    task_id: String,
    /// Empty for a poison body (the attribute is then left out).
    event_name: String,
    group: Option<String>,
}

impl DeadLetter {
    fn read(task_name: &str, record: &Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let body = record.get("body");
        let is_envelope =
            body.and_then(|b| b.get("format")).and_then(Value::as_str) == Some(FORMAT);
        let (task_id, event_name, group) = match body {
            Some(b) if is_envelope => (
                text(b.get("id")),
                text(b.get("type")).unwrap_or_default(),
                text(b.get("group")).filter(|g| !g.is_empty()),
            ),
            Some(b) => {
                let typed = text(b.get("type")).or_else(|| text(b.get("event")));
                (None, typed.unwrap_or_else(|| "event".into()), None)
            }
            None => (None, String::new(), None),
        };
        DeadLetter {
            reason: text(record.get("reason")).unwrap_or_default(),
            attempts: record
                .get("attempts")
                .and_then(Value::as_u64)
                .map(|n| n.to_string())
                .unwrap_or_default(),
            task_id: task_id.unwrap_or_else(|| task_name.to_string()),
            event_name,
            group,
        }
    }
}

impl DeadLetterSink for DeadLetterQueue {
    fn destination(&self) -> String {
        format!("SQS queue {}", self.name)
    }

    fn send<'a>(
        &'a self,
        name: &'a str,
        record: &'a Value,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            DeadLetterQueue::send(self, name, record)
                .await
                .map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dead_letter_attributes_come_from_the_record() {
        let envelope = json!({"format": FORMAT, "id": "ev-1", "type": "user.signup",
            "time": "2026-11-22T10:00:00Z", "payload": {}, "group": "g"});
        let record = json!({"task": "task-0000000001", "reason": "permanent failure",
            "attempts": 2, "last_error": "boom", "body": envelope});
        assert_eq!(
            DeadLetter::read("task-0000000001", &record),
            DeadLetter {
                reason: "permanent failure".into(),
                attempts: "2".into(),
                task_id: "ev-1".into(),
                event_name: "user.signup".into(),
                group: Some("g".into()),
            }
        );
        let plain = json!({"reason": "r", "attempts": 1, "body": {"event": "x.y", "id": 5}});
        let read = DeadLetter::read("task-0000000002", &plain);
        assert_eq!(
            (read.task_id.as_str(), read.event_name.as_str()),
            ("task-0000000002", "x.y")
        );
        let untyped = json!({"reason": "r", "attempts": 1, "body": [1, 2]});
        assert_eq!(
            DeadLetter::read("task-0000000003", &untyped).event_name,
            "event"
        );
        let poison = json!({"reason": "body is not JSON", "attempts": 1, "body_text": "{x"});
        let read = DeadLetter::read("task-0000000004", &poison);
        assert_eq!(
            (read.task_id.as_str(), read.event_name.as_str()),
            ("task-0000000004", "")
        );
    }
}
