//! The SQS sink: sends each task's payload to an Amazon SQS queue; and the optional SQS
//! dead-letter queue (`DEAD_LETTER_QUEUE_URL`), which receives a copy of each dead letter.
//!
//! # What is sent
//!
//! One message per attempt: sent alone with `SendMessage`, or with others in a
//! `SendMessageBatch` when batching is on (see "Batching" below). The body is the task's payload (`envelope.payload`) as compact
//! JSON; what the bridge knows about the task travels in message attributes:
//!
//! | Attribute | Type | Value |
//! |---|---|---|
//! | `EventName` | `String` | the envelope's `type`, such as `user.signup` |
//! | `Source` | `String` | `event-bridge` |
//! | `TaskId` | `String` | the envelope's `id`: the same on every attempt and after a redrive |
//! | `Attempt` | `Number` | this claim's number, 1 on the first |
//!
//! SQS refuses an empty attribute value, so an attribute whose value would be empty is left
//! out rather than failing the message.
//!
//! # FIFO queues
//!
//! A queue whose URL ends in `.fifo` is a FIFO queue, and each message also carries:
//!
//! | Field | Value |
//! |---|---|
//! | `MessageGroupId` | the envelope's `group`, else the spec's `default_group`, else `default` |
//! | `MessageDeduplicationId` | the envelope's `idempotency_key`, else its `id` |
//!
//! The deduplication id is the same on every attempt, so a delivery that is retried after SQS
//! took it (the reply was lost, the lease ran out) is dropped by SQS as a duplicate within its
//! five-minute window instead of arriving twice. Both fields allow 1 to 128 characters from
//! ASCII `!` to `~` (letters, digits, punctuation; no spaces); a value outside that (empty,
//! longer, a space, non-ASCII) is sent as `sha256-` and the lowercase hex SHA-256 of its UTF-8
//! bytes (71 characters), which is stable across consumers and versions. [`fifo_token`] is that
//! rule; [`message_group_id`] and [`deduplication_id`] apply it. An empty `group` or
//! `idempotency_key` counts as absent.
//!
//! # How an error is read
//!
//! The SDK first retries what it deems transient itself (standard mode: 3 attempts in all). What
//! is left is classified:
//!
//! | SQS says | Result |
//! |---|---|
//! | `AWS.SimpleQueueService.NonExistentQueue` (`is_queue_does_not_exist()`) | [`HandlerError::Permanent`]: "does not exist" |
//! | `AccessDenied`, `InvalidSecurity`, `InvalidClientTokenId`, `UnrecognizedClientException`, `SignatureDoesNotMatch`, `KMS.AccessDeniedException`, … | [`HandlerError::Permanent`]: "access denied" |
//! | `InvalidMessageContents`, `InvalidParameterValue` (too large a message, say), `MissingParameter`, … | [`HandlerError::Permanent`]: "message refused" |
//! | `KMS.DisabledException`, `KMS.NotFoundException`, `KMS.InvalidStateException`, … | [`HandlerError::Permanent`]: "encryption key unusable" |
//! | `RequestThrottled`, `ThrottlingException`, `KMS.ThrottlingException`, …, HTTP 429 | [`HandlerError::Retryable`]: "throttled" |
//! | `ExpiredToken`, `RequestExpired` | [`HandlerError::Retryable`]: "credentials expired" (the next attempt loads fresh ones) |
//! | `InternalError`, `ServiceUnavailable`, any HTTP 5xx | [`HandlerError::Retryable`]: "unavailable" |
//! | any other error code (other 4xx) | [`HandlerError::Permanent`]: "request refused" |
//!
//! | The SDK says | Result |
//! |---|---|
//! | timeout | [`HandlerError::Retryable`]: "timed out" |
//! | dispatch failure: connection refused or reset, DNS, TLS | [`HandlerError::Retryable`]: "unreachable" |
//! | dispatch failure: no credentials, no region, no endpoint | [`HandlerError::Retryable`]: "could not send" (so a fixed deploy picks the task up again; after `MAX_ATTEMPTS` it is dead) |
//! | an unreadable response | [`HandlerError::Retryable`]: "unreadable response" |
//! | the request could not be built | [`HandlerError::Permanent`]: "request could not be built" |
//!
//! A message names the queue by the last segment of its URL and quotes at most 200 bytes of
//! detail, on one line: `SQS queue orders.fifo: does not exist (AWS.SimpleQueueService.NonExistentQueue:
//! The specified queue does not exist.)`.
//!
//! # Batching
//!
//! With [`SqsSpec::batch`] on (the default of an `sqs` route, `"batch": false` turns it off), a
//! sink owns a small *batcher*: a Tokio task, spawned when the sink is built, fed through a
//! channel. [`SqsSink::deliver`] hands the task's message (built exactly as for `SendMessage`:
//! same body, attributes, group and deduplication id) to the batcher and waits for that
//! message's own result, so a drain's concurrent handlers share requests without the pipeline
//! knowing: each task still completes, retries or is dead-lettered on its own.
//!
//! - The batcher sends when [`BATCH_MAX`] (10, SQS's limit) messages are waiting, or
//!   [`BATCH_LINGER`] (3 ms) after the first of them arrived. In a drain, handlers start one
//!   ZooKeeper round trip apart (a claim each, up to `DRAIN_CONCURRENCY` in flight), so a few
//!   milliseconds gather several of them; it costs at most 3 ms on one delivery, little beside
//!   an SQS call (several ms within a region) and the task's own three ZooKeeper requests. A
//!   lone message after the linger goes out with `SendMessage`. Batches are sent concurrently:
//!   the batcher never waits for an answer before gathering the next batch.
//! - A batch carries at most [`BATCH_BYTES`] (256 KiB) of bodies and attributes, SQS's classic
//!   batch limit (raised to 1 MiB in 2025; the lower one suits every SQS-compatible endpoint):
//!   what would pass it starts another batch, and a single message above it is sent alone with
//!   `SendMessage`. Entry ids are the message's index in its batch (`0`…`9`).
//! - Each entry's result is its task's: `Successful` → delivered. `Failed` with `SenderFault`
//!   → [`HandlerError::Permanent`], named by its code through the table below ("message
//!   refused" for an unknown code), except throttling and expired credentials, which are never
//!   the message's fault and stay [`HandlerError::Retryable`]; `Failed` without `SenderFault`
//!   → [`HandlerError::Retryable`]. An entry missing from both lists → retryable ("unreadable
//!   response").
//! - A batch refused as a whole for a reason that may concern one message only (a message
//!   refused, `InvalidParameterValue` for one too large, say; or the batch's shape:
//!   `BatchRequestTooLong`, `TooManyEntriesInBatchRequest`, `BatchEntryIdsNotDistinct`,
//!   `InvalidBatchEntryId`) is sent again message by message with `SendMessage`, so each gets
//!   its own verdict: one bad message does not take its neighbours to the dead letters (SQS
//!   applies nothing of a batch it refuses as a whole). Any other whole-request failure (a
//!   missing queue, access denied, throttling, a timeout, an unreachable endpoint) is every
//!   entry's result, classified as for `SendMessage`.
//! - A message whose caller has gone (its handler was stopped at the deadline) before its batch
//!   is sent is left out. When the sink (its last clone) is dropped, the batcher sends what is
//!   waiting and ends; sends already under way finish on their own.
//! - [`SqsSink::stats`] counts the requests of each kind, so tests and benchmarks can see the
//!   batching.
//!
//! # The dead-letter queue
//!
//! [`DeadLetterQueue::send`] sends the dead-letter record the library writes under `ROOT/dead`
//! (see `docs/WIRE-FORMAT.md`), as JSON, with:
//!
//! | Attribute | Type | Value |
//! |---|---|---|
//! | `Reason` | `String` | the record's `reason`, such as `permanent failure` |
//! | `Attempts` | `Number` | the record's `attempts` |
//! | `TaskId` | `String` | the envelope's `id`; for a plain or poison body, the task's name (a plain task's id) |
//! | `EventName` | `String` | the envelope's `type`; for a plain body its `type` or `event` field, else `event`; none for a poison body |
//! | `Source` | `String` | `event-bridge` |
//!
//! On a FIFO dead-letter queue the group is the envelope's `group`, else the `TaskId`, and the
//! deduplication id is [`fifo_token`] of the task name and the record's `dead_at`. It returns the
//! error as a string: the caller keeps the ZooKeeper dead letter whatever happens here.
//!
//! # The client
//!
//! [`client`] reads the standard AWS environment (region, credentials, `AWS_ENDPOINT_URL_SQS`,
//! profiles). It is built with the lean SDK feature set: one HTTP client, hyper 1 with rustls on
//! ring, trusting the system's roots; no SSO or `credential_process` profiles. Connecting is
//! bounded by 3.1 s, one attempt by 10 s, a whole call, retries included, by 30 s.
//! [`local_client`] talks to a local endpoint (moto) with fixed fake credentials and region, so
//! it never looks for real ones, nor at the instance metadata address.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, Region};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
    SendMessageBatchResultEntry,
};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};

use crate::handler::HandlerError;
use crate::task::{Envelope, FORMAT, Task};

/// The message attribute names this module writes.
pub const EVENT_NAME: &str = "EventName";
pub const SOURCE: &str = "Source";
pub const TASK_ID: &str = "TaskId";
pub const ATTEMPT: &str = "Attempt";
pub const REASON: &str = "Reason";
pub const ATTEMPTS: &str = "Attempts";

/// The value of the `Source` attribute.
pub const SOURCE_VALUE: &str = "event-bridge";

/// The group of a FIFO message whose task has no group and whose spec names none.
pub const DEFAULT_GROUP: &str = "default";

/// The region [`local_client`] signs for.
pub const LOCAL_REGION: &str = "us-east-1";

/// How many bytes of an error's detail a message quotes.
const DETAIL_BYTES: usize = 200;

/// Messages in one `SendMessageBatch`, at most (SQS's limit).
pub const BATCH_MAX: usize = 10;

/// Bytes of bodies and attributes in one `SendMessageBatch`, at most: 256 KiB.
pub const BATCH_BYTES: usize = 256 * 1024;

/// How long the batcher waits, after a batch's first message, for more.
pub const BATCH_LINGER: Duration = Duration::from_millis(3);

/// Messages waiting for the batcher, at most; callers beyond wait to hand theirs over.
const BATCH_CHANNEL: usize = 256;

/// An SQS client from the standard AWS environment (region, credentials, `AWS_ENDPOINT_URL_SQS`).
///
/// Where no credentials are configured the standard chain ends at the EC2 instance metadata
/// service: set `AWS_EC2_METADATA_DISABLED=true` wherever that must not be tried.
pub async fn client() -> Client {
    Client::new(&loader().load().await)
}

/// An SQS client for a local endpoint such as moto's (`http://127.0.0.1:5000`): region
/// [`LOCAL_REGION`] and fake static credentials, whatever the environment says, so it never
/// searches for credentials and never reaches for the instance metadata address. The endpoint
/// given here wins over `AWS_ENDPOINT_URL_SQS`.
pub async fn local_client(endpoint: &str) -> Client {
    let config = loader()
        .region(Region::new(LOCAL_REGION))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "event-bridge-local",
        ))
        .load()
        .await;
    let sqs = aws_sdk_sqs::config::Builder::from(&config)
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(sqs)
}

/// The configuration loader both clients start from: our HTTP client and timeouts.
fn loader() -> ConfigLoader {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(3_100))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(30))
        .build();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts)
}

/// Where an [`SqsSink`] sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsSpec {
    /// The queue's URL, as `GetQueueUrl` or the console gives it; FIFO when it ends in `.fifo`.
    pub queue_url: String,
    /// The `MessageGroupId` of tasks without a `group`, on a FIFO queue; `default` when unset.
    pub default_group: Option<String>,
    /// Whether concurrent deliveries share `SendMessageBatch` requests (see "Batching").
    pub batch: bool,
}

/// Sends each task's payload to one SQS queue. Clones share the queue, the counters and the
/// batcher.
#[derive(Clone, Debug)]
pub struct SqsSink {
    shared: Arc<Shared>,
    /// The batcher's inbox, when batching is on.
    batcher: Option<mpsc::Sender<Pending>>,
    /// Closed when the batcher has ended (its sender lives in the batcher).
    batcher_alive: Option<watch::Receiver<()>>,
}

/// What a sink and its batcher share.
#[derive(Debug)]
struct Shared {
    client: Client,
    spec: SqsSpec,
    /// Whether the queue is FIFO, from its URL: it then needs group and deduplication ids.
    fifo: bool,
    /// The queue's name, for error messages.
    name: String,
    batches: AtomicU64,
    batched_messages: AtomicU64,
    single_sends: AtomicU64,
}

/// Requests a sink has made so far (its clones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqsStats {
    /// `SendMessageBatch` requests.
    pub batches: u64,
    /// Messages in those requests.
    pub batched_messages: u64,
    /// `SendMessage` requests: unbatched deliveries, lone or oversized messages, and messages
    /// sent again one by one after their batch was refused as a whole.
    pub single_sends: u64,
}

/// One message, ready for `SendMessage` or a batch entry.
#[derive(Clone, Debug)]
struct Outgoing {
    /// The task's name, for logs.
    task: String,
    body: String,
    attributes: HashMap<String, MessageAttributeValue>,
    group: Option<String>,
    deduplication_id: Option<String>,
    /// Body and attributes, in bytes, as SQS counts them against its size limits.
    size: usize,
}

/// A message handed to the batcher, and where its result goes.
#[derive(Debug)]
struct Pending {
    message: Outgoing,
    reply: oneshot::Sender<Result<(), HandlerError>>,
}

impl SqsSink {
    /// A sink for `spec.queue_url`; a FIFO one when the URL ends in `.fifo`. With `spec.batch`
    /// it spawns its batcher on the current Tokio runtime; outside one it sends unbatched.
    pub fn new(client: Client, spec: SqsSpec) -> Self {
        let batch = spec.batch;
        let shared = Arc::new(Shared {
            fifo: is_fifo(&spec.queue_url),
            name: queue_name(&spec.queue_url).to_string(),
            client,
            spec,
            batches: AtomicU64::new(0),
            batched_messages: AtomicU64::new(0),
            single_sends: AtomicU64::new(0),
        });
        let (batcher, batcher_alive) = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if batch => {
                let (inbox, receiver) = mpsc::channel(BATCH_CHANNEL);
                let (alive, alive_receiver) = watch::channel(());
                let shared = shared.clone();
                runtime.spawn(async move {
                    batcher(shared, receiver).await;
                    drop(alive);
                });
                (Some(inbox), Some(alive_receiver))
            }
            Err(_) if batch => {
                tracing::warn!(queue = %shared.name, "no Tokio runtime: sqs sink sends unbatched");
                (None, None)
            }
            _ => (None, None),
        };
        SqsSink {
            shared,
            batcher,
            batcher_alive,
        }
    }

    /// A future that resolves once this sink's batcher has ended (at once without one): after
    /// the sink and all its clones are dropped and what was waiting is sent.
    pub fn batcher_ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let alive = self.batcher_alive.clone();
        async move {
            if let Some(mut alive) = alive {
                while alive.changed().await.is_ok() {}
            }
        }
    }

    /// Whether the queue is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.shared.fifo
    }

    /// Whether deliveries go through the batcher.
    pub fn is_batched(&self) -> bool {
        self.batcher.is_some()
    }

    /// The requests made so far.
    pub fn stats(&self) -> SqsStats {
        SqsStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            batched_messages: self.shared.batched_messages.load(Ordering::Relaxed),
            single_sends: self.shared.single_sends.load(Ordering::Relaxed),
        }
    }

    /// Sends `task`'s payload with its attributes, alone or in a batch; see the module
    /// documentation.
    pub async fn deliver(&self, task: &Task) -> Result<(), HandlerError> {
        let message = self.shared.message(task);
        let batcher = match &self.batcher {
            Some(batcher) if message.size <= BATCH_BYTES => batcher,
            _ => return self.shared.send_one(message).await,
        };
        let (reply, answer) = oneshot::channel();
        if let Err(refused) = batcher.send(Pending { message, reply }).await {
            // The batcher is gone (its runtime is shutting down): send it ourselves.
            return self.shared.send_one(refused.0.message).await;
        }
        answer.await.unwrap_or_else(|_| {
            Err(HandlerError::Retryable(format!(
                "SQS queue {}: the batch was lost before its answer",
                self.shared.name
            )))
        })
    }
}

impl Shared {
    /// `task`'s message: body, attributes and, on a FIFO queue, group and deduplication id.
    fn message(&self, task: &Task) -> Outgoing {
        let envelope = &task.envelope;
        let body = envelope.payload.to_string();
        let (attributes, attributes_size) = attributes([
            (EVENT_NAME, "String", envelope.event_type.clone()),
            (SOURCE, "String", SOURCE_VALUE.to_string()),
            (TASK_ID, "String", envelope.id.clone()),
            (ATTEMPT, "Number", task.attempt().to_string()),
        ]);
        let (group, deduplication_id) = if self.fifo {
            (
                Some(message_group_id(
                    envelope,
                    self.spec.default_group.as_deref(),
                )),
                Some(deduplication_id(envelope)),
            )
        } else {
            (None, None)
        };
        Outgoing {
            task: task.name.clone(),
            size: body.len() + attributes_size,
            body,
            attributes,
            group,
            deduplication_id,
        }
    }

    /// Sends one message with `SendMessage`.
    async fn send_one(&self, message: Outgoing) -> Result<(), HandlerError> {
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
            .map_err(|e| classify(&self.name, &e).into_handler_error())?;
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
            Ok(output) => {
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
                    let _ = p.reply.send(Err(failure.clone().into_handler_error()));
                }
            }
        }
    }
}

impl Outgoing {
    /// This message as entry `index` of a batch.
    fn entry(&self, index: usize) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(self.body.clone())
            .set_message_attributes(Some(self.attributes.clone()))
            .set_message_group_id(self.group.clone())
            .set_message_deduplication_id(self.deduplication_id.clone())
            .build()
            .expect("id and body are set")
    }
}

/// The batcher: gathers messages into batches and sends each batch on a task of its own. Ends
/// when every sender (every clone of the sink) is gone, after sending what was waiting.
async fn batcher(shared: Arc<Shared>, mut inbox: mpsc::Receiver<Pending>) {
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
) -> Vec<Result<(), HandlerError>> {
    let mut results: Vec<Result<(), HandlerError>> = (0..count)
        .map(|_| {
            Err(HandlerError::Retryable(format!(
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
        .into_handler_error());
    }
    results
}

/// Whether a failed batch entry is worth another try, and what it means: see "Batching".
fn classify_entry(code: &str, sender_fault: bool) -> (bool, &'static str) {
    let (retryable, what) = classify_service(Some(code), 400);
    match (sender_fault, retryable, what) {
        (true, false, "request refused") => (false, "message refused"),
        (true, _, _) => (retryable, what),
        (false, true, _) => (true, what),
        (false, false, _) => (true, "unavailable"),
    }
}

/// The error code of a service error, if `error` is one.
fn service_code<E: ProvideErrorMetadata>(error: &SdkError<E, HttpResponse>) -> Option<&str> {
    match error {
        SdkError::ServiceError(context) => context.err().code(),
        _ => None,
    }
}

/// Whether a batch refused as a whole with `code` is sent again message by message: when the
/// refusal may be about one message, or about the batch's shape.
fn resend_singly(code: Option<&str>) -> bool {
    let Some(code) = code else { return false };
    let code = code.trim_start_matches("AWS.SimpleQueueService.");
    matches!(
        code,
        "BatchRequestTooLong"
            | "TooManyEntriesInBatchRequest"
            | "BatchEntryIdsNotDistinct"
            | "InvalidBatchEntryId"
    ) || matches!(
        classify_service(Some(code), 400),
        (false, "message refused")
    )
}

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
    pub async fn send(&self, task_name: &str, record: &Value) -> Result<(), String> {
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
            Err(e) => Err(classify(&self.name, &e).message),
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

/// The message attributes whose value is not empty (SQS refuses empty ones), and their size
/// as SQS counts it (name, data type and value).
fn attributes<const N: usize>(
    list: [(&str, &str, String); N],
) -> (HashMap<String, MessageAttributeValue>, usize) {
    let mut map = HashMap::with_capacity(N);
    let mut size = 0;
    for (name, data_type, value) in list {
        if value.is_empty() {
            continue;
        }
        size += name.len() + data_type.len() + value.len();
        let value = MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
            .expect("the data type is set");
        map.insert(name.to_string(), value);
    }
    (map, size)
}

/// Whether `queue_url` names a FIFO queue.
pub fn is_fifo(queue_url: &str) -> bool {
    queue_url.trim_end_matches('/').ends_with(".fifo")
}

/// The last segment of a queue URL: the queue's name.
fn queue_name(queue_url: &str) -> &str {
    let url = queue_url.trim_end_matches('/');
    url.rsplit('/').next().unwrap_or(url)
}

/// The `MessageGroupId` of `envelope` on a FIFO queue: its group, else `default_group`, else
/// [`DEFAULT_GROUP`]; through [`fifo_token`].
pub fn message_group_id(envelope: &Envelope, default_group: Option<&str>) -> String {
    let group = [envelope.group.as_deref(), default_group]
        .into_iter()
        .flatten()
        .find(|g| !g.is_empty())
        .unwrap_or(DEFAULT_GROUP);
    fifo_token(group)
}

/// The `MessageDeduplicationId` of `envelope` on a FIFO queue: its idempotency key, else its
/// id; through [`fifo_token`].
pub fn deduplication_id(envelope: &Envelope) -> String {
    let key = envelope
        .idempotency_key
        .as_deref()
        .filter(|k| !k.is_empty())
        .unwrap_or(&envelope.id);
    fifo_token(key)
}

/// `value` if SQS accepts it as a group or deduplication id (1 to 128 characters from ASCII `!`
/// to `~`), else `sha256-` and the lowercase hex SHA-256 of its UTF-8 bytes.
pub fn fifo_token(value: &str) -> String {
    let fits =
        (1..=128).contains(&value.len()) && value.bytes().all(|b| (b'!'..=b'~').contains(&b));
    if fits {
        return value.to_string();
    }
    let digest = Sha256::digest(value.as_bytes());
    let mut token = String::with_capacity(7 + 64);
    token.push_str("sha256-");
    for byte in digest {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

/// An SQS failure, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    retryable: bool,
    message: String,
}

impl Failure {
    fn into_handler_error(self) -> HandlerError {
        if self.retryable {
            HandlerError::Retryable(self.message)
        } else {
            HandlerError::Permanent(self.message)
        }
    }
}

/// Classifies an SDK error on queue `name`; the tables are in the module documentation.
fn classify<E>(name: &str, error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (retryable, what, detail) = match error {
        SdkError::ServiceError(context) => {
            let err = context.err();
            let status = context.raw().status().as_u16();
            let (retryable, what) = classify_service(err.code(), status);
            let detail = match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_string(),
                (None, Some(message)) => format!("HTTP {status}: {message}"),
                (None, None) => format!("HTTP {status}"),
            };
            (retryable, what, detail)
        }
        SdkError::TimeoutError(_) => (true, "timed out", String::new()),
        SdkError::DispatchFailure(failure) => {
            let what = match failure.as_connector_error() {
                Some(e) if e.is_io() => "unreachable",
                Some(e) if e.is_timeout() => "timed out",
                _ => "could not send",
            };
            (true, what, context_of(error))
        }
        SdkError::ResponseError(_) => (true, "unreadable response", context_of(error)),
        SdkError::ConstructionFailure(_) => {
            (false, "request could not be built", context_of(error))
        }
        _ => (true, "failed", context_of(error)),
    };
    let message = if detail.is_empty() {
        format!("SQS queue {name}: {what}")
    } else {
        format!("SQS queue {name}: {what} ({})", truncate(&detail))
    };
    Failure { retryable, message }
}

/// Whether an error SQS answered with is worth another try, and what it means, by its code and
/// HTTP status.
fn classify_service(code: Option<&str>, status: u16) -> (bool, &'static str) {
    const MISSING: &[&str] = &[
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    ];
    const DENIED: &[&str] = &[
        "AccessDenied",
        "AccessDeniedException",
        "InvalidSecurity",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "OptInRequired",
        "KMS.AccessDeniedException",
    ];
    const MESSAGE: &[&str] = &[
        "InvalidMessageContents",
        "InvalidParameterValue",
        "InvalidParameterCombination",
        "InvalidAttributeValue",
        "InvalidAttributeName",
        "MissingParameter",
        "ValidationError",
        "ValidationException",
    ];
    const KEY: &[&str] = &[
        "KMS.DisabledException",
        "KMS.InvalidKeyUsageException",
        "KMS.InvalidStateException",
        "KMS.NotFoundException",
        "KMS.OptInRequired",
    ];
    const THROTTLED: &[&str] = &[
        "RequestThrottled",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
        "KMS.ThrottlingException",
    ];
    const EXPIRED: &[&str] = &["ExpiredToken", "ExpiredTokenException", "RequestExpired"];
    const UNAVAILABLE: &[&str] = &[
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    ];
    let is = |list: &[&str]| code.is_some_and(|c| list.contains(&c));
    if is(MISSING) {
        (false, "does not exist")
    } else if is(DENIED) {
        (false, "access denied")
    } else if is(MESSAGE) {
        (false, "message refused")
    } else if is(KEY) {
        (false, "encryption key unusable")
    } else if is(THROTTLED) || status == 429 {
        (true, "throttled")
    } else if is(EXPIRED) {
        (true, "credentials expired")
    } else if is(UNAVAILABLE) || status >= 500 {
        (true, "unavailable")
    } else {
        (false, "request refused")
    }
}

/// An error with its sources, as one line.
fn context_of(error: &(dyn std::error::Error + 'static)) -> String {
    DisplayErrorContext(error).to_string()
}

/// `text` on one line, at most [`DETAIL_BYTES`] of it, cut at a character boundary, with `…`
/// when cut.
fn truncate(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= DETAIL_BYTES {
        return text;
    }
    let mut end = DETAIL_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fifo_is_read_from_the_url() {
        let cases = [
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
                true,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo/",
                true,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
                false,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/fifo",
                false,
            ),
        ];
        for (url, fifo) in cases {
            assert_eq!(is_fifo(url), fifo, "{url}");
        }
        assert_eq!(
            queue_name("http://127.0.0.1:5000/123456789012/q.fifo"),
            "q.fifo"
        );
    }

    #[test]
    fn fifo_tokens_pass_what_sqs_accepts_and_hash_the_rest() {
        // Hashed values start with the prefix given; the empty string's is SHA-256's published
        // test vector, so the whole token is checked there.
        let empty = "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let cases: [(&str, Option<&str>); 7] = [
            ("order-7", None),
            ("a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~Z9", None),
            (&"k".repeat(128), None),
            (&"k".repeat(129), Some("sha256-")),
            ("with space", Some("sha256-")),
            ("ключ", Some("sha256-")),
            ("", Some(empty)),
        ];
        for (value, hashed) in cases {
            let token = fifo_token(value);
            match hashed {
                None => assert_eq!(token, value),
                Some(prefix) => {
                    assert!(token.starts_with(prefix), "{value:?} gave {token}");
                    assert_eq!(token.len(), 71, "{token}");
                    assert_eq!(token, fifo_token(value), "stable");
                }
            }
        }
        assert_ne!(fifo_token("with space"), fifo_token("with  space"));
    }

    #[test]
    fn group_and_deduplication_id_fall_back_in_order() {
        let mut e = Envelope::new("a.b", json!({}));
        assert_eq!(message_group_id(&e, None), "default");
        assert_eq!(message_group_id(&e, Some("")), "default");
        assert_eq!(message_group_id(&e, Some("fallback")), "fallback");
        assert_eq!(deduplication_id(&e), e.id);
        e.group = Some(String::new());
        e.idempotency_key = Some(String::new());
        assert_eq!(message_group_id(&e, Some("fallback")), "fallback");
        assert_eq!(deduplication_id(&e), e.id);
        e.group = Some("tenant-1".into());
        e.idempotency_key = Some("order-7".into());
        assert_eq!(message_group_id(&e, Some("fallback")), "tenant-1");
        assert_eq!(deduplication_id(&e), "order-7");
        e.idempotency_key = Some("x".repeat(200));
        assert!(deduplication_id(&e).starts_with("sha256-"));
    }

    #[test]
    fn service_errors_are_classified_by_code_then_status() {
        let cases: [(Option<&str>, u16, bool, &str); 14] = [
            (
                Some("AWS.SimpleQueueService.NonExistentQueue"),
                400,
                false,
                "does not exist",
            ),
            (Some("QueueDoesNotExist"), 400, false, "does not exist"),
            (Some("AccessDenied"), 403, false, "access denied"),
            (Some("InvalidClientTokenId"), 403, false, "access denied"),
            (
                Some("KMS.AccessDeniedException"),
                400,
                false,
                "access denied",
            ),
            (
                Some("InvalidMessageContents"),
                400,
                false,
                "message refused",
            ),
            (Some("InvalidParameterValue"), 400, false, "message refused"),
            (
                Some("KMS.NotFoundException"),
                400,
                false,
                "encryption key unusable",
            ),
            (Some("RequestThrottled"), 400, true, "throttled"),
            (Some("KMS.ThrottlingException"), 400, true, "throttled"),
            (None, 429, true, "throttled"),
            (Some("ExpiredToken"), 403, true, "credentials expired"),
            (Some("ServiceUnavailable"), 503, true, "unavailable"),
            (Some("SomethingNew"), 502, true, "unavailable"),
        ];
        for (code, status, retryable, what) in cases {
            assert_eq!(
                classify_service(code, status),
                (retryable, what),
                "{code:?} {status}"
            );
        }
        assert_eq!(
            classify_service(Some("SomethingNew"), 400),
            (false, "request refused")
        );
        assert_eq!(classify_service(None, 404), (false, "request refused"));
    }

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
            Err(HandlerError::Permanent(e)) => {
                assert_eq!(
                    e,
                    "SQS queue q: message refused (InvalidParameterValue: detail)"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&results[2], Err(HandlerError::Retryable(e)) if e.contains("unavailable"))
        );
        assert!(
            matches!(&results[4], Err(HandlerError::Permanent(e)) if e.contains("message refused (SomethingNew"))
        );
        assert!(matches!(&results[5], Err(HandlerError::Retryable(e)) if e.contains("throttled")));
        // An entry in neither list: retried, not lost nor buried.
        let results = entry_results("q", 2, &[ok("0")], &[]);
        assert!(matches!(&results[1], Err(HandlerError::Retryable(e)) if e.contains("no result")));
    }

    #[test]
    fn failed_entries_are_classified_by_fault_then_code() {
        let cases = [
            (
                "AWS.SimpleQueueService.NonExistentQueue",
                true,
                false,
                "does not exist",
            ),
            ("AccessDenied", true, false, "access denied"),
            ("InvalidMessageContents", true, false, "message refused"),
            ("Unknown", true, false, "message refused"),
            ("ThrottlingException", true, true, "throttled"),
            ("ExpiredToken", true, true, "credentials expired"),
            ("InternalError", false, true, "unavailable"),
            ("InvalidParameterValue", false, true, "unavailable"),
            ("RequestThrottled", false, true, "throttled"),
        ];
        for (code, sender_fault, retryable, what) in cases {
            assert_eq!(
                classify_entry(code, sender_fault),
                (retryable, what),
                "{code} {sender_fault}"
            );
        }
    }

    #[test]
    fn a_batch_refused_for_one_message_or_its_shape_is_resent_singly() {
        for code in [
            "InvalidParameterValue",
            "InvalidMessageContents",
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            "AWS.SimpleQueueService.InvalidBatchEntryId",
        ] {
            assert!(resend_singly(Some(code)), "{code}");
        }
        for code in [
            None,
            Some("AWS.SimpleQueueService.NonExistentQueue"),
            Some("AccessDenied"),
            Some("RequestThrottled"),
            Some("InternalError"),
            Some("SomethingNew"),
        ] {
            assert!(!resend_singly(code), "{code:?}");
        }
    }

    #[test]
    fn attribute_sizes_count_name_type_and_value_and_skip_empty_values() {
        let (map, size) = attributes([
            ("A", "String", "xy".to_string()),
            ("B", "Number", String::new()),
        ]);
        assert_eq!(map.len(), 1);
        assert_eq!(size, 1 + 6 + 2);
    }

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

    #[test]
    fn details_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short"), "short");
        assert_eq!(
            truncate("no credentials:\n  Environment: unset"),
            "no credentials: Environment: unset"
        );
        let long = "é".repeat(150); // 300 bytes
        let cut = truncate(&long);
        assert!(cut.ends_with('…') && cut.len() <= DETAIL_BYTES + '…'.len_utf8());
    }
}
