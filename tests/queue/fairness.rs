//! Fairness across concurrency keys: each key waits in a lane of its own, and a walk takes
//! normal's lanes in turn, a window each, so a key with a backlog does not hold back the keys
//! behind it; a keyed task keeps its key's lane through a retry and a redrive.

use event_bridge::handler::FnHandler;
use event_bridge::process;
use event_bridge::queue::WINDOW;
use event_bridge::{Envelope, HandlerError, Task};
use futures::FutureExt;
use serde_json::json;

use crate::cli::eb;
use crate::lanes::drain_publishing_at;
use harness::{Recorder, TestQueue};

fn keyed(key: Option<&str>, i: usize) -> Envelope {
    let mut envelope = Envelope::new("fair", json!({ "i": i }));
    envelope.concurrency_key = key.map(String::from);
    envelope
}

async fn publish(t: &TestQueue, key: Option<&str>, n: usize) -> Vec<String> {
    let envelopes: Vec<Envelope> = (0..n).map(|i| keyed(key, i)).collect();
    t.queue.publish_many(&envelopes).await.unwrap()
}

/// The key of each task a recorder saw, in the order they ran (`-` for none).
fn keys_of(recorder: &Recorder) -> Vec<String> {
    let seen = recorder.seen.lock().unwrap();
    (seen.iter())
        .map(|t| t.envelope.concurrency_key.clone().unwrap_or("-".into()))
        .collect()
}

/// 300 tasks of `big`, then 5 of `small` and 40 without a key: one consumer takes a window
/// of each lane in turn, so `small`'s five and the plain ones run within the first windows,
/// each lane in publish order.
#[tokio::test]
async fn keys_take_turns_a_window_each() {
    let t = TestQueue::new().await;
    let big = publish(&t, Some("big"), 300).await;
    let small = publish(&t, Some("small"), 5).await;
    publish(&t, None, 40).await;
    assert!(big[0].starts_with("key.big.") && small[0].starts_with("key.small."));
    assert_eq!(t.children("lanes/keys/big").await.len(), 300);
    let recorder = Recorder::default();
    let report = process::run(&t.queue, &recorder, &harness::options(120, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 120, "{report:?}");
    let keys = keys_of(&recorder);
    let first = |key: &str| keys.iter().position(|k| k == key).unwrap();
    let last = |key: &str| keys.iter().rposition(|k| k == key).unwrap();
    // Turns go tasks/, big, small, ... starting after tasks/: a window of big, then small's.
    assert_eq!(first("big"), 0, "{keys:?}");
    assert_eq!(first("small"), WINDOW, "{keys:?}");
    assert_eq!(last("small"), WINDOW + 4, "{keys:?}");
    assert_eq!(first("-"), WINDOW + 5, "{keys:?}");
    assert_eq!(keys.iter().filter(|k| *k == "-").count(), 40);
    // Each lane oldest first.
    let names = recorder.names();
    let bigs: Vec<&String> = names.iter().filter(|n| n.starts_with("key.big.")).collect();
    assert!(bigs.windows(2).all(|w| w[0] < w[1]), "{bigs:?}");
}

/// A drain of 2 000 tasks of one key: a task of a new key published while it runs (its lane
/// made meanwhile, so the walk lists the key lanes again) starts within two windows and what
/// was in flight, not after the backlog.
#[tokio::test]
async fn a_new_key_published_behind_a_backlog_goes_out_with_the_next_window() {
    let t = TestQueue::new().await;
    publish(&t, Some("big"), 2_000).await;
    let concurrency = 8;
    let (seen, published_at) =
        drain_publishing_at(&t, keyed(Some("small"), 0), 100, concurrency).await;
    let small = (seen.iter())
        .position(|task| task.envelope.concurrency_key.as_deref() == Some("small"))
        .expect("the small task ran");
    let after = small - published_at;
    // Started after the publish and before it, at most: what was left of the window probed
    // then, the window whose probe learned of the new lane, and what was in flight.
    let bound = 2 * WINDOW + 2 * concurrency;
    assert!(
        after <= bound,
        "{after} tasks of big went first (bound {bound})"
    );
}

/// A keyed task that fails comes back to its key's lane after its backoff, and so does one
/// redriven from the dead letters; `status` finds it by name there.
#[tokio::test]
async fn a_keyed_task_keeps_its_lane_through_a_retry_and_a_redrive() {
    let t = TestQueue::with(|c| {
        c.max_attempts = 2;
        c.backoff_base = std::time::Duration::from_millis(1);
        c.backoff_max = std::time::Duration::from_millis(1);
    })
    .await;
    let name = t.queue.publish(&keyed(Some("k/1"), 0)).await.unwrap();
    assert_eq!(name, "key.k%2F1.0000000000");
    let failing = FnHandler(|_t: Task| async { Err(HandlerError::Retryable("later".into())) });
    let report = process::run(&t.queue, &failing, &harness::options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    let later = event_bridge::clock::ZkTime::at(t.now().await.now_ms() + 60_000);
    assert_eq!(t.queue.delays().promote_due(&later, 10).await.unwrap(), 1);
    let back = t.children("lanes/keys/k%2F1").await;
    assert_eq!(back, ["key.k%2F1.0000000001"], "back in its key's lane");
    assert!(t.children("tasks").await.is_empty());
    let status = eb(&t, &["status", &back[0]], "");
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && out.contains("pending"), "{out}");
    // A name in the lane of a key that never had a task is no task, not an error.
    let missing = eb(&t, &["status", "key.nope.0000000001"], "");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("no task key.nope.0000000001"), "{stderr}");

    let report = process::run(&t.queue, &failing, &harness::options(10, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(
        t.children("dead").await,
        back,
        "the dead letter keeps the name"
    );
    let redriven = eb(&t, &["dead", "redrive", "--all", "--yes"], "");
    assert!(redriven.status.success(), "{redriven:?}");
    assert_eq!(t.children("lanes/keys/k%2F1").await.len(), 1);
    let recorder = Recorder::default();
    let report = process::run(&t.queue, &recorder, &harness::options(10, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
}

/// `stats` counts the key lanes' tasks in normal's, and ages the oldest of them; a grouped or
/// high task with a key stays in its priority's lane.
#[tokio::test]
async fn stats_count_the_key_lanes() {
    let t = TestQueue::new().await;
    publish(&t, Some("a"), 3).await;
    publish(&t, Some("b"), 2).await;
    let mut grouped = keyed(Some("a"), 9);
    grouped.group = Some("g".into());
    let mut high = keyed(Some("a"), 10);
    high.priority = event_bridge::task::Priority::High;
    t.queue.publish_many(&[grouped, high]).await.unwrap();
    assert_eq!(t.children("tasks").await.len(), 1);
    assert_eq!(t.children("lanes/high").await.len(), 1);
    let stats = event_bridge::stats::collect(&t.queue, &t.now().await)
        .await
        .unwrap();
    assert_eq!(stats.depth, 7);
    let lanes = stats.lanes;
    assert_eq!(
        (lanes.high, lanes.normal, lanes.keyed, lanes.keys),
        (1, 6, 5, 2)
    );
    assert!(stats.oldest_task_age_ms.is_some());
}

/// A key lane's head moves only once it is a window behind: a drain of a key's few tasks
/// writes no head (its next walk's first window covers them anyway), and the key's next
/// tasks are still found; a drain of more than a window moves it.
#[tokio::test]
async fn a_key_lanes_head_is_written_once_it_is_a_window_behind() {
    let t = TestQueue::new().await;
    let head = |t: &TestQueue| {
        let path = format!("{}/lanes/keys/few", t.config.root);
        let raw = t.raw.clone();
        async move { raw.get_data(&path).await.unwrap() }
    };
    publish(&t, Some("few"), 5).await;
    let (_, before) = head(&t).await;
    let drain = harness::options(1_000, 8);
    let report = process::run(&t.queue, &Recorder::default(), &drain).await;
    assert_eq!(report.unwrap().completed, 5);
    let (_, after) = head(&t).await;
    assert_eq!(
        after.mzxid, before.mzxid,
        "five tasks: the head is not written"
    );
    // Its lane has no task left: a walk takes it as ended without a probe, head or not.
    let lanes = t.queue.probes().read_lanes().await.unwrap();
    let lanes = t.queue.probes().with_key_lanes(lanes).await.unwrap();
    assert!(event_bridge::queue::Walk::from_lanes(lanes).ended());
    publish(&t, Some("few"), WINDOW + 3).await;
    let report = process::run(&t.queue, &Recorder::default(), &drain).await;
    assert_eq!(
        report.unwrap().completed,
        WINDOW as u32 + 3,
        "found from the old head"
    );
    let (data, moved) = head(&t).await;
    assert_ne!(
        moved.mzxid, before.mzxid,
        "a window and more behind: written"
    );
    let head: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(head["next"], WINDOW + 8, "{head}");
}

/// Key lanes of a few tasks are probed together: the windows of the keys whose turns come
/// next ride along with the probe of the first, and are given in turn without a request of
/// their own (a drain over many small keys spent a probe per key).
#[tokio::test]
async fn the_next_keys_windows_are_read_along_with_the_first() {
    let t = TestQueue::new().await;
    for key in ["a", "b", "c"] {
        publish(&t, Some(key), 5).await;
    }
    let mut walk = event_bridge::queue::Walk::new();
    let mut keys = Vec::new();
    let first = walk.next_window(&t.queue).await.unwrap().expect("a window");
    keys.push(key_of(&first));
    for _ in 0..2 {
        let window = walk.next_window(&t.queue).now_or_never();
        let window = window
            .expect("read along: no request")
            .unwrap()
            .expect("a window");
        assert_eq!(window.len(), 5);
        keys.push(key_of(&window));
    }
    keys.sort();
    assert_eq!(keys, ["a", "b", "c"], "each key's window once, in turn");
    assert!(walk.next_window(&t.queue).await.unwrap().is_none());
}

/// The key of a window's tasks, all of one key lane.
fn key_of(window: &[event_bridge::queue::Probed]) -> String {
    let lanes: Vec<&str> = (window.iter())
        .map(|p| p.name.split('.').nth(1).unwrap())
        .collect();
    assert!(lanes.iter().all(|k| *k == lanes[0]), "{lanes:?}");
    lanes[0].to_string()
}

/// A key lane's head held back by a task still running keeps what its walk knew gone beyond
/// it, however short of a window it moved: the next walk passes those numbers by.
#[tokio::test]
async fn a_key_lanes_head_held_back_keeps_the_ranges_gone_beyond_it() {
    let t = TestQueue::new().await;
    let names = publish(&t, Some("slow"), 10).await;
    let other = t.consumer("other").await;
    let now = other.server_time().await.unwrap();
    let held = other.claim(&names[0], &now).await.unwrap();
    assert!(matches!(held, event_bridge::queue::TaskOutcome::Claimed(_)));
    let report = process::run(&t.queue, &Recorder::default(), &harness::options(100, 8)).await;
    assert_eq!(report.unwrap().completed, 9);
    let head = t.read_json("lanes/keys/slow").await;
    assert_eq!(head["next"], 0, "{head}");
    assert_eq!(head["gone"], json!([[1, 10]]), "{head}");
}
