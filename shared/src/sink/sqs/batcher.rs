//! Sending: one message with `SendMessage`, or many with `SendMessageBatch` through the
//! batcher; each caller gets its own message's result.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, SendMessageBatchRequestEntry, SendMessageBatchResultEntry,
};
use tokio::sync::{mpsc, oneshot};

use super::classify::{Failure, classify, classify_entry, resend_singly, service_code, truncate};
use super::message::Outgoing;
use super::{BATCH_BYTES, BATCH_LINGER, BATCH_MAX, SqsSpec};
use crate::sink::error::SinkError;

/// What a sink and its batcher share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) client: Client,
    pub(super) spec: SqsSpec,
    /// Whether the queue is FIFO, from its URL: it then needs group and deduplication ids.
    pub(super) fifo: bool,
    /// The queue's name, for error messages.
    pub(super) name: String,
    pub(super) batches: AtomicU64,
    pub(super) batched_messages: AtomicU64,
    pub(super) single_sends: AtomicU64,
}

/// A message handed to the batcher, and where its result goes.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) message: Outgoing,
    pub(super) reply: oneshot::Sender<Result<(), SinkError>>,
}

impl Shared {
    /// Sends one message with `SendMessage`.
    pub(super) async fn send_one(&self, message: Outgoing) -> Result<(), SinkError> {
        self.single_sends.fetch_add(1, Ordering::Relaxed);
        let output = self
            .client
            .send_message()
            .queue_url(&self.spec.queue_url)
            .message_body(message.body)
            .set_message_attributes(Some(message.attributes))
            .set_message_group_id(message.group)
            .set_message_deduplication_id(message.deduplication_id)
            .send()
            .await
            .map_err(|e| classify(&self.name, &e).into_sink_error())?;
        tracing::debug!(
            task = %message.task,
            queue = %self.name,
            message_id = output.message_id().unwrap_or_default(),
            "delivered to sqs"
        );
        Ok(())
    }

    /// Sends `batch` (at most [`BATCH_MAX`] messages, at most [`BATCH_BYTES`]) and answers
    /// each caller with its message's result.
    async fn send_batch(&self, batch: Vec<Pending>) {
        // Callers that have gone (stopped at the deadline) no longer want their message sent.
        let batch: Vec<Pending> = batch.into_iter().filter(|p| !p.reply.is_closed()).collect();
        if batch.len() <= 1 {
            for p in batch {
                let result = self.send_one(p.message).await;
                let _ = p.reply.send(result);
            }
            return;
        }
        let entries: Vec<SendMessageBatchRequestEntry> = batch
            .iter()
            .enumerate()
            .map(|(i, p)| p.message.entry(i))
            .collect();
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched_messages
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let sent = self
            .client
            .send_message_batch()
            .queue_url(&self.spec.queue_url)
            .set_entries(Some(entries))
            .send()
            .await;
        match sent {
            Ok(output) => self.answer_batch(batch, &output),
            Err(error) if resend_singly(service_code(&error)) => {
                tracing::debug!(
                    queue = %self.name,
                    error = %classify(&self.name, &error).message,
                    "batch refused as a whole: sending its messages one by one"
                );
                let singles = batch.into_iter().map(|p| async move {
                    let result = self.send_one(p.message).await;
                    let _ = p.reply.send(result);
                });
                futures::future::join_all(singles).await;
            }
            Err(error) => {
                let failure = classify(&self.name, &error);
                for p in batch {
                    let _ = p.reply.send(Err(failure.clone().into_sink_error()));
                }
            }
        }
    }

    /// Answers each caller of a sent batch with its entry's result.
    fn answer_batch(&self, batch: Vec<Pending>, output: &SendMessageBatchOutput) {
        let results = entry_results(
            &self.name,
            batch.len(),
            output.successful(),
            output.failed(),
        );
        for (i, (p, result)) in batch.into_iter().zip(results).enumerate() {
            if result.is_ok() {
                let message_id = output
                    .successful()
                    .iter()
                    .find(|s| s.id() == i.to_string())
                    .map(|s| s.message_id());
                tracing::debug!(
                    task = %p.message.task,
                    queue = %self.name,
                    message_id = message_id.unwrap_or_default(),
                    "delivered to sqs in a batch"
                );
            }
            let _ = p.reply.send(result);
        }
    }
}

/// The batcher: gathers messages into batches and sends each batch on a task of its own. Ends
/// when every sender (every clone of the sink) is gone, after sending what was waiting.
pub(super) async fn batcher(shared: Arc<Shared>, mut inbox: mpsc::Receiver<Pending>) {
    while let Some(first) = inbox.recv().await {
        let mut waiting = vec![first];
        let until = tokio::time::Instant::now() + BATCH_LINGER;
        while waiting.len() < BATCH_MAX {
            match tokio::time::timeout_at(until, inbox.recv()).await {
                Ok(Some(pending)) => waiting.push(pending),
                Ok(None) | Err(_) => break,
            }
        }
        let sizes: Vec<usize> = waiting.iter().map(|p| p.message.size).collect();
        let mut waiting = waiting.into_iter();
        for count in split_by_size(&sizes, BATCH_BYTES) {
            let batch: Vec<Pending> = waiting.by_ref().take(count).collect();
            let shared = shared.clone();
            tokio::spawn(async move { shared.send_batch(batch).await });
        }
    }
}

/// How to cut messages of `sizes`, in order, into batches of at most `limit` bytes: the
/// number of messages in each batch. A message above `limit` makes a batch of its own.
fn split_by_size(sizes: &[usize], limit: usize) -> Vec<usize> {
    let mut counts = Vec::new();
    let (mut count, mut bytes) = (0, 0);
    for &size in sizes {
        if count > 0 && bytes + size > limit {
            counts.push(count);
            (count, bytes) = (0, 0);
        }
        count += 1;
        bytes += size;
    }
    if count > 0 {
        counts.push(count);
    }
    counts
}

/// Each entry's result, by index, from a batch's answer; see "Batching" in the module
/// documentation.
fn entry_results(
    name: &str,
    count: usize,
    successful: &[SendMessageBatchResultEntry],
    failed: &[BatchResultErrorEntry],
) -> Vec<Result<(), SinkError>> {
    let mut results: Vec<Result<(), SinkError>> = (0..count)
        .map(|_| {
            Err(SinkError::Retryable(format!(
                "SQS queue {name}: unreadable response (no result for this message in its batch)"
            )))
        })
        .collect();
    let index = |id: &str| id.parse::<usize>().ok().filter(|&i| i < count);
    for entry in successful {
        if let Some(i) = index(entry.id()) {
            results[i] = Ok(());
        }
    }
    for entry in failed {
        let Some(i) = index(entry.id()) else { continue };
        let (retryable, what) = classify_entry(entry.code(), entry.sender_fault());
        let detail = match entry.message() {
            Some(message) => format!("{}: {message}", entry.code()),
            None => entry.code().to_string(),
        };
        results[i] = Err(Failure {
            retryable,
            message: format!("SQS queue {name}: {what} ({})", truncate(&detail)),
        }
        .into_sink_error());
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_by_size_in_order() {
        assert_eq!(split_by_size(&[], 100), Vec::<usize>::new());
        assert_eq!(split_by_size(&[10; 10], 100), [10]);
        assert_eq!(split_by_size(&[40, 40, 40, 10, 50], 100), [2, 3]);
        assert_eq!(split_by_size(&[40, 40, 40, 10, 60], 100), [2, 2, 1]);
        assert_eq!(split_by_size(&[150, 10, 10], 100), [1, 2]);
        assert_eq!(split_by_size(&[10, 150, 10], 100), [1, 1, 1]);
        assert_eq!(split_by_size(&[100, 1], 100), [1, 1]);
    }

    #[test]
    fn each_batch_entry_gets_its_own_result() {
        let ok = |id: &str| {
            SendMessageBatchResultEntry::builder()
                .id(id)
                .message_id("m")
                .md5_of_message_body("x")
                .build()
                .unwrap()
        };
        let failed = |id: &str, code: &str, sender_fault: bool| {
            BatchResultErrorEntry::builder()
                .id(id)
                .code(code)
                .sender_fault(sender_fault)
                .message("detail")
                .build()
                .unwrap()
        };
        let results = entry_results(
            "q",
            6,
            &[ok("0"), ok("3"), ok("99")],
            &[
                failed("1", "InvalidParameterValue", true),
                failed("2", "InternalError", false),
                failed("4", "SomethingNew", true),
                failed("5", "RequestThrottled", true),
            ],
        );
        assert!(results[0].is_ok() && results[3].is_ok());
        match &results[1] {
            Err(SinkError::Permanent(e)) => {
                assert_eq!(
                    e,
                    "SQS queue q: message refused (InvalidParameterValue: detail)"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&results[2], Err(SinkError::Retryable(e)) if e.contains("unavailable")));
        assert!(
            matches!(&results[4], Err(SinkError::Permanent(e)) if e.contains("message refused (SomethingNew"))
        );
        assert!(matches!(&results[5], Err(SinkError::Retryable(e)) if e.contains("throttled")));
        // An entry in neither list: retried, not lost nor buried.
        let results = entry_results("q", 2, &[ok("0")], &[]);
        assert!(matches!(&results[1], Err(SinkError::Retryable(e)) if e.contains("no result")));
    }
}
