//! Task expiry (`shared/src/features/expiry/`): a task no run has started by its `expires_at` is
//! never handed to a handler; it goes to the dead letters as `expired`. Every run and every
//! look judges at a moment the test drives (ZooKeeper's time now, plus a span), never after a
//! sleep.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::features::expiry::ExpiresAt;
use event_bridge::handler::FnHandler;
use event_bridge::inspect::{self, Reason};
use event_bridge::state::State;
use event_bridge::{Envelope, Handler, HandlerError, ProcessReport, Task, process};
use serde_json::{Value, json};

use crate::cli::eb;
use harness::{Recorder, TestQueue, options};

/// An envelope of type `t` that expires at ZooKeeper's `ms`.
fn expiring(event_type: &str, ms: i64) -> Envelope {
    let mut envelope = Envelope::new(event_type, json!({}));
    ExpiresAt::at_ms(ms).expect("in range").set(&mut envelope);
    envelope
}

/// One run of `process_events`' work judging at `now`.
async fn run_at<H: Handler>(t: &TestQueue, handler: &H, now: i64) -> ProcessReport {
    let at = ZkTime::at(now);
    process::run_at(&t.queue, handler, &options(100, 4), &at)
        .await
        .expect("run")
}

/// The dead letters' records (`dead/<name>` read as JSON).
async fn dead_letters(t: &TestQueue) -> Vec<Value> {
    let mut records = Vec::new();
    for name in t.children("dead").await {
        records.push(t.read_json(&format!("dead/{name}")).await);
    }
    records
}

fn reasons_and_ids(records: &[Value]) -> Vec<(String, String)> {
    let field = |r: &Value, f: &str| r[f].as_str().unwrap_or_default().to_string();
    (records.iter())
        .map(|r| (field(r, "reason"), field(&r["body"], "id")))
        .collect()
}

/// A run judges an expiry by the latest ZooKeeper's time may be: its reading was stamped 10 s
/// before the task expires, but its request was sent 20 s before its answer came, so the
/// server's time may be 10 s past the expiry already. The task is buried as expired, never run.
/// (Judged by the earliest the time may be, as due times are, it ran: a consumer whose
/// reading took a long round trip ran a task published already expired.)
#[tokio::test]
async fn a_run_buries_a_task_whose_expiry_may_have_passed_by_its_reading_of_the_time() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let task = expiring("report.send", now + 60_000);
    t.queue.publish(&task).await.unwrap();
    let sent = (std::time::Instant::now())
        .checked_sub(Duration::from_secs(20))
        .expect("the machine has been up 20 s");
    let at = ZkTime::from_request(now + 50_000, sent);
    assert!(at.now_ms() < now + 60_000 && at.latest_ms() >= now + 60_000);
    let handler = Recorder::default();
    let report = (process::run_at(&t.queue, &handler, &options(100, 4), &at).await).expect("run");
    assert_eq!((report.completed, report.dead_lettered), (0, 1));
    assert_eq!(handler.count(), 0, "the task may have expired: never run");
    let dead = dead_letters(&t).await;
    assert_eq!(reasons_and_ids(&dead), [("expired".into(), task.id)]);
}

/// Published with an expiry a minute ahead: a run before it runs the task; a run after it
/// buries the other one as expired and never calls the handler with it.
#[tokio::test]
async fn a_task_runs_before_its_expiry_and_is_dead_lettered_as_expired_after_it() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let early = expiring("report.send", now + 60_000);
    let late = expiring("report.send", now + 60_000);
    let first = t.queue.publish(&early).await.unwrap();
    let handler = Recorder::default();
    let before = run_at(&t, &handler, now + 59_999).await;
    assert_eq!((before.completed, before.dead_lettered), (1, 0));
    assert_eq!(handler.names(), std::slice::from_ref(&first));

    t.queue.publish(&late).await.unwrap();
    let after = run_at(&t, &handler, now + 60_000).await;
    assert_eq!((after.completed, after.dead_lettered), (0, 1));
    assert_eq!(
        handler.names(),
        [first],
        "the expired task never reached the handler"
    );
    let dead = dead_letters(&t).await;
    assert_eq!(
        reasons_and_ids(&dead),
        [("expired".into(), late.id.clone())]
    );
    assert_eq!(
        dead[0]["body"]["expires_at"],
        json!(ExpiresAt::at_ms(now + 60_000).unwrap())
    );
}

/// `explain` says when a pending task expires, then that it expired, then why it is dead.
#[tokio::test]
async fn explain_says_when_it_expires_and_that_it_expired() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let name = t.queue.publish(&expiring("t", now + 60_000)).await.unwrap();
    let look = |at: i64| {
        let (queue, name) = (t.queue.clone(), name.clone());
        async move { (inspect::explain(&queue, &ZkTime::at(at), &name).await).expect("explain") }
    };
    let before = look(now + 30_000).await;
    assert_eq!(before.state, Some(State::Pending));
    assert!(matches!(before.reasons[0], Reason::Ready), "{before:?}");
    assert!(
        before.lines[1].starts_with("expires at ") && before.lines[1].contains("(in 30.0 s)"),
        "{:?}",
        before.lines
    );
    let after = look(now + 90_000).await;
    assert!(
        after.lines[1].starts_with("expired at ") && after.lines[1].contains("(30.0 s ago)"),
        "{:?}",
        after.lines
    );
    assert!(matches!(&after.reasons[1], Reason::Feature { feature, .. } if feature == "expiry"));

    run_at(&t, &Recorder::default(), now + 90_000).await;
    let dead = look(now + 90_000).await;
    assert_eq!(dead.state, Some(State::Dead));
    assert!(matches!(&dead.reasons[..], [Reason::Dead { why, .. }] if why == "expired"));
}

/// A retry whose backoff ends after the expiry is buried as expired when next claimed, as
/// Celery's `expires` does: the handler ran once, before the expiry.
#[tokio::test]
async fn a_retry_due_after_the_expiry_is_dead_lettered_as_expired() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(1_000)).await;
    let now = t.now().await.now_ms();
    let envelope = expiring("t", now + 60_000);
    t.queue.publish(&envelope).await.unwrap();
    let calls = Arc::new(Mutex::new(0));
    let counted = calls.clone();
    let failing = FnHandler(move |_task: Task| {
        *counted.lock().unwrap() += 1;
        async { Err(HandlerError::Retryable("upstream 503".into())) }
    });
    let first = run_at(&t, &failing, now).await;
    assert_eq!((first.claimed, first.retried), (1, 1));
    let later = run_at(&t, &failing, now + 120_000).await;
    assert_eq!(later.dead_lettered, 1);
    assert_eq!(*calls.lock().unwrap(), 1, "no attempt after the expiry");
    let dead = dead_letters(&t).await;
    assert_eq!(reasons_and_ids(&dead), [("expired".into(), envelope.id)]);
    assert_eq!(dead[0]["body"]["last_error"], "upstream 503");
}

/// A child that expires while it waits for its parent, and a grouped task that expires
/// while its group runs the task before it: each waits on as it would, is buried as expired
/// when its turn comes, and never runs; the group goes on with its next task.
#[tokio::test]
async fn a_child_or_a_grouped_task_that_expires_while_it_waits_never_runs() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let parent = Envelope::new("parent", json!({}));
    let mut child = expiring("child", now + 60_000);
    child.after = vec![parent.id.clone()];
    let grouped = |event_type: &str, expiry: Option<i64>| {
        let mut envelope = match expiry {
            Some(ms) => expiring(event_type, ms),
            None => Envelope::new(event_type, json!({})),
        };
        envelope.group = Some("g".into());
        envelope
    };
    let (g1, g2, g3) = (
        grouped("g1", None),
        grouped("g2", Some(now + 60_000)),
        grouped("g3", None),
    );
    let all = [parent, child.clone(), g1, g2.clone(), g3];
    t.queue.publish_many(&all).await.unwrap();

    let handler = Recorder::default();
    for _ in 0..4 {
        run_at(&t, &handler, now + 120_000).await;
    }
    let mut ran: Vec<String> = (handler.seen.lock().unwrap().iter())
        .map(|task| task.envelope.event_type.clone())
        .collect();
    ran.sort();
    assert_eq!(ran, ["g1", "g3", "parent"]);
    let mut dead = reasons_and_ids(&dead_letters(&t).await);
    dead.sort();
    let mut expected = vec![("expired".to_string(), child.id), ("expired".into(), g2.id)];
    expected.sort();
    assert_eq!(dead, expected);
}

/// `publish --expires-in 10m` sets `expires_at` ten minutes past ZooKeeper's time at the
/// publish; a JSON line's own `expires_at` is kept; one that is no time is refused, naming
/// the field, and publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sets_an_expiry_with_expires_in_or_a_line_s_expires_at() {
    let t = TestQueue::new().await;
    let before = t.now().await.now_ms();
    let args = [
        "publish",
        "--type",
        "t",
        "--payload",
        "{}",
        "--expires-in",
        "10m",
    ];
    let out = eb(&t, &args, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = t.now().await.now_ms();
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = t
        .read_json(&format!("tasks/{}", printed["task"].as_str().unwrap()))
        .await;
    let at: ExpiresAt = serde_json::from_value(task["expires_at"].clone()).unwrap();
    assert!(
        (before + 600_000..=after + 600_000).contains(&at.ms()),
        "{} not 10 min past the publish",
        task["expires_at"]
    );

    let line = r#"{"type": "t", "payload": {}, "expires_at": "2030-01-01T12:00:00+02:00"}"#;
    let out = eb(&t, &["publish", "-f", "-"], line);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = t
        .read_json(&format!("tasks/{}", printed["task"].as_str().unwrap()))
        .await;
    assert_eq!(task["expires_at"], "2030-01-01T12:00:00+02:00");

    let bad = r#"{"type": "t", "payload": {}, "expires_at": "in an hour"}"#;
    let out = eb(&t, &["publish", "-f", "-"], bad);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"expires_at\" is malformed") && stderr.contains("RFC 3339"),
        "{stderr}"
    );
    assert_eq!(t.children("tasks").await.len(), 2);
}

/// The library refuses an `expires_at` that is no time before anything is written.
#[tokio::test]
async fn the_library_refuses_an_expiry_that_is_no_time() {
    let t = TestQueue::new().await;
    let mut envelope = Envelope::new("t", json!({}));
    envelope.extra.insert("expires_at".into(), json!(12));
    let refused = t.queue.publish(&envelope).await.unwrap_err().to_string();
    assert!(refused.contains("\"expires_at\" is malformed"), "{refused}");
    let batch = t.queue.all_or_nothing().publish_batch(&[envelope]).await;
    assert!(batch.is_err());
    assert!(t.children("tasks").await.is_empty());
}

/// A claim that meets an expired task of a paused type buries it all the same (a pause holds
/// back runs, and this is none); the type's task that has not expired waits for the resume.
#[tokio::test]
async fn an_expired_task_of_a_paused_type_is_buried_all_the_same() {
    let t = TestQueue::new().await;
    let paused = event_bridge::features::pause::PauseTarget::Type("report.send".into());
    assert!(t.queue.pauses().pause(&paused).await.unwrap());
    let now = t.now().await.now_ms();
    let expired = expiring("report.send", now + 1_000);
    let later = expiring("report.send", now + 600_000);
    t.queue
        .publish_many(&[expired.clone(), later])
        .await
        .unwrap();
    let handler = Recorder::default();
    let report = run_at(&t, &handler, now + 60_000).await;
    assert_eq!((report.dead_lettered, handler.count()), (1, 0));
    let dead = dead_letters(&t).await;
    assert_eq!(reasons_and_ids(&dead), [("expired".into(), expired.id)]);
    assert_eq!(
        t.children("tasks").await.len(),
        1,
        "the other waits for the resume"
    );
}
