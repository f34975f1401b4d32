//! Priority lanes: high before normal before low, a high task published behind a backlog of
//! low ones claimed with the next batch, weighted lanes that never starve low, and a task
//! that keeps its lane through a wait and a redrive.

use std::sync::{Arc, Mutex};

use event_bridge::handler::FnHandler;
use event_bridge::process::{self, RunOptions};
use event_bridge::task::{LaneWeights, Priority};
use event_bridge::{Envelope, HandlerError, Task};
use serde_json::json;

use crate::cli::eb;
use harness::{Recorder, TestQueue, run};

fn in_lane(priority: Priority, i: usize) -> Envelope {
    let mut envelope = Envelope::new(format!("lane.{priority}"), json!({ "i": i }));
    envelope.priority = priority;
    envelope
}

async fn publish(t: &TestQueue, priority: Priority, n: usize) -> Vec<String> {
    let envelopes: Vec<Envelope> = (0..n).map(|i| in_lane(priority, i)).collect();
    t.queue.publish_many(&envelopes).await.unwrap()
}

fn lanes_of(recorder: &Recorder) -> Vec<Priority> {
    let seen = recorder.seen.lock().unwrap();
    seen.iter().map(|t| t.envelope.priority).collect()
}

/// Published low first, then normal, then high: one consumer takes every high task, then
/// every normal one, then the low ones, each lane oldest first.
#[tokio::test]
async fn lanes_are_taken_high_then_normal_then_low() {
    let t = TestQueue::new().await;
    let low = publish(&t, Priority::Low, 40).await;
    let normal = publish(&t, Priority::Normal, 40).await;
    let high = publish(&t, Priority::High, 40).await;
    assert!(high[0].starts_with("high-") && low[0].starts_with("low-"));
    assert!(normal[0].starts_with("task-"));
    assert_eq!(t.children("lanes/high").await.len(), 40);
    let recorder = Recorder::default();
    let options = harness::options(200, 1);
    let report = process::run(&t.queue, &recorder, &options).await.unwrap();
    assert_eq!(report.completed, 120, "{report:?}");
    let expected: Vec<String> = [high, normal, low].concat();
    assert_eq!(recorder.names(), expected);
    assert!(t.children("lanes/low").await.is_empty());
}

/// A drain of 2 000 low tasks: a high task published while it runs is claimed within a
/// window and a claim batch of the moment it was published, not after the backlog.
#[tokio::test]
async fn a_high_task_published_behind_a_low_backlog_goes_out_with_the_next_batch() {
    let t = TestQueue::new().await;
    publish(&t, Priority::Low, 2_000).await;
    let concurrency = 8;
    let (seen, published_at) =
        drain_publishing_at(&t, in_lane(Priority::High, 0), 100, concurrency).await;
    let high = seen
        .iter()
        .position(|task| task.envelope.priority == Priority::High)
        .expect("the high task ran");
    let after = high - published_at;
    // Started after the publish and before it: at most the window probed then, and what was
    // in flight.
    let bound = event_bridge::queue::WINDOW + 2 * concurrency;
    assert!(
        after <= bound,
        "{after} low tasks went first (bound {bound})"
    );
}

/// A drain of up to 600 tasks at `concurrency` that publishes `envelope` when the handler
/// meets its `at`-th task: the tasks in the order their handlers started, and `at`.
pub(crate) async fn drain_publishing_at(
    t: &TestQueue,
    envelope: Envelope,
    at: usize,
    concurrency: usize,
) -> (Vec<Task>, usize) {
    let seen: Arc<Mutex<Vec<Task>>> = Arc::default();
    let (queue, record) = (t.queue.clone(), seen.clone());
    let handler = FnHandler(move |task: Task| {
        let count = {
            let mut seen = record.lock().unwrap();
            seen.push(task);
            seen.len()
        };
        let (queue, envelope) = (queue.clone(), envelope.clone());
        async move {
            if count == at {
                queue.publish(&envelope).await.unwrap();
            }
            Ok::<(), HandlerError>(())
        }
    });
    let options = RunOptions {
        max_tasks: 600,
        ..harness::options(600, concurrency)
    };
    process::run(&t.queue, &handler, &options).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (seen, at)
}

/// Weighted lanes share the walk: with high=3,low=1, low gets one window in four while high
/// still has a backlog; strict lanes leave low until high is empty.
#[tokio::test]
async fn weighted_lanes_never_starve_low() {
    let weights = LaneWeights::parse("high=3,normal=1,low=1").unwrap();
    for weighted in [false, true] {
        let t = TestQueue::with(|c| c.lane_weights = weighted.then_some(weights)).await;
        publish(&t, Priority::Low, 64).await;
        publish(&t, Priority::High, 320).await;
        let recorder = Recorder::default();
        let report = process::run(&t.queue, &recorder, &harness::options(128, 1))
            .await
            .unwrap();
        assert_eq!(report.completed, 128);
        let low = lanes_of(&recorder)
            .iter()
            .filter(|p| **p == Priority::Low)
            .count();
        match weighted {
            false => assert_eq!(low, 0, "strict: high first"),
            true => assert_eq!(low, 32, "weighted: one window of 32 in four"),
        }
    }
}

/// A high task that waits out a delay comes back to the high lane, and so does a redriven
/// one; a scheduled run fires nothing into the wrong lane.
#[tokio::test]
async fn a_task_keeps_its_lane_through_a_wait_and_a_redrive() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let mut waiting = in_lane(Priority::High, 0);
    waiting.retry_at = Some(now + 60_000);
    t.queue.publish(&waiting).await.unwrap();
    let report = run(&t.queue, &Recorder::default(), 10).await;
    assert_eq!(report.in_backoff, 1, "{report:?}");
    assert!(t.children("lanes/high").await.is_empty());
    let later = event_bridge::clock::ZkTime::at(now + 61_000);
    assert_eq!(t.queue.delays().promote_due(&later, 10).await.unwrap(), 1);
    let back = t.children("lanes/high").await;
    assert_eq!(back.len(), 1, "back in the high lane");
    assert!(t.children("tasks").await.is_empty());

    let failing = FnHandler(|_t: Task| async { Err(HandlerError::Permanent("no".into())) });
    let report = process::run(&t.queue, &failing, &harness::options(10, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let dead = t.children("dead").await;
    assert_eq!(dead, back, "the dead letter keeps the lane's name");
    let redriven = eb(&t, &["dead", "redrive", "--all", "--yes"], "");
    assert!(redriven.status.success(), "{redriven:?}");
    assert_eq!(t.children("lanes/high").await.len(), 1);
}

/// `publish --priority` and a JSON line's `priority` put tasks in their lanes; a word that is
/// not a lane is refused naming the field, and nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_puts_tasks_in_lanes_and_refuses_a_priority_that_is_none() {
    let t = TestQueue::new().await;
    let one = eb(
        &t,
        &["publish", "--priority", "high", "--payload", "{}"],
        "",
    );
    assert!(one.status.success(), "{one:?}");
    let lines = [
        json!({"type": "a", "payload": 1, "priority": "low"}).to_string(),
        json!({"type": "a", "payload": 2}).to_string(),
    ]
    .join("\n");
    let many = eb(&t, &["publish", "-f", "-", "--priority", "high"], &lines);
    assert!(many.status.success(), "{many:?}");
    assert_eq!(
        t.children("lanes/high").await.len(),
        2,
        "--priority for the line without"
    );
    assert_eq!(
        t.children("lanes/low").await.len(),
        1,
        "the line's own first"
    );

    let bad = eb(
        &t,
        &["publish", "--priority", "urgent", "--payload", "{}"],
        "",
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--priority"));
    let lines = [
        json!({"type": "a", "payload": 1}).to_string(),
        json!({"type": "a", "payload": 2, "priority": "urgent"}).to_string(),
    ]
    .join("\n");
    let bad = eb(&t, &["publish", "-f", "-"], &lines);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("\"priority\" must be high, normal or low"),
        "{stderr}"
    );
    assert!(t.children("tasks").await.is_empty(), "nothing published");
}

/// `stats` counts each lane, and the oldest task is the oldest of any lane.
#[tokio::test]
async fn stats_count_each_lane() {
    let t = TestQueue::new().await;
    publish(&t, Priority::Low, 3).await;
    publish(&t, Priority::High, 2).await;
    t.publish(1).await;
    let stats = event_bridge::stats::collect(&t.queue, &t.now().await)
        .await
        .unwrap();
    assert_eq!(stats.depth, 6);
    assert_eq!(
        (stats.lanes.high, stats.lanes.normal, stats.lanes.low),
        (2, 1, 3)
    );
    assert!(stats.oldest_task_age_ms.is_some());
}

/// A task whose `priority` is no lane's (a producer that skipped the check) goes to the dead
/// letters on its first claim, with a reason that names the field.
#[tokio::test]
async fn a_task_with_a_priority_that_is_none_goes_to_the_dead_letters() {
    let t = TestQueue::new().await;
    let body = json!({"format": "event-bridge/1", "id": "x", "type": "a",
        "time": "2026-11-24T00:00:00Z", "payload": {}, "priority": "urgent"});
    t.queue
        .publish_raw(body.to_string().as_bytes())
        .await
        .unwrap();
    let report = run(&t.queue, &Recorder::default(), 10).await;
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let dead = t.children("dead").await;
    let record = t.read_json(&format!("dead/{}", dead[0])).await;
    let reason = record["reason"].as_str().unwrap();
    assert!(
        reason.contains("priority") && reason.contains("urgent"),
        "{reason}"
    );
}
