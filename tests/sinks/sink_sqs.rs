//! The SQS sink and dead-letter queue against moto's server on loopback, which `make test`
//! starts with `scripts/moto.sh up` (address in `MOTO_TEST_ENDPOINT`, default
//! `http://127.0.0.1:5000`). Every test makes queues of its own.
//!
//! Every test of the single-message behaviour runs twice: with batching off and on (the
//! default of an `sqs` route), where a lone message still goes out with `SendMessage` after the
//! batcher's linger. The batching tests after them send many at once.
//!
//! The clients come from `sqs::local_client`: fixed fake credentials and region, the endpoint
//! given explicitly, so nothing here reads AWS settings from the environment or reaches for the
//! instance metadata address.

use std::collections::HashMap;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use event_bridge::handler::FnHandler;
use event_bridge::sink::SinkError;
use event_bridge::sink::sqs::{self, DeadLetterQueue, SqsSink, SqsSpec};
use event_bridge::{Envelope, Handler, HandlerError, Task};
use serde_json::{Value, json};

use harness::{TestQueue, run, uuid_like};

/// moto's endpoint.
pub(crate) fn endpoint() -> String {
    std::env::var("MOTO_TEST_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

/// A client for moto; fails the test saying what to do when moto does not answer.
pub(crate) async fn moto() -> Client {
    let endpoint = endpoint();
    let address = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    if let Err(e) = tokio::net::TcpStream::connect(&address).await {
        panic!("moto is not reachable at {endpoint} ({e}): run scripts/moto.sh up");
    }
    sqs::local_client(&endpoint).await
}

/// Creates a queue no other test uses, with `attributes`; returns its URL.
pub(crate) async fn create_queue(
    client: &Client,
    fifo: bool,
    attributes: &[(QueueAttributeName, &str)],
) -> String {
    let name = format!("eb-{}{}", uuid_like(), if fifo { ".fifo" } else { "" });
    let mut request = client.create_queue().queue_name(&name);
    if fifo {
        request = request.attributes(QueueAttributeName::FifoQueue, "true");
    }
    for (attribute, value) in attributes {
        request = request.attributes(attribute.clone(), *value);
    }
    let created = request.send().await.expect("create queue on moto");
    created.queue_url().expect("queue url").to_string()
}

/// A URL of the right shape for a queue that does not exist.
pub(crate) fn missing_queue(fifo: bool) -> String {
    let suffix = if fifo { ".fifo" } else { "" };
    format!(
        "{}/123456789012/eb-missing-{}{suffix}",
        endpoint(),
        uuid_like()
    )
}

/// Receives until a receive comes back empty, deleting what it got (a FIFO group stays blocked
/// while one of its messages is in flight). moto answers a receive from everything the queue
/// holds, so an empty answer means an empty queue.
async fn drain(client: &Client, queue_url: &str) -> Vec<Message> {
    let mut all = Vec::new();
    for _ in 0..1_000 {
        let received = client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return all;
        }
        for m in &messages {
            client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().expect("receipt handle"))
                .send()
                .await
                .expect("delete");
        }
        all.extend(messages);
    }
    panic!("{queue_url} never came back empty");
}

/// A message attribute: (data type, string value).
fn attribute(message: &Message, name: &str) -> Option<(String, String)> {
    let value = message.message_attributes.as_ref()?.get(name)?;
    Some((
        value.data_type().to_string(),
        value.string_value()?.to_string(),
    ))
}

fn string(value: &str) -> Option<(String, String)> {
    Some(("String".into(), value.into()))
}

fn number(value: u64) -> Option<(String, String)> {
    Some(("Number".into(), value.to_string()))
}

/// A system attribute, such as the FIFO fields.
fn system(message: &Message, name: MessageSystemAttributeName) -> Option<String> {
    message.attributes.as_ref()?.get(&name).cloned()
}

fn body(message: &Message) -> Value {
    serde_json::from_str(message.body().expect("body")).expect("body is JSON")
}

/// Runs every task through `sink`.
struct Deliver(SqsSink);

impl Handler for Deliver {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.0.deliver(task).await.map_err(Into::into)
    }
}

/// A task as a handler would see it on its first claim, for calling the sink directly.
fn claimed(envelope: Envelope) -> Task {
    Task {
        name: "task-0000000001".into(),
        envelope: Envelope {
            attempts: 1,
            ..envelope
        },
        fencing_token: 1,
        progress: Default::default(),
        steps: Default::default(),
    }
}

/// A W3C traceparent, as a traced request would carry.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn a_standard_queue_receives_each_payload_with_its_attributes() {
    for batch in [false, true] {
        a_standard_queue_receives_each_payload_with_its_attributes_with(batch).await;
    }
}

async fn a_standard_queue_receives_each_payload_with_its_attributes_with(batch: bool) {
    let client = moto().await;
    let url = create_queue(&client, false, &[]).await;
    let t = TestQueue::new().await;
    let mut envelopes: Vec<_> = (0..5)
        .map(|i| {
            Envelope::new(
                "user.signup",
                json!({"user_id": i, "name": format!("ü{i}")}),
            )
        })
        .collect();
    envelopes[0].traceparent = Some(TRACEPARENT.into());
    t.queue.publish_many(&envelopes).await.expect("publish");
    // A plain body from a producer that does not know the envelope: its task name is its id.
    let plain = t
        .queue
        .publish_raw(br#"{"type":"report.export","user_id":99}"#)
        .await
        .expect("publish plain");

    let sink = SqsSink::new(
        client.clone(),
        SqsSpec {
            queue_url: url.clone(),
            default_group: None,
            batch,
        },
    );
    assert!(!sink.is_fifo());
    assert_eq!(sink.is_batched(), batch);
    let report = run(&t.queue, &Deliver(sink), 10).await;
    assert_eq!(
        (report.completed, report.dead_lettered, report.retried),
        (6, 0, 0),
        "{report:?}"
    );
    assert!(t.children("tasks").await.is_empty() && t.children("dead").await.is_empty());

    let messages = drain(&client, &url).await;
    assert_eq!(messages.len(), 6, "one message per task");
    let by_id: HashMap<String, &Message> = messages
        .iter()
        .map(|m| (attribute(m, "TaskId").expect("TaskId").1, m))
        .collect();
    for e in &envelopes {
        let m = by_id
            .get(&e.id)
            .unwrap_or_else(|| panic!("no message for {}", e.id));
        assert_eq!(body(m), e.payload, "the body is the payload");
        assert_eq!(attribute(m, "EventName"), string("user.signup"));
        assert_eq!(attribute(m, "Source"), string("event-bridge"));
        assert_eq!(attribute(m, "TaskId"), string(&e.id));
        assert_eq!(attribute(m, "Attempt"), number(1));
        assert_eq!(system(m, MessageSystemAttributeName::MessageGroupId), None);
        let traceparent = e.traceparent.as_deref().map(string);
        assert_eq!(
            attribute(m, "traceparent"),
            traceparent.flatten(),
            "sent only when set"
        );
    }
    let m = by_id
        .get(&plain)
        .expect("the plain task's message, by its name");
    assert_eq!(body(m), json!({"type": "report.export", "user_id": 99}));
    assert_eq!(attribute(m, "EventName"), string("report.export"));
}

#[tokio::test]
async fn a_fifo_queue_gets_the_group_and_a_deduplication_id_stable_across_attempts() {
    for batch in [false, true] {
        a_fifo_queue_gets_the_group_and_a_deduplication_id_stable_across_attempts_with(batch).await;
    }
}

async fn a_fifo_queue_gets_the_group_and_a_deduplication_id_stable_across_attempts_with(
    batch: bool,
) {
    let client = moto().await;
    let url = create_queue(&client, true, &[]).await;
    let t = TestQueue::new().await;
    let mut grouped = Envelope::new("order.paid", json!({"order": 7}));
    grouped.group = Some("tenant-1".into());
    grouped.idempotency_key = Some("order-7".into());
    // Another task with the same idempotency key, from a producer that makes no key znode (so
    // the queue does not deduplicate it): SQS must drop it as a duplicate.
    let mut again = Envelope::new("order.paid", json!({"order": 7, "again": true}));
    again.idempotency_key = Some("order-7".into());
    let ungrouped = Envelope::new("order.shipped", json!({"order": 8}));
    let mut long_key = Envelope::new("order.refunded", json!({"order": 9}));
    long_key.group = Some("a group with spaces".into());
    long_key.idempotency_key = Some("k".repeat(300));
    let mut names = vec![t.queue.publish(&grouped).await.expect("publish")];
    names.push(
        t.queue
            .publish_raw(&again.to_bytes().unwrap())
            .await
            .expect("publish"),
    );
    let rest = [ungrouped.clone(), long_key.clone()];
    names.extend(t.queue.publish_many(&rest).await.expect("publish"));

    let spec = SqsSpec {
        queue_url: url.clone(),
        default_group: Some("fallback".into()),
        batch,
    };
    let sink = SqsSink::new(client.clone(), spec);
    assert!(sink.is_fifo());
    // One at a time, oldest first, so the first of the two duplicates is the one kept.
    for _ in 0..names.len() {
        let report = run(&t.queue, &Deliver(sink.clone()), 1).await;
        assert_eq!(report.completed, 1, "{report:?}");
    }
    assert!(t.children("tasks").await.is_empty());

    let messages = drain(&client, &url).await;
    let fifo = |m: &Message| {
        (
            system(m, MessageSystemAttributeName::MessageGroupId).expect("group"),
            system(m, MessageSystemAttributeName::MessageDeduplicationId).expect("dedup id"),
        )
    };
    let by_id: HashMap<String, &Message> = messages
        .iter()
        .map(|m| (attribute(m, "TaskId").expect("TaskId").1, m))
        .collect();
    assert_eq!(messages.len(), 3, "the duplicate was dropped: {by_id:?}");
    assert_eq!(
        fifo(by_id[&grouped.id]),
        ("tenant-1".into(), "order-7".into())
    );
    assert_eq!(
        body(by_id[&grouped.id]),
        grouped.payload,
        "the first of the duplicates is kept"
    );
    assert_eq!(
        fifo(by_id[&ungrouped.id]),
        ("fallback".into(), ungrouped.id.clone())
    );
    let (group, dedup) = fifo(by_id[&long_key.id]);
    assert_eq!(group, sqs::fifo_token("a group with spaces"));
    assert_eq!(dedup, sqs::fifo_token(&"k".repeat(300)));
    assert!(group.starts_with("sha256-") && dedup.starts_with("sha256-") && dedup.len() <= 128);

    // A retried delivery of a task SQS already took (a lost reply, a lease that ran out) is
    // the same message to SQS; without a group nor a default one the group is `default`.
    let no_default = SqsSink::new(
        client.clone(),
        SqsSpec {
            queue_url: url.clone(),
            default_group: None,
            batch,
        },
    );
    let task = claimed(Envelope::new("order.closed", json!({"order": 10})));
    no_default.deliver(&task).await.expect("first attempt");
    let retry = Task {
        envelope: Envelope {
            attempts: 2,
            ..task.envelope.clone()
        },
        ..task.clone()
    };
    no_default.deliver(&retry).await.expect("second attempt");
    let messages = drain(&client, &url).await;
    assert_eq!(messages.len(), 1, "the retry was a duplicate");
    assert_eq!(
        fifo(&messages[0]),
        ("default".into(), task.envelope.id.clone())
    );
    assert_eq!(attribute(&messages[0], "Attempt"), number(1));
}

#[tokio::test]
async fn a_missing_queue_is_a_permanent_failure_and_the_task_goes_to_the_dead_letters() {
    for batch in [false, true] {
        a_missing_queue_is_a_permanent_failure_and_the_task_goes_to_the_dead_letters_with(batch)
            .await;
    }
}

async fn a_missing_queue_is_a_permanent_failure_and_the_task_goes_to_the_dead_letters_with(
    batch: bool,
) {
    let client = moto().await;
    let url = missing_queue(false);
    let queue_name = url.rsplit('/').next().unwrap().to_string();
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);

    let sink = SqsSink::new(
        client.clone(),
        SqsSpec {
            queue_url: url,
            default_group: None,
            batch,
        },
    );
    let report = run(&t.queue, &Deliver(sink), 1).await;
    assert_eq!(
        (report.dead_lettered, report.completed, report.retried),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(t.children("dead").await, [name.as_str()]);
    assert!(t.children("tasks").await.is_empty());
    let record = t.read_json(&format!("dead/{name}")).await;
    assert_eq!(record["reason"], "permanent failure");
    let error = record["last_error"].as_str().expect("last_error");
    assert!(
        error.contains(&queue_name) && error.contains("does not exist"),
        "the error names the queue and says why: {error}"
    );

    // The same on a FIFO URL, called directly.
    let fifo = SqsSink::new(
        client,
        SqsSpec {
            queue_url: missing_queue(true),
            default_group: None,
            batch,
        },
    );
    match fifo
        .deliver(&claimed(Envelope::new("a.b", json!({}))))
        .await
    {
        Err(SinkError::Permanent(e)) => assert!(e.contains("does not exist"), "{e}"),
        other => panic!("expected a permanent failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_the_queue_refuses_is_a_permanent_failure() {
    for batch in [false, true] {
        a_message_the_queue_refuses_is_a_permanent_failure_with(batch).await;
    }
}

async fn a_message_the_queue_refuses_is_a_permanent_failure_with(batch: bool) {
    let client = moto().await;
    let url = create_queue(
        &client,
        false,
        &[(QueueAttributeName::MaximumMessageSize, "1024")],
    )
    .await;
    let sink = SqsSink::new(
        client.clone(),
        SqsSpec {
            queue_url: url.clone(),
            default_group: None,
            batch,
        },
    );
    let small = claimed(Envelope::new("a.b", json!({"x": "y"})));
    sink.deliver(&small).await.expect("a small message fits");
    let big = claimed(Envelope::new("a.b", json!({"x": "y".repeat(2_000)})));
    match sink.deliver(&big).await {
        Err(SinkError::Permanent(e)) => assert!(e.contains("message refused"), "{e}"),
        other => panic!("expected a permanent failure, got {other:?}"),
    }
    assert_eq!(
        drain(&client, &url).await.len(),
        1,
        "only the small one arrived"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_retryable_failure() {
    for batch in [false, true] {
        an_unreachable_endpoint_is_a_retryable_failure_with(batch).await;
    }
}

async fn an_unreachable_endpoint_is_a_retryable_failure_with(batch: bool) {
    // Nothing listens on port 1 of loopback: every connection is refused at once.
    let client = sqs::local_client("http://127.0.0.1:1").await;
    let url = "http://127.0.0.1:1/123456789012/nowhere".to_string();
    let sink = SqsSink::new(
        client,
        SqsSpec {
            queue_url: url,
            default_group: None,
            batch,
        },
    );
    match sink
        .deliver(&claimed(Envelope::new("a.b", json!({}))))
        .await
    {
        Err(SinkError::Retryable(e)) => {
            assert!(e.contains("nowhere") && e.contains("unreachable"), "{e}")
        }
        other => panic!("expected a retryable failure, got {other:?}"),
    }
}

#[tokio::test]
async fn the_dead_letter_queue_receives_the_record_with_its_attributes() {
    let client = moto().await;
    let url = create_queue(&client, false, &[]).await;
    let t = TestQueue::new().await;
    let mut envelope = Envelope::new("user.signup", json!({"user_id": 42}));
    envelope.group = Some("tenant-1".into());
    let name = t.queue.publish(&envelope).await.expect("publish");
    let refuse = FnHandler(|_task: Task| async {
        Err(HandlerError::Permanent("user 42 does not exist".into()))
    });
    assert_eq!(run(&t.queue, &refuse, 1).await.dead_lettered, 1);
    let record = t.read_json(&format!("dead/{name}")).await;

    let dlq = DeadLetterQueue::new(client.clone(), url.clone());
    dlq.send(&name, &record)
        .await
        .expect("send the dead letter");
    let messages = drain(&client, &url).await;
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(
        body(m),
        record,
        "the body is the record as ZooKeeper holds it"
    );
    assert_eq!(body(m)["last_error"], "user 42 does not exist");
    assert_eq!(attribute(m, "Reason"), string("permanent failure"));
    assert_eq!(attribute(m, "Attempts"), number(1));
    assert_eq!(attribute(m, "TaskId"), string(&envelope.id));
    assert_eq!(attribute(m, "EventName"), string("user.signup"));

    // On a FIFO dead-letter queue: the task's group, and a resend of the same record is one
    // message.
    let fifo_url = create_queue(&client, true, &[]).await;
    let fifo = DeadLetterQueue::new(client.clone(), fifo_url.clone());
    fifo.send(&name, &record)
        .await
        .expect("send to the FIFO queue");
    fifo.send(&name, &record).await.expect("send again");
    let messages = drain(&client, &fifo_url).await;
    assert_eq!(messages.len(), 1, "the resend was a duplicate");
    assert_eq!(
        system(&messages[0], MessageSystemAttributeName::MessageGroupId).as_deref(),
        Some("tenant-1")
    );
}

#[tokio::test]
async fn a_dead_letter_queue_that_does_not_exist_returns_an_error_naming_it() {
    let client = moto().await;
    let url = missing_queue(false);
    let queue_name = url.rsplit('/').next().unwrap().to_string();
    let dlq = DeadLetterQueue::new(client, url);
    let record = json!({"task": "task-0000000001", "reason": "permanent failure", "attempts": 1});
    let error = dlq
        .send("task-0000000001", &record)
        .await
        .expect_err("the queue does not exist")
        .to_string();
    assert!(
        error.contains(&queue_name) && error.contains("does not exist"),
        "{error}"
    );
}

#[tokio::test]
async fn a_task_buried_by_a_run_also_reaches_the_dead_letter_queue() {
    let client = moto().await;
    let dlq_url = create_queue(&client, false, &[]).await;
    let t = TestQueue::new().await;
    let queue = t
        .queue
        .clone()
        .with_dead_letters(std::sync::Arc::new(sqs::DeadLetterQueue::new(
            client.clone(),
            dlq_url.clone(),
        )));
    let poison = queue.publish_raw(b"not json").await.unwrap();
    let report = harness::run(&queue, &harness::Recorder::default(), 5).await;
    assert_eq!(report.dead_lettered, 1);
    let record = t.read_json(&format!("dead/{poison}")).await;
    let received = drain(&client, &dlq_url).await;
    assert_eq!(received.len(), 1);
    assert_eq!(
        body(&received[0]),
        record,
        "the message is the ZooKeeper record"
    );
    assert!(attribute(&received[0], "Reason").is_some_and(|(_, v)| v.contains("not JSON")));
}

#[tokio::test]
async fn when_the_dead_letter_queue_fails_the_dead_letter_stays_in_zookeeper() {
    let client = moto().await;
    let t = TestQueue::new().await;
    let queue = t
        .queue
        .clone()
        .with_dead_letters(std::sync::Arc::new(sqs::DeadLetterQueue::new(
            client,
            missing_queue(false),
        )));
    let poison = queue.publish_raw(b"\xff").await.unwrap();
    let report = harness::run(&queue, &harness::Recorder::default(), 5).await;
    assert_eq!(report.dead_lettered, 1, "the run goes on");
    assert_eq!(t.children("dead").await, std::slice::from_ref(&poison));
    assert!(
        t.read_json(&format!("dead/{poison}")).await["reason"]
            .as_str()
            .unwrap()
            .contains("UTF-8")
    );
}

/// A batching sink for `queue_url`.
fn batched(client: &Client, queue_url: &str, default_group: Option<&str>) -> SqsSink {
    let sink = SqsSink::new(
        client.clone(),
        SqsSpec {
            queue_url: queue_url.to_string(),
            default_group: default_group.map(str::to_string),
            batch: true,
        },
    );
    assert!(sink.is_batched());
    sink
}

#[tokio::test]
async fn a_batched_drain_delivers_every_task_once_to_a_standard_and_a_fifo_queue() {
    const TASKS: usize = 25;
    let client = moto().await;
    for fifo in [false, true] {
        let url = create_queue(&client, fifo, &[]).await;
        let t = TestQueue::new().await;
        let envelopes: Vec<Envelope> = (0..TASKS)
            .map(|i| {
                let mut e = Envelope::new("order.paid", json!({"order": i, "note": "ü"}));
                // Three groups, one set of tasks without: those take the spec's group.
                e.group = (i % 4 != 3).then(|| format!("tenant-{}", i % 4));
                e.idempotency_key = (i % 2 == 0).then(|| format!("order-{i}"));
                e
            })
            .collect();
        t.queue.publish_many(&envelopes).await.expect("publish");
        let sink = batched(&client, &url, Some("fallback"));
        let report = run(&t.queue, &Deliver(sink.clone()), TASKS as u32).await;
        assert_eq!(
            (report.completed, report.retried, report.dead_lettered),
            (TASKS as u32, 0, 0),
            "fifo {fifo}: {report:?}"
        );
        assert!(t.children("tasks").await.is_empty() && t.children("dead").await.is_empty());

        // Every message went out exactly once, in a batch or alone. How many batches a drain
        // makes depends on timing (a 3 ms linger), so it is not asserted here; the tests that
        // deliver several messages at once count the batches exactly.
        let stats = sink.stats();
        assert_eq!(
            stats.batched_messages + stats.single_sends,
            TASKS as u64,
            "fifo {fifo}: {stats:?}"
        );

        let messages = drain(&client, &url).await;
        assert_eq!(messages.len(), TASKS, "fifo {fifo}: each task once");
        let by_id: HashMap<String, &Message> = messages
            .iter()
            .map(|m| (attribute(m, "TaskId").expect("TaskId").1, m))
            .collect();
        assert_eq!(by_id.len(), TASKS, "fifo {fifo}: no task twice");
        for e in &envelopes {
            let m = by_id[&e.id];
            assert_eq!(body(m), e.payload);
            assert_eq!(attribute(m, "EventName"), string("order.paid"));
            assert_eq!(attribute(m, "Source"), string("event-bridge"));
            assert_eq!(attribute(m, "Attempt"), number(1));
            let group = system(m, MessageSystemAttributeName::MessageGroupId);
            let dedup = system(m, MessageSystemAttributeName::MessageDeduplicationId);
            if fifo {
                let want_group = e.group.clone().unwrap_or_else(|| "fallback".into());
                let want_dedup = e.idempotency_key.clone().unwrap_or_else(|| e.id.clone());
                assert_eq!(
                    (group, dedup),
                    (Some(want_group), Some(want_dedup)),
                    "{}",
                    e.id
                );
            } else {
                assert_eq!((group, dedup), (None, None));
            }
        }
    }
}

#[tokio::test]
async fn in_a_batch_only_the_message_the_queue_refuses_goes_to_the_dead_letters() {
    let client = moto().await;
    let url = create_queue(
        &client,
        false,
        &[(QueueAttributeName::MaximumMessageSize, "1024")],
    )
    .await;

    // Ten deliveries at once make one batch; moto refuses it as a whole for the big message,
    // and the sink sends the ten again one by one so that each gets its own verdict.
    let sink = batched(&client, &url, None);
    let tasks: Vec<Task> = (0..10)
        .map(|i| {
            let x = if i == 4 {
                "y".repeat(2_000)
            } else {
                "y".into()
            };
            claimed(Envelope::new("a.b", json!({"i": i, "x": x})))
        })
        .collect();
    let results = futures::future::join_all(tasks.iter().map(|t| sink.deliver(t))).await;
    for (i, result) in results.iter().enumerate() {
        match (i, result) {
            (4, Err(SinkError::Permanent(e))) => assert!(e.contains("message refused"), "{e}"),
            (4, other) => panic!("the big message: expected a permanent failure, got {other:?}"),
            (_, Ok(())) => {}
            (_, other) => panic!("message {i}: expected delivery, got {other:?}"),
        }
    }
    let stats = sink.stats();
    assert_eq!(
        (stats.batches, stats.batched_messages),
        (1, 10),
        "{stats:?}"
    );
    assert_eq!(
        stats.single_sends, 10,
        "the refused batch was resent singly"
    );
    assert_eq!(drain(&client, &url).await.len(), 9, "the nine small ones");

    // The same through a drain: the big task is buried, the others complete.
    let t = TestQueue::new().await;
    let envelopes: Vec<Envelope> = (0..12)
        .map(|i| {
            let x = if i == 7 {
                "y".repeat(2_000)
            } else {
                "y".into()
            };
            Envelope::new("a.b", json!({"i": i, "x": x}))
        })
        .collect();
    let names = t.queue.publish_many(&envelopes).await.expect("publish");
    let sink = batched(&client, &url, None);
    let report = run(&t.queue, &Deliver(sink.clone()), 12).await;
    assert_eq!(
        (report.completed, report.dead_lettered, report.retried),
        (11, 1, 0),
        "{report:?}"
    );
    assert_eq!(t.children("dead").await, [names[7].as_str()]);
    let record = t.read_json(&format!("dead/{}", names[7])).await;
    assert_eq!(record["reason"], "permanent failure");
    assert!(
        record["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("message refused")),
        "{record}"
    );
    assert!(t.children("tasks").await.is_empty());
    assert_eq!(drain(&client, &url).await.len(), 11);
}

#[tokio::test]
async fn with_batching_a_missing_queue_sends_every_task_to_the_dead_letters() {
    let client = moto().await;
    for fifo in [false, true] {
        let url = missing_queue(fifo);
        let queue_name = url.rsplit('/').next().unwrap().to_string();

        // Directly: one batch, and every entry gets the request's verdict.
        let sink = batched(&client, &url, None);
        let tasks: Vec<Task> = (0..5)
            .map(|i| claimed(Envelope::new("a.b", json!({ "i": i }))))
            .collect();
        let results = futures::future::join_all(tasks.iter().map(|t| sink.deliver(t))).await;
        for result in &results {
            match result {
                Err(SinkError::Permanent(e)) => {
                    assert!(
                        e.contains(&queue_name) && e.contains("does not exist"),
                        "{e}"
                    )
                }
                other => panic!("expected a permanent failure, got {other:?}"),
            }
        }
        let stats = sink.stats();
        assert_eq!(
            (stats.batches, stats.batched_messages, stats.single_sends),
            (1, 5, 0)
        );

        // Through a drain.
        let t = TestQueue::new().await;
        let names = t.publish(12).await;
        let report = run(&t.queue, &Deliver(batched(&client, &url, None)), 12).await;
        assert_eq!(
            (report.dead_lettered, report.completed, report.retried),
            (12, 0, 0),
            "fifo {fifo}: {report:?}"
        );
        assert_eq!(t.children("dead").await, names);
        assert!(t.children("tasks").await.is_empty());
        let record = t.read_json(&format!("dead/{}", names[0])).await;
        assert!(
            record["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("does not exist")),
            "{record}"
        );
    }
}

#[tokio::test]
async fn the_batcher_ends_when_the_sink_is_dropped() {
    let client = moto().await;
    let url = create_queue(&client, false, &[]).await;
    let sink = batched(&client, &url, None);
    let ended = sink.batcher_ended();
    let task = claimed(Envelope::new("a.b", json!({})));
    sink.deliver(&task).await.expect("deliver");
    let clone = sink.clone();
    drop(sink);
    clone
        .deliver(&task)
        .await
        .expect("a clone keeps the batcher");
    drop(clone);
    tokio::time::timeout(std::time::Duration::from_secs(5), ended)
        .await
        .expect("the batcher ends once its sink and clones are dropped");
    assert_eq!(drain(&client, &url).await.len(), 2);
}
