//! Debounced publishing: publishes with one key within its period make one task, with the
//! last payload, due a period after the last publish and no later than the maximum wait after
//! the first; once it fired, the next publish starts a new one.

use std::time::Duration;

use event_bridge::cancel::cancel;
use event_bridge::clock::ZkTime;
use event_bridge::inspect;
use event_bridge::queue::Published;
use event_bridge::task::Debounce;
use event_bridge::{Envelope, process};
use serde_json::{Value, json};

use crate::cli::eb;
use harness::{Proxy, Recorder, TestQueue};

fn debounced(key: &str, n: usize, period_ms: u64, max_ms: Option<u64>) -> Envelope {
    let mut envelope = Envelope::new("search.reindex", json!({ "n": n }));
    envelope.debounce = Some(Debounce {
        key: key.into(),
        period_ms,
        max_ms,
    });
    envelope
}

/// The ctime and mtime of key `key`'s pending node.
async fn times(t: &TestQueue, key: &str) -> (i64, i64) {
    let path = format!("{}/debounce/{key}", t.config.root);
    let (_, stat) = t.raw.get_data(&path).await.unwrap();
    (stat.ctime, stat.mtime)
}

#[tokio::test]
async fn publishes_within_the_period_make_one_task_with_the_last_payload() {
    let t = TestQueue::new().await;
    let envelopes: Vec<Envelope> = (0..3)
        .map(|n| debounced("user-7", n, 10_000, None))
        .collect();
    let answers = t.queue.publish_all(&envelopes).await.unwrap();
    let replaced: Vec<Option<String>> = answers
        .iter()
        .map(|a| match a {
            Published::Debounced { replaced, .. } => replaced.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        replaced,
        [
            None,
            Some(envelopes[0].id.clone()),
            Some(envelopes[1].id.clone())
        ]
    );
    assert_eq!(t.children("debounce").await, ["user-7"]);
    assert!(t.children("tasks").await.is_empty(), "nothing runs yet");

    let (_, mtime) = times(&t, "user-7").await;
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, mtime + 9_999)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, mtime + 10_000)
            .await
            .unwrap(),
        1
    );
    assert!(t.children("debounce").await.is_empty());
    let recorder = Recorder::default();
    let report = process::run(&t.queue, &recorder, &harness::options(10, 4))
        .await
        .unwrap();
    assert_eq!(report.completed, 1);
    let seen = recorder.seen.lock().unwrap().clone();
    assert_eq!(seen[0].envelope.id, envelopes[2].id, "the last one runs");
    assert_eq!(seen[0].envelope.payload, json!({ "n": 2 }));

    // Fired: the next publish starts a new one.
    let next = [debounced("user-7", 3, 10_000, None)];
    match &t.queue.publish_all(&next).await.unwrap()[0] {
        Published::Debounced { replaced: None, .. } => {}
        other => panic!("{other:?}"),
    }
}

/// A run fires a key, and before it drops the key's entry from the due index (its delete held
/// on a slow link) a publish starts the key again, reading that entry as there: once the
/// entry is dropped, the new envelope must still fire when it is due (it waited under
/// `debounce/` with no entry, never to fire: a debounced publish lost).
#[tokio::test]
async fn a_key_started_again_while_a_run_drops_its_entry_still_fires() {
    let t = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let run = event_bridge::Session::open(proxy.config_for(&t), "run", None)
        .await
        .unwrap()
        .queue();
    t.queue
        .publish(&debounced("k", 0, 1_000, None))
        .await
        .unwrap();
    let (_, mtime) = times(&t, "k").await;
    proxy.hold_delete_of("/debounce-due/0000000000000/k");
    let firing = tokio::spawn(async move {
        event_bridge::features::debounce::fire_due(&run, mtime + 1_000).await
    });
    proxy.holding().await;
    assert!(t.children("debounce").await.is_empty(), "fired first");

    let again = t.queue.publish_all(&[debounced("k", 1, 1_000, None)]).await;
    let again = again.unwrap().remove(0);
    assert!(
        matches!(again, Published::Debounced { replaced: None, .. }),
        "{again:?}"
    );
    proxy.release();
    assert_eq!(firing.await.unwrap().unwrap(), 1);

    let (_, mtime) = times(&t, "k").await;
    let fired = event_bridge::features::debounce::fire_due(&t.queue, mtime + 1_000)
        .await
        .unwrap();
    assert_eq!(fired, 1, "the key started again fires when due");
    assert!(t.children("debounce").await.is_empty());
}

/// With a maximum wait, a key published again and again still fires that long after its first
/// publish; without one, it waits a period after its last.
#[tokio::test]
async fn the_maximum_wait_bounds_a_key_published_again_and_again() {
    let t = TestQueue::new().await;
    for key in ["capped", "uncapped"] {
        let max = (key == "capped").then_some(10_000);
        t.queue
            .publish(&debounced(key, 0, 10_000, max))
            .await
            .unwrap();
    }
    // Published again later (by ZooKeeper's clock), so the last write is after the first.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for key in ["capped", "uncapped"] {
        let max = (key == "capped").then_some(10_000);
        t.queue
            .publish(&debounced(key, 1, 10_000, max))
            .await
            .unwrap();
    }
    let (ctime, mtime) = times(&t, "capped").await;
    assert!(mtime > ctime, "written twice: {ctime} {mtime}");
    let (ctime_u, _) = times(&t, "uncapped").await;
    let at = ctime.max(ctime_u) + 10_000;
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, at)
            .await
            .unwrap(),
        1,
        "the capped one"
    );
    assert_eq!(t.children("debounce").await, ["uncapped"]);
}

/// A run fires what is due before its passes, in the lane the envelope names.
#[tokio::test]
async fn a_run_fires_what_is_due_in_its_lane() {
    let t = TestQueue::new().await;
    let mut envelope = debounced("k", 0, 1, None);
    envelope.priority = event_bridge::task::Priority::High;
    t.queue.publish(&envelope).await.unwrap();
    // A millisecond's period: over for a run judging a millisecond on.
    let later = ZkTime::at(t.now().await.now_ms() + 1);
    let recorder = Recorder::default();
    let report = process::run_at(&t.queue, &recorder, &harness::options(10, 1), &later)
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert!(recorder.names()[0].starts_with("high-"));
    let stats = event_bridge::stats::collect(&t.queue, &t.now().await)
        .await
        .unwrap();
    assert_eq!(stats.debounced, 0);
}

/// `publish --debounce-key` debounces, and a bad period, a key without a period or one with an
/// idempotency key are refused naming the field, with nothing published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_debounces_and_refuses_what_does_not_make_sense() {
    let t = TestQueue::new().await;
    let args = [
        "publish",
        "--debounce-key",
        "k",
        "--debounce",
        "30s",
        "--payload",
    ];
    let first = eb(&t, &[&args[..], &["{\"n\":1}"]].concat(), "");
    assert!(first.status.success(), "{first:?}");
    let second = eb(&t, &[&args[..], &["{\"n\":2}"]].concat(), "");
    let line: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(line["published"], "debounced");
    assert!(line["replaced"].is_string(), "{line}");
    let pending = t.read_json("debounce/k").await;
    assert_eq!(pending["payload"], json!({ "n": 2 }));
    let stats = event_bridge::stats::collect(&t.queue, &t.now().await)
        .await
        .unwrap();
    assert_eq!(stats.debounced, 1);

    let bad = eb(
        &t,
        &["publish", "--debounce-key", "j", "--debounce", "soon"],
        "",
    );
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("\"debounce\" must be a number with a unit"),
        "{stderr}"
    );
    for (line, problem) in [
        (
            json!({"type": "a", "payload": 1, "debounce_key": "j"}),
            "\"debounce_key\" needs a \"debounce\"",
        ),
        (
            json!({"type": "a", "payload": 1, "debounce_key": "j", "debounce": "1s", "debounce_max": "10ms"}),
            "\"debounce_max\" must be at least the period",
        ),
        (
            json!({"type": "a", "payload": 1, "debounce_key": "j", "debounce": "1s", "idempotency_key": "i"}),
            "do not go together",
        ),
    ] {
        let out = eb(&t, &["publish", "-f", "-"], &line.to_string());
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(problem), "{stderr}");
    }
    assert_eq!(
        t.children("debounce").await,
        ["k"],
        "nothing more published"
    );
    assert!(t.children("tasks").await.is_empty());
}

/// Where `key` (a task name or an id) is, as `status --json` prints it.
async fn status_of(t: &TestQueue, key: &str) -> Value {
    let status = inspect::status(&t.queue, &t.now().await, key)
        .await
        .unwrap();
    serde_json::to_value(status).unwrap()
}

/// `status` finds a debounced publish pending under its key by its id, with the key, when it
/// is due and the maximum wait's deadline (null without one); the id of a publish a later one
/// of its key replaced is pending no more; once fired, the id is its task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_finds_a_pending_debounced_publish_by_its_id() {
    let t = TestQueue::new().await;
    let first = debounced("doc-7", 1, 30_000, Some(300_000));
    let last = debounced("doc-7", 2, 30_000, Some(300_000));
    let uncapped = debounced("doc-8", 3, 20_000, None);
    for envelope in [&first, &last, &uncapped] {
        t.queue.publish(envelope).await.unwrap();
    }
    let (ctime, mtime) = times(&t, "doc-7").await;

    let status = status_of(&t, &last.id).await;
    assert_eq!(status["state"], "debounced", "{status}");
    assert_eq!(
        (&status["key"], &status["id"]),
        (&json!("doc-7"), &json!(last.id))
    );
    assert_eq!(status["due_at_ms"], mtime + 30_000, "{status}");
    assert_eq!(status["max_wait_until_ms"], ctime + 300_000, "{status}");
    let due_in = status["due_in_ms"].as_i64().unwrap();
    assert!(due_in > 0 && due_in <= 30_000, "{status}");
    assert_eq!(status["envelope"]["payload"], json!({ "n": 2 }));
    let (_, mtime_8) = times(&t, "doc-8").await;
    let status = status_of(&t, &uncapped.id).await;
    assert_eq!(status["due_at_ms"], mtime_8 + 20_000, "{status}");
    assert_eq!(status["max_wait_until_ms"], Value::Null, "{status}");

    let replaced = status_of(&t, &first.id).await;
    assert_eq!(replaced["state"], "not_found", "{replaced}");

    let text = eb(&t, &["status", &last.id], "");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(text.status.success(), "{text:?}");
    assert!(
        stdout.contains("debounced") && stdout.contains("\"doc-7\""),
        "{stdout}"
    );
    let json = eb(&t, &["status", "--json", &last.id], "");
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (&json["state"], &json["key"]),
        (&json!("debounced"), &json!("doc-7"))
    );
    assert_eq!(eb(&t, &["status", &first.id], "").status.code(), Some(3));

    // doc-8 (due 20 s after its publish) fires too.
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, mtime + 30_000)
            .await
            .unwrap(),
        2
    );
    let fired = status_of(&t, &last.id).await;
    assert_eq!(fired["state"], "pending", "{fired}");
    assert!(fired["task"]["name"].as_str().unwrap().starts_with("task-"));
}

/// `cancel` withdraws a pending debounced publish by its id: its key's znode is deleted, no
/// task is made and no dead letter written; the id of a publish a later one replaced is not
/// found, and the later one stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_withdraws_a_pending_debounced_publish() {
    let t = TestQueue::new().await;
    let only = debounced("doc-7", 1, 30_000, None);
    t.queue.publish(&only).await.unwrap();
    let withdrawn = serde_json::to_value(cancel(&t.queue, &only.id).await.unwrap()).unwrap();
    assert_eq!(withdrawn, json!({ "state": "withdrawn", "key": "doc-7" }));
    assert!(t.children("debounce").await.is_empty());
    assert!(t.children("dead").await.is_empty(), "it never was a task");
    assert_eq!(status_of(&t, &only.id).await["state"], "not_found");

    let first = debounced("doc-9", 1, 30_000, None);
    let last = debounced("doc-9", 2, 30_000, None);
    t.queue.publish(&first).await.unwrap();
    t.queue.publish(&last).await.unwrap();
    let out = eb(&t, &["cancel", &first.id], "");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&first.id), "{stderr}");
    assert_eq!(t.read_json("debounce/doc-9").await["id"], json!(last.id));
    let out = eb(&t, &["cancel", &last.id], "");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        json!({ "state": "withdrawn", "key": "doc-9" }),
        "{out:?}"
    );
    assert!(t.children("debounce").await.is_empty());
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, i64::MAX / 2)
            .await
            .unwrap(),
        0
    );
    assert!(t.children("tasks").await.is_empty(), "nothing runs");
}

/// Many publishes of one key in one bulk publish (a JSON lines file, say): the envelope left
/// pending is the last one, and each replaced the one before it. (The checker found the bulk
/// publish's pipelined writes landing out of order: an earlier envelope that lost a race with a
/// later one wrote over it.)
#[tokio::test]
async fn a_bulk_publish_of_one_key_leaves_its_last_envelope() {
    let t = TestQueue::new().await;
    let envelopes: Vec<Envelope> = (0..40)
        .map(|n| debounced("user-9", n, 60_000, None))
        .collect();
    let answers = t.queue.publish_all(&envelopes).await.unwrap();
    for (n, answer) in answers.iter().enumerate() {
        let expected = n.checked_sub(1).map(|before| envelopes[before].id.clone());
        match answer {
            Published::Debounced { replaced, .. } => assert_eq!(replaced, &expected, "#{n}"),
            other => panic!("{other:?}"),
        }
    }
    let pending = t.read_json("debounce/user-9").await;
    assert_eq!(pending["id"], envelopes[39].id.as_str());
    assert_eq!(pending["payload"], json!({ "n": 39 }));
}

/// A due key fires whatever the number of keys pending: 10 000 keys wait an hour, and the one
/// ZooKeeper lists last (where a look at the first 256 names never reaches) is made due at
/// once by a publish with a shorter period. The next run fires it, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_key_fires_among_ten_thousand_pending() {
    let t = TestQueue::new().await;
    let hour = 3_600_000;
    let envelopes: Vec<Envelope> = (0..10_000)
        .map(|n| debounced(&format!("doc-{n}"), n, hour, None))
        .collect();
    t.queue.publish_all(&envelopes).await.unwrap();
    let (_, mtime) = times(&t, "doc-0").await;
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, mtime + 1)
            .await
            .unwrap(),
        0
    );

    let listed = t.children("debounce").await;
    assert_eq!(listed.len(), 10_000);
    let path = format!("{}/debounce", t.config.root);
    let order = t.raw.list_children(&path).await.unwrap();
    let last = order.last().unwrap().clone();
    assert!(
        order.len() > 256,
        "listed where a look at the first 256 never reaches"
    );
    let n: usize = last.trim_start_matches("doc-").parse().unwrap();
    t.queue
        .publish(&debounced(&last, n, 1, None))
        .await
        .unwrap();
    let (_, mtime) = times(&t, &last).await;

    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, mtime + 1)
            .await
            .unwrap(),
        1
    );
    let tasks = t.children("tasks").await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let fired = t.read_json(&format!("tasks/{}", tasks[0])).await;
    assert_eq!(fired["payload"], json!({ "n": n }));
    assert_eq!(t.children("debounce").await.len(), 9_999);
}
