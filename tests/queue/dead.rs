//! Dead letters: what a record keeps, and sending records back.

use std::sync::{Arc, Mutex};

use event_bridge::handler::FnHandler;
use event_bridge::{HandlerError, Task, dead};
use serde_json::{Value, json};

use harness::{Recorder, TestQueue, run};

/// A redrive of every dead letter goes on past a record that cannot be sent back (its body
/// was too large to keep), saying which and why, and redrives the rest.
#[tokio::test]
async fn redrive_skips_a_record_without_a_body_and_redrives_the_rest() {
    let t = TestQueue::new().await;
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let omitted = json!({"task": "task-0000000001", "reason": "permanent failure", "attempts": 1,
        "body_omitted": {"bytes": 2_000_000, "sha256": "00", "head": "{"}});
    let whole = json!({"task": "task-0000000002", "reason": "permanent failure", "attempts": 1,
        "body": {"format": "event-bridge/1", "id": "ev-2", "type": "t", "time": "2026-11-22T10:00:00Z",
                 "payload": {"n": 2}, "attempts": 1}});
    for (name, record) in [("task-0000000001", &omitted), ("task-0000000002", &whole)] {
        let path = format!("{}/dead/{name}", t.config.root);
        let data = serde_json::to_vec(record).unwrap();
        t.raw.create(&path, &data, &options).await.unwrap();
    }
    let names = dead::names(&t.queue).await.unwrap();
    let report = dead::redrive(&t.queue, &names).await.expect("no abort");
    assert_eq!(report.redriven.len(), 1, "{report:?}");
    assert_eq!(report.redriven[0].dead, "task-0000000002");
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].dead, "task-0000000001");
    assert!(report.skipped[0].reason.contains("no body"), "{report:?}");
    assert_eq!(
        t.children("dead").await,
        ["task-0000000001"],
        "the skipped one stays"
    );
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 5).await.completed, 1);
    assert_eq!(recorder.seen.lock().unwrap()[0].envelope.id, "ev-2");
}

/// A body of 600 kB, over the 256 KiB a record used to keep whole, is kept whole (the record
/// stays under ZooKeeper's packet limit), so it can be redriven.
#[tokio::test]
async fn a_large_body_is_kept_whole_in_its_dead_letter_and_redriven_as_it_was() {
    let t = TestQueue::new().await;
    let body = serde_json::to_vec(&json!({"blob": "x".repeat(600_000)})).unwrap();
    let name = t.queue.publish_raw(&body).await.unwrap();
    let handler = FnHandler(|_task: Task| async { Err(HandlerError::Permanent("refused".into())) });
    assert_eq!(run(&t.queue, &handler, 1).await.dead_lettered, 1);
    let record = t.read_json(&format!("dead/{name}")).await;
    assert!(record.get("body_omitted").is_none(), "kept whole");
    assert_eq!(
        record["body"]["payload"]["blob"].as_str().unwrap().len(),
        600_000
    );
    let report = dead::redrive(&t.queue, &[name]).await.unwrap();
    assert_eq!(report.redriven.len(), 1, "{report:?}");
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 1).await.completed, 1);
    let task = recorder.seen.lock().unwrap().remove(0);
    assert_eq!(
        task.envelope.payload["blob"].as_str().unwrap().len(),
        600_000
    );
}

/// A plain body nested 127 deep is valid JSON; wrapped in an envelope on its first claim it
/// is one level deeper. Its second attempt must still read it, and its own error must reach
/// the dead letter.
#[tokio::test]
async fn a_deeply_nested_body_keeps_its_real_error_through_a_retry() {
    let t = TestQueue::with(|c| c.backoff_base = std::time::Duration::ZERO).await;
    let depth = 127;
    let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(
        serde_json::from_str::<Value>(&body).is_ok(),
        "valid as published"
    );
    let name = t.queue.publish_raw(body.as_bytes()).await.unwrap();
    let calls = Arc::new(Mutex::new(0));
    let seen = calls.clone();
    let handler = FnHandler(move |_task: Task| {
        let call = {
            let mut calls = seen.lock().unwrap();
            *calls += 1;
            *calls
        };
        async move {
            match call {
                1 => Err(HandlerError::Retryable("upstream 503".into())),
                _ => Err(HandlerError::Permanent("the real error".into())),
            }
        }
    });
    assert_eq!(run(&t.queue, &handler, 1).await.retried, 1);
    assert_eq!(run(&t.queue, &handler, 1).await.dead_lettered, 1);
    assert_eq!(*calls.lock().unwrap(), 2, "the handler ran twice");
    let record = t.read_json(&format!("dead/{name}")).await;
    assert_eq!(
        record["reason"], "permanent failure",
        "{}",
        record["reason"]
    );
    assert_eq!(record["last_error"], "the real error");
    let report = dead::redrive(&t.queue, &[name]).await.unwrap();
    assert_eq!(report.redriven.len(), 1, "{report:?}");
}
