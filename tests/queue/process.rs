//! `process_events`' runs: concurrency, failures, backoff, dead letters, deadlines.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::{HandlerError, ProcessReport, RunOptions, Task, process};
use serde_json::json;
use tokio::time::Instant;

use harness::{Recorder, TestQueue, options, run};

/// `consumers` sessions drain `tasks` tasks at once; every task must run exactly once.
async fn consumers_never_share_a_task(consumers: usize, tasks: usize) {
    let t = TestQueue::new().await;
    t.publish(tasks).await;
    let runs: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    // Every session first: a consumer that started while the others still connected could
    // drain the queue alone.
    let mut queues = Vec::new();
    for c in 0..consumers {
        queues.push(t.consumer(&format!("c{c}")).await);
    }
    let mut joins = Vec::new();
    for (c, queue) in queues.into_iter().enumerate() {
        let runs = runs.clone();
        joins.push(tokio::spawn(async move {
            let handler = FnHandler(move |task: Task| {
                let runs = runs.clone();
                let consumer = format!("c{c}");
                async move {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
                    runs.lock()
                        .unwrap()
                        .entry(task.name)
                        .or_default()
                        .push(consumer);
                    Ok(())
                }
            });
            process::run(&queue, &handler, &options(tasks as u32, 4))
                .await
                .expect("run")
        }));
    }
    let reports: Vec<ProcessReport> = futures::future::try_join_all(joins).await.unwrap();
    let runs = std::mem::take(&mut *runs.lock().unwrap());
    assert_eq!(runs.len(), tasks, "every task ran");
    let twice: Vec<_> = runs.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(twice.is_empty(), "tasks run more than once: {twice:?}");
    let completed: u32 = reports.iter().map(|r| r.completed).sum();
    assert_eq!(completed as usize, tasks);
    let busy = reports.iter().filter(|r| r.completed > 0).count();
    assert!(busy > 1, "the work was shared: {reports:?}");
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());
}

#[tokio::test]
async fn two_consumers_never_both_complete_one_task() {
    consumers_never_share_a_task(2, 200).await;
}

#[tokio::test]
async fn eight_consumers_never_both_complete_one_task() {
    consumers_never_share_a_task(8, 400).await;
}

/// Fails every attempt with `error`, counting calls.
fn failing(error: HandlerError, calls: Arc<Mutex<u32>>) -> impl event_bridge::Handler {
    FnHandler(move |_task: Task| {
        *calls.lock().unwrap() += 1;
        let error = error.clone();
        async move { Err(error) }
    })
}

#[tokio::test]
async fn retryable_failures_back_off_then_go_to_the_dead_letters() {
    let t = TestQueue::with(|c| {
        c.max_attempts = 3;
        c.backoff_base = Duration::from_millis(1_000);
    })
    .await;
    let name = t.publish(1).await.remove(0);
    let id = t.read_json(&format!("tasks/{name}")).await["id"].clone();
    let calls = Arc::new(Mutex::new(0));
    let handler = failing(
        HandlerError::Retryable("upstream 503".into()),
        calls.clone(),
    );

    let first = run(&t.queue, &handler, 1).await;
    assert_eq!((first.claimed, first.retried), (1, 1));
    // It waits out its backoff outside `tasks/`.
    assert!(t.children("tasks").await.is_empty());
    let waiting = t.waiting().await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(waiting[0].ends_with(&format!("~{name}")), "{waiting:?}");
    let task = t.read_json(&waiting[0]).await;
    assert_eq!(
        (task["attempts"].clone(), task["last_error"].clone()),
        (json!(1), json!("upstream 503"))
    );
    let retry_at = task["retry_at"].as_i64().expect("retry_at set");
    let path = format!("{}/{}", t.config.root, waiting[0]);
    let (_, stat) = t.raw.get_data(&path).await.unwrap();
    let wait = retry_at - stat.mtime;
    assert!(
        (500..=1_500).contains(&wait),
        "backoff of about BACKOFF_BASE_MS from the release, got {wait} ms"
    );

    // Within the backoff nothing is claimed, and nothing is read at the head.
    let early = run(&t.queue, &handler, 1).await;
    assert_eq!(early.claimed, 0);
    assert_eq!(*calls.lock().unwrap(), 1);

    // Keep running until it is dead: each attempt waits out a longer backoff, then comes back
    // at the tail under a new name. Each run judges a minute past the one before, past any
    // backoff of three attempts.
    let mut dead = 0;
    for minutes in 1..=10 {
        let later = ZkTime::at(t.now().await.now_ms() + minutes * 60_000);
        let report = process::run_at(&t.queue, &handler, &options(1, 16), &later)
            .await
            .expect("run");
        dead += report.dead_lettered;
        if dead > 0 {
            break;
        }
    }
    assert_eq!(dead, 1);
    assert_eq!(
        *calls.lock().unwrap(),
        3,
        "MAX_ATTEMPTS=3 runs the handler three times"
    );
    let dead = t.children("dead").await;
    assert_eq!(dead.len(), 1);
    let record = t.read_json(&format!("dead/{}", dead[0])).await;
    assert_eq!(record["reason"], "gave up after 3 attempts");
    assert_eq!(record["attempts"], 3);
    assert_eq!(record["last_error"], "upstream 503");
    assert_eq!(record["body"]["type"], "test");
    assert_eq!(record["body"]["id"], id, "the same task, by its id");
    assert_eq!(record["body"]["moved_from"][0], name.as_str(), "{record}");
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());
    assert!(t.waiting().await.is_empty());
}

#[tokio::test]
async fn a_permanent_failure_goes_to_the_dead_letters_at_once() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let calls = Arc::new(Mutex::new(0));
    let handler = failing(
        HandlerError::Permanent("HTTP 400: no such user".into()),
        calls.clone(),
    );
    let report = run(&t.queue, &handler, 5).await;
    assert_eq!(
        (report.claimed, report.dead_lettered, report.retried),
        (1, 1, 0)
    );
    let record = t.read_json(&format!("dead/{name}")).await;
    assert_eq!(record["reason"], "permanent failure");
    assert_eq!(record["last_error"], "HTTP 400: no such user");
    assert_eq!(record["attempts"], 1);
}

#[tokio::test]
async fn poison_bodies_go_to_the_dead_letters_on_their_first_claim() {
    let t = TestQueue::new().await;
    let bad_utf8 = t.queue.publish_raw(b"\xff\xfe{}").await.unwrap();
    let bad_json = t.queue.publish_raw(b"{\"user_id\": 1,").await.unwrap();
    let good = t.publish(1).await.remove(0);
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!((report.dead_lettered, report.completed), (2, 1));
    assert_eq!(recorder.names(), [good]);
    let utf8 = t.read_json(&format!("dead/{bad_utf8}")).await;
    assert!(
        utf8["reason"].as_str().unwrap().contains("not UTF-8"),
        "{utf8}"
    );
    assert_eq!(utf8["body_base64"], "//57fQ==");
    assert_eq!(utf8["attempts"], 0);
    let json = t.read_json(&format!("dead/{bad_json}")).await;
    assert!(
        json["reason"].as_str().unwrap().contains("not JSON"),
        "{json}"
    );
    assert_eq!(json["body_text"], "{\"user_id\": 1,");
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());
}

#[tokio::test]
async fn a_drain_stops_before_the_deadline_and_releases_unfinished_claims() {
    let t = TestQueue::new().await;
    t.publish(5).await;
    // Never ends by itself.
    let slow = FnHandler(|_task: Task| async {
        std::future::pending::<()>().await;
        Ok(())
    });
    let deadline = Instant::now() + Duration::from_secs(3);
    let options = RunOptions {
        max_tasks: 100,
        concurrency: 2,
        deadline,
        margin: Duration::from_secs(2),
    };
    let report = process::run(&t.queue, &slow, &options).await.unwrap();
    assert!(
        Instant::now() < deadline,
        "the run returned before its deadline"
    );
    assert_eq!(
        (
            report.claimed,
            report.released_at_deadline,
            report.completed
        ),
        (2, 2, 0)
    );
    assert!(
        t.children("leases").await.is_empty(),
        "no claim is left behind"
    );
    assert_eq!(t.children("tasks").await.len(), 5);
    for name in t.children("tasks").await {
        let task = t.read_json(&format!("tasks/{name}")).await;
        assert_eq!(
            task["attempts"], 0,
            "a run out of time does not count against the task"
        );
        assert!(
            task.get("retry_at").is_none(),
            "and it is claimable again at once"
        );
    }
    // Released tasks run on the next invocation.
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 5);
}

/// A handler that runs past the moment its claim's lease would have expired keeps the task:
/// the holder extends the lease (the production minimum, 10 s: every third of it), so a
/// reaper judging at that moment frees nothing. The handler waits for the extension itself
/// (a hang guard of 30 s), and the reaper judges at a moment the test chooses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_outlives_the_lease_timeout_keeps_its_lease_by_extending_it() {
    let t = TestQueue::with(|c| c.lease_timeout = Duration::from_secs(10)).await;
    t.publish(1).await;
    let reaper = t.consumer("reaper").await;
    let (raw, root, timeout) = (
        t.raw.clone(),
        t.config.root.clone(),
        t.config.lease_timeout.as_millis() as i64,
    );
    let reaped = Arc::new(Mutex::new(None));
    let slow = {
        let reaped = reaped.clone();
        FnHandler(move |task: Task| {
            let (raw, reaper, reaped) = (raw.clone(), reaper.clone(), reaped.clone());
            let path = format!("{root}/leases/{}", task.name);
            async move {
                let (_, claimed) = raw.get_data(&path).await.unwrap();
                let extended = || async {
                    let (_, now) = raw.get_data(&path).await.unwrap();
                    now.version > claimed.version
                };
                harness::poll(Duration::from_secs(30), extended).await;
                // Just past the moment the claim's lease would have expired unextended.
                let past = ZkTime::at(claimed.mtime + timeout + 1);
                let report = event_bridge::reap::reap_at(&reaper, &past).await.unwrap();
                *reaped.lock().unwrap() = Some(report.reaped);
                Ok(())
            }
        })
    };
    let report = run(&t.queue, &slow, 1).await;
    assert_eq!(
        *reaped.lock().unwrap(),
        Some(0),
        "an extended lease is not reaped"
    );
    assert_eq!((report.completed, report.leases_lost), (1, 0));
}

#[tokio::test]
async fn a_task_too_large_to_rewrite_is_dead_lettered_and_does_not_block_the_queue() {
    let t = TestQueue::new().await;
    // A plain body just under the limit: ZooKeeper takes it, but wrapped in an envelope on
    // claim it would be over.
    let filler = "x".repeat(999_900);
    let big = t
        .queue
        .publish_raw(format!(r#"{{"blob":"{filler}"}}"#).as_bytes())
        .await
        .unwrap();
    // A binary body whose base64 copy would not fit in a record.
    let binary = t.queue.publish_raw(&vec![0xff; 850_001]).await.unwrap();
    let small = t.publish(1).await.remove(0);

    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 1).await;
    assert_eq!(
        (report.dead_lettered, report.completed),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(recorder.names(), [small]);
    let record = t.read_json(&format!("dead/{big}")).await;
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .starts_with("task too large to claim"),
        "{}",
        record["reason"]
    );
    // The record keeps it whole: it fits under ZooKeeper's packet limit as it is.
    assert_eq!(record["body"]["blob"].as_str().unwrap().len(), 999_900);
    // Its base64 copy would not: the record keeps the size, digest and head instead.
    let record = t.read_json(&format!("dead/{binary}")).await;
    assert!(record["reason"].as_str().unwrap().contains("not UTF-8"));
    assert_eq!(record["body_omitted"]["bytes"], 850_001);
    assert_eq!(record["body_omitted"]["sha256"].as_str().unwrap().len(), 64);
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());
}
