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
//! The SDK first retries what it deems transient itself (standard mode: 3 attempts in all).
//! What is left is classified by `classify`: by SQS's error code, then its HTTP status (a
//! missing queue, access denied, a refused message or an unusable key are permanent;
//! throttling, expired credentials and 5xx are worth another try), and by the kind of SDK
//! failure (timeouts, unreachable endpoints, missing credentials and unreadable responses are
//! worth another try, so a fixed deploy picks the task up again; a request that cannot be built
//! is permanent). The tables are the tests beside the code in `classify.rs`.
//!
//! A message names the queue by the last segment of its URL and quotes at most 200 bytes of
//! detail, on one line: `SQS queue orders.fifo: does not exist (AWS.SimpleQueueService.NonExistentQueue:
//! The specified queue does not exist.)`.
//!
//! # Batching
//!
//! With [`SqsSpec::batch`] on (the default of an `sqs` route, `"batch": false` turns it off), a
//! sink owns a small *batcher*: a Tokio task, spawned when the sink is built, fed through a
//! channel. [`SqsSink::deliver`] hands the task's message (built exactly as for `SendMessage`)
//! to the batcher and waits for that message's own result, so a drain's concurrent handlers
//! share requests without the pipeline knowing: each task still completes, retries or is
//! dead-lettered on its own.
//!
//! - The batcher sends when [`BATCH_MAX`] (10, SQS's limit) messages are waiting, or
//!   [`BATCH_LINGER`] (3 ms) after the first of them arrived. In a drain, handlers start one
//!   ZooKeeper round trip apart, so a few milliseconds gather several of them; it costs at most
//!   3 ms on one delivery. A lone message after the linger goes out with `SendMessage`.
//!   Batches are sent concurrently: the batcher never waits for an answer before gathering the
//!   next batch.
//! - A batch carries at most [`BATCH_BYTES`] (256 KiB) of bodies and attributes, SQS's classic
//!   batch limit: what would pass it starts another batch, and a single message above it is
//!   sent alone with `SendMessage`. Entry ids are the message's index in its batch.
//! - Each entry's result is its task's; a failed entry is classified by its code and whether
//!   SQS blames the sender (throttling and expired credentials never make a message
//!   permanent). An entry missing from both lists is worth another try.
//! - A batch refused as a whole for a reason that may concern one message only (a refused
//!   message, or the batch's shape) is sent again message by message, so one bad message does
//!   not take its neighbours to the dead letters; any other whole-request failure is every
//!   entry's result.
//! - A message whose caller has gone (its handler was stopped at the deadline) before its batch
//!   is sent is left out. When the sink (its last clone) is dropped, the batcher sends what is
//!   waiting and ends.
//! - [`SqsSink::stats`] counts the requests of each kind, so tests and benchmarks can see the
//!   batching.
//!
//! # The dead-letter queue
//!
//! [`DeadLetterQueue`] is a [`DeadLetterSink`](crate::dead::DeadLetterSink): it sends the
//! dead-letter record the library writes under `ROOT/dead` (see `docs/WIRE-FORMAT.md`), as
//! JSON, with:
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
//! deduplication id is [`fifo_token`] of the task name and the record's `dead_at`.
//!
//! # The client
//!
//! [`client()`] reads the standard AWS environment (region, credentials, `AWS_ENDPOINT_URL_SQS`,
//! profiles). It is built with the lean SDK feature set: one HTTP client, hyper 1 with rustls on
//! ring, trusting the system's roots; no SSO or `credential_process` profiles. Connecting is
//! bounded by 3.1 s, one attempt by 10 s, a whole call, retries included, by 30 s.
//! [`local_client`] talks to a local endpoint (moto) with fixed fake credentials and region, so
//! it never looks for real ones, nor at the instance metadata address.

mod batcher;
mod classify;
mod client;
mod dead_letter;
mod fifo;
mod message;
mod reachable;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_sqs::Client;
use tokio::sync::{mpsc, oneshot, watch};

pub use client::{LOCAL_REGION, client, local_client};
pub use dead_letter::DeadLetterQueue;
pub use fifo::{deduplication_id, fifo_token, is_fifo, message_group_id};
pub use reachable::{Unreachable, reachable};

use super::error::SinkError;
use crate::task::Task;
use batcher::{Pending, Shared, batcher};
use fifo::queue_name;
use message::Outgoing;

/// The message attribute names this module writes.
pub const EVENT_NAME: &str = "EventName";
/// Always `event-bridge`: who sent it.
pub const SOURCE: &str = "Source";
/// The task's envelope id.
pub const TASK_ID: &str = "TaskId";
/// Which attempt this is, from 1 (deliveries only).
pub const ATTEMPT: &str = "Attempt";
/// Why the task died (dead letters only).
pub const REASON: &str = "Reason";
/// Attempts the task had (dead letters only).
pub const ATTEMPTS: &str = "Attempts";
/// W3C Trace Context of the task, when it carries one (the attribute is left out otherwise).
pub const TRACEPARENT: &str = "traceparent";

/// The value of the `Source` attribute.
pub const SOURCE_VALUE: &str = "event-bridge";

/// The group of a FIFO message whose task has no group and whose spec names none.
pub const DEFAULT_GROUP: &str = "default";

/// Messages in one `SendMessageBatch`, at most (SQS's limit).
pub const BATCH_MAX: usize = 10;

/// Bytes of bodies and attributes in one `SendMessageBatch`, at most: 256 KiB.
pub const BATCH_BYTES: usize = 256 * 1024;

/// How long the batcher waits, after a batch's first message, for more.
pub const BATCH_LINGER: Duration = Duration::from_millis(3);

/// Messages waiting for the batcher, at most; callers beyond wait to hand theirs over.
const BATCH_CHANNEL: usize = 256;

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

/// Requests a sink has made so far (its clones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqsStats {
    /// `SendMessageBatch` requests.
    pub batches: u64,
    /// Messages in those requests.
    pub batched_messages: u64,
    /// `SendMessage` requests: unbatched deliveries, lone or oversized messages, and messages
    /// sent again one by one after their batch was refused as a whole.
    pub single_sends: u64,
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
    pub async fn deliver(&self, task: &Task) -> Result<(), SinkError> {
        let shared = &self.shared;
        let message = Outgoing::for_task(task, shared.fifo, shared.spec.default_group.as_deref());
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
            Err(SinkError::Retryable(format!(
                "SQS queue {}: the batch was lost before its answer",
                self.shared.name
            )))
        })
    }
}
