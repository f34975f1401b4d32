//! Completion records (`KEEP_DONE`): written with the completion, found by `status` by name
//! or id, swept once their window has passed; nothing at all without `KEEP_DONE`.

use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::feature::Upkeep;
use event_bridge::features::done_records::sweep;
use event_bridge::inspect::{self, Status};
use event_bridge::reap;

/// The records' sweep at the upkeep `upkeep`, at most `limit` znodes.
async fn expired(upkeep: Upkeep, limit: usize) -> event_bridge::Result<usize> {
    sweep::expired(&upkeep, limit).await
}
use serde_json::json;

use harness::{Recorder, TestQueue, run};

async fn keeping() -> TestQueue {
    TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await
}

#[tokio::test]
async fn a_completed_task_leaves_a_record_that_status_finds_by_name_and_by_id() {
    let t = keeping().await;
    let names = t.publish(3).await;
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!(report.completed, 3);
    let seen = recorder.seen.lock().unwrap().clone();
    let now = t.now().await;
    for task in &seen {
        let by_name = inspect::status(&t.queue, &now, &task.name).await.unwrap();
        let by_id = inspect::status(&t.queue, &now, &task.envelope.id)
            .await
            .unwrap();
        assert_eq!(by_name, by_id);
        let Status::Completed { record } = by_name else {
            panic!("{} not completed: {by_name:?}", task.name)
        };
        assert_eq!(
            (
                &record.task,
                &record.id,
                record.attempts,
                record.fencing_token
            ),
            (&task.name, &task.envelope.id, 1, task.fencing_token)
        );
        assert_eq!(record.event_type, "test");
        assert!(record.kept_until_ms - record.completed_at_ms == 3_600_000);
    }
    assert_eq!(seen.len(), names.len());
    let buckets = t.children("done").await;
    assert_eq!(buckets.len(), 1);
    assert_eq!(t.children(&format!("done/{}", buckets[0])).await.len(), 6);
}

#[tokio::test]
async fn without_keep_done_nothing_is_written_and_a_completed_task_is_not_found() {
    let t = TestQueue::new().await;
    let names = t.publish(1).await;
    run(&t.queue, &Recorder::default(), 10).await;
    let all = t.children("").await;
    assert!(!all.contains(&"done".to_string()), "{all:?}");
    let now = t.now().await;
    let status = inspect::status(&t.queue, &now, &names[0]).await.unwrap();
    assert_eq!(status, Status::NotFound);
}

#[tokio::test]
async fn records_are_swept_once_their_window_has_passed() {
    let t = keeping().await;
    let names = t.publish(2).await;
    run(&t.queue, &Recorder::default(), 10).await;
    let now = t.now().await;
    let sweep_at = |now: ZkTime| expired(reap::upkeep(&t.queue, now), 100);
    assert_eq!(sweep_at(now).await.unwrap(), 0, "not yet");
    let later = ZkTime::from_mtime(now.now_ms() + 2 * 3_600_000);
    assert_eq!(sweep_at(later).await.unwrap(), 4);
    assert!(t.children("done").await.is_empty(), "the bucket went too");
    let status = inspect::status(&t.queue, &now, &names[0]).await.unwrap();
    assert_eq!(status, Status::NotFound);
}

#[tokio::test]
async fn a_task_completed_again_under_its_id_keeps_both_records_by_name() {
    let t = keeping().await;
    let mut first = event_bridge::Envelope::new("test", json!({}));
    first.id = "order-7".into();
    let again = first.clone();
    let one = t.queue.publish(&first).await.unwrap();
    run(&t.queue, &Recorder::default(), 10).await;
    let two = t.queue.publish(&again).await.unwrap();
    let report = run(&t.queue, &Recorder::default(), 10).await;
    assert_eq!(
        report.completed, 1,
        "the record's id entry is taken; it completes all the same"
    );
    assert!(t.children("tasks").await.is_empty());
    for name in [&one, &two] {
        let record = inspect::find_done(&t.queue, name)
            .await
            .unwrap()
            .expect("record");
        assert_eq!(&record.task, name);
    }
    let by_id = inspect::find_done(&t.queue, "order-7")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_id.task, one, "the id finds the first");
}
