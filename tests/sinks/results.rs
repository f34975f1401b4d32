//! The HTTP sink's result: a webhook's JSON answer of at most 64 KiB is kept in the
//! completion record (`KEEP_DONE`); any other answer as its size and type; an empty one not at
//! all. A real HTTP receiver on loopback answers.

use std::time::Duration;

use event_bridge::inspect::{self, Status};
use event_bridge::queue::DoneRecord;
use event_bridge::sink::Delivery;
use event_bridge::task_result::{MAX_RESULT_BYTES, ResultOmitted};
use event_bridge::{Envelope, process};
use serde_json::{Value, json};

use crate::routing::routed;
use crate::sink_http::{Receiver, Reply};
use harness::{TestQueue, options};

async fn record(t: &TestQueue, name: &str) -> Box<DoneRecord> {
    let now = t.now().await;
    match inspect::status(&t.queue, &now, name).await.unwrap() {
        Status::Completed { record } => record,
        other => panic!("{name} is not completed: {other:?}"),
    }
}

#[tokio::test]
async fn a_webhooks_answer_is_kept_as_the_tasks_result_when_it_is_json_within_the_limit() {
    let t = TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await;
    let large = json!({"filler": "y".repeat(MAX_RESULT_BYTES)}).to_string();
    let json_type = ("content-type", "application/json");
    let answers = [
        Reply::status(200)
            .header(json_type.0, json_type.1)
            .body(r#"{"receipt": "r-1", "amount": 12.5}"#),
        Reply::status(201)
            .header("content-type", "text/plain; charset=utf-8")
            .body("accepted"),
        Reply::status(200)
            .header(json_type.0, json_type.1)
            .body(&large),
        Reply::status(204),
    ];
    let receiver = Receiver::start(answers).await;
    let config = routed(
        &t,
        json!({"routes": {"order.paid": {"sink": "http", "url": receiver.url("/paid")}}}),
    );
    let delivery = Delivery::from_config(&config).await.unwrap();
    let envelopes: Vec<Envelope> = (0..4)
        .map(|i| Envelope::new("order.paid", json!({"n": i})))
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap();
    // One at a time, so the n-th request gets the n-th answer.
    let report = process::run(&t.queue, &delivery, &options(4, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 4, "{report:?}");
    let asked: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| r.header("X-Event-Bridge-Task").to_string())
        .collect();
    assert_eq!(asked.len(), 4);

    let kept = record(&t, &asked[0]).await;
    assert_eq!(kept.result, Some(json!({"receipt": "r-1", "amount": 12.5})));
    assert_eq!(kept.delivered.as_ref().unwrap().status, Some(200));
    let omitted = |bytes: usize, content_type: &str, reason: String| ResultOmitted {
        bytes: Some(bytes as u64),
        content_type: Some(content_type.into()),
        reason,
    };
    let text = record(&t, &asked[1]).await;
    assert_eq!(text.result, None);
    assert_eq!(
        text.result_omitted,
        Some(omitted(8, "text/plain; charset=utf-8", "not JSON".into()))
    );
    let over = record(&t, &asked[2]).await;
    assert_eq!(over.result, None);
    assert_eq!(
        over.result_omitted,
        Some(omitted(
            large.len(),
            "application/json",
            format!("over {MAX_RESULT_BYTES} bytes")
        ))
    );
    let empty = record(&t, &asked[3]).await;
    assert_eq!(
        (empty.result.as_ref(), empty.result_omitted.as_ref()),
        (None, None)
    );
    assert_eq!(empty.delivered.as_ref().unwrap().status, Some(204));

    // The record as `status --json` prints it: `result` beside `delivered`, never in it.
    let printed: Value = serde_json::to_value(&*kept).unwrap();
    assert_eq!(printed["result"]["receipt"], "r-1");
    assert_eq!(printed["delivered"], json!({"sink": "http", "status": 200}));
}
