//! A run on an idle queue: nothing in the lanes, nothing waiting to join them. Such a run (a
//! scheduled run on a quiet queue, every minute) reads once and writes nothing, not even
//! ZooKeeper's clock; a queue whose only tasks wait under `delayed/` or `debounce/` is not
//! idle, and its run brings them in when they are due.

use event_bridge::clock::ZkTime;
use event_bridge::task::Debounce;
use event_bridge::{Envelope, process};
use serde_json::json;

use harness::{Recorder, TestQueue};

/// The version of the `clock` znode: every reading of ZooKeeper's clock writes it.
async fn clock_version(t: &TestQueue) -> i32 {
    let path = format!("{}/clock", t.config.root);
    let (_, stat) = t.raw.get_data(&path).await.expect("the clock");
    stat.version
}

#[tokio::test]
async fn a_run_on_an_idle_queue_writes_nothing() {
    let t = TestQueue::new().await;
    let before = clock_version(&t).await;
    let recorder = Recorder::default();
    let report = process::run(&t.queue, &recorder, &harness::options(10, 4))
        .await
        .unwrap();
    assert_eq!((report.claimed, report.remaining_depth), (0, Some(0)));
    assert_eq!(clock_version(&t).await, before, "the run read the clock");
}

/// Key lanes stay after their last task: a run over empty ones lists and reads them (no
/// write) and is idle too; one with a task in a key lane is not.
#[tokio::test]
async fn a_run_over_empty_key_lanes_writes_nothing() {
    let t = TestQueue::new().await;
    let mut keyed = Envelope::new("test", json!({"n": 1}));
    keyed.concurrency_key = Some("tenant-1".into());
    t.queue.publish_all(&[keyed]).await.unwrap();
    let recorder = Recorder::default();
    let first = process::run(&t.queue, &recorder, &harness::options(10, 4))
        .await
        .unwrap();
    assert_eq!(
        first.completed, 1,
        "a task in a key lane is found: {first:?}"
    );
    assert_eq!(
        t.children("lanes/keys").await,
        ["tenant-1"],
        "the lane stays"
    );
    let before = clock_version(&t).await;
    let report = process::run(&t.queue, &recorder, &harness::options(10, 4))
        .await
        .unwrap();
    assert_eq!((report.claimed, report.remaining_depth), (0, Some(0)));
    assert_eq!(clock_version(&t).await, before, "the run read the clock");
}

#[tokio::test]
async fn a_task_waiting_under_delayed_makes_the_queue_not_idle() {
    let t = TestQueue::new().await;
    let mut envelope = Envelope::new("test", json!({"n": 1}));
    envelope.delay_ms = Some(1_000);
    t.queue.publish_all(&[envelope]).await.unwrap();
    let recorder = Recorder::default();
    let first = process::run(&t.queue, &recorder, &harness::options(10, 4))
        .await
        .unwrap();
    assert_eq!((first.claimed, first.in_backoff), (0, 1), "{first:?}");
    assert!(
        t.children("tasks").await.is_empty(),
        "it waits under delayed/"
    );

    // Due a second after its publish by ZooKeeper's clock: a run judging a second from now.
    let later = ZkTime::at(t.now().await.now_ms() + 1_000);
    let second = process::run_at(&t.queue, &recorder, &harness::options(10, 4), &later)
        .await
        .unwrap();
    assert_eq!(second.completed, 1, "{second:?}");
    assert_eq!(recorder.count(), 1);
}

#[tokio::test]
async fn a_pending_debounced_publish_makes_the_queue_not_idle() {
    let t = TestQueue::new().await;
    let mut envelope = Envelope::new("test", json!({"n": 1}));
    envelope.debounce = Some(Debounce {
        key: "k".into(),
        period_ms: 1_000,
        max_ms: None,
    });
    t.queue.publish_all(&[envelope]).await.unwrap();
    // Its period over: a run judging a second from now.
    let later = ZkTime::at(t.now().await.now_ms() + 1_000);
    let recorder = Recorder::default();
    let report = process::run_at(&t.queue, &recorder, &harness::options(10, 4), &later)
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert!(t.children("debounce").await.is_empty());
}

/// `stats` without a time reads ZooKeeper's clock only to age a task: a look at an idle queue
/// (the metrics line after every scheduled run) writes nothing.
#[tokio::test]
async fn a_look_at_an_idle_queue_writes_nothing_and_a_task_is_aged_by_zookeepers_clock() {
    let t = TestQueue::new().await;
    let before = clock_version(&t).await;
    let stats = event_bridge::stats::collect_with(&t.queue, None)
        .await
        .unwrap();
    assert_eq!((stats.depth, stats.oldest_task_age_ms), (0, None));
    assert_eq!(clock_version(&t).await, before, "the look read the clock");

    t.publish(1).await;
    let stats = event_bridge::stats::collect_with(&t.queue, None)
        .await
        .unwrap();
    assert_eq!(stats.depth, 1);
    assert!(
        stats.oldest_task_age_ms.is_some_and(|age| age >= 0),
        "{stats:?}"
    );
    assert_eq!(
        clock_version(&t).await,
        before + 1,
        "aged by one clock reading"
    );
}
