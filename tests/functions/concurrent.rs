//! `process_events` on Lambda Managed Instances: with `AWS_LAMBDA_MAX_CONCURRENCY` set, one
//! process takes that many invocations at once, all on one `App` (one ZooKeeper session).

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use harness::TestQueue;
use harness::lambda_api::{RuntimeApi, function_command};

/// Invocations handed out at once, as `AWS_LAMBDA_MAX_CONCURRENCY` asks.
const CONCURRENCY: usize = 8;
/// Tasks each invocation claims (`MAX_TASKS_PER_RUN`).
const PER_RUN: usize = 4;
/// Tasks published for them to share: exactly what the invocations claim between them.
const TASKS: usize = CONCURRENCY * PER_RUN;

/// Eight `next` calls are outstanding before any is answered (the Runtime API answers none
/// before), all eight invocations answer, every task completes once across their summaries,
/// every summary carries the same consumer id (one `App` opened at cold start), and the
/// process logged one ZooKeeper session opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_invocations_share_one_session_and_claim_each_task_once() {
    let t = TestQueue::new().await;
    t.publish(TASKS).await;
    let scheduled = json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}});
    let ids: Vec<String> = (0..CONCURRENCY).map(|i| format!("conc-{i}")).collect();
    let events = ids
        .iter()
        .map(|id| (id.as_str(), scheduled.clone()))
        .collect();
    let mut api = RuntimeApi::start_gated(events, CONCURRENCY).await.unwrap();
    // Its logs, in a file (a pipe nobody reads could fill and stop it), named for the chroot.
    let chroot = t.config.zookeeper.rsplit('/').next().unwrap();
    let log_path = std::env::temp_dir().join(format!("process_events-{chroot}.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut function = function_command("process_events", &api, &t.config)
        .env("AWS_LAMBDA_MAX_CONCURRENCY", CONCURRENCY.to_string())
        .env("MAX_TASKS_PER_RUN", PER_RUN.to_string())
        .env("RUST_LOG", "event_bridge::session=debug,warn")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let (nexts_before_first_answer, reports) = answers(&mut api).await;
    let _ = function.kill().await;
    let logs = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    let sessions = logs.matches("zookeeper session opened").count();

    assert!(
        nexts_before_first_answer >= CONCURRENCY,
        "only {nexts_before_first_answer} `next` calls were outstanding"
    );
    let completed: u64 = reports
        .iter()
        .map(|r| r["completed"].as_u64().unwrap())
        .sum();
    let claimed: u64 = reports.iter().map(|r| r["claimed"].as_u64().unwrap()).sum();
    assert_eq!(
        (claimed, completed),
        (TASKS as u64, TASKS as u64),
        "{reports:#?}"
    );
    assert!(t.children("tasks").await.is_empty());
    let consumer = &reports[0]["consumer_id"];
    assert!(
        reports.iter().all(|r| &r["consumer_id"] == consumer),
        "more than one App: {reports:#?}"
    );
    assert_eq!(sessions, 1, "{logs}");
}

/// The `next` calls seen before the first answer was posted, and every invocation's answer
/// (its summary). A runtime that never has eight `next` calls outstanding gets no event, and
/// the guard below names how many it had.
async fn answers(api: &mut RuntimeApi) -> (usize, Vec<Value>) {
    let (mut nexts, mut first_answer_after, mut reports) = (0, None, Vec::new());
    let collected = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(request) = api.requests.recv().await {
            if request.is_next() {
                nexts += 1;
            } else if request.is_post() {
                assert!(request.path.ends_with("/response"), "{request:?}");
                first_answer_after.get_or_insert(nexts);
                reports.push(serde_json::from_slice(&request.body).unwrap());
                if reports.len() == CONCURRENCY {
                    return;
                }
            }
        }
    })
    .await;
    // A hang guard, not a speed claim.
    assert!(
        collected.is_ok(),
        "{} of {CONCURRENCY} invocations answered; {nexts} `next` calls seen",
        reports.len()
    );
    (first_answer_after.unwrap(), reports)
}

/// Without `AWS_LAMBDA_MAX_CONCURRENCY` the binary takes one invocation at a time, as on
/// classic Lambda: it asks for the next event only after answering the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_variable_invocations_run_one_at_a_time() {
    let t = TestQueue::new().await;
    t.publish(2).await;
    let scheduled = json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}});
    let events = vec![("one-1", scheduled.clone()), ("one-2", scheduled)];
    let mut api = RuntimeApi::start(events).await.unwrap();
    let mut function = function_command("process_events", &api, &t.config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let order = tokio::time::timeout(Duration::from_secs(60), async {
        let mut order = Vec::new();
        while let Some(request) = api.requests.recv().await {
            order.push(if request.is_next() { "next" } else { "answer" });
            if order.len() == 5 {
                return order;
            }
        }
        panic!("the Runtime API closed");
    })
    .await
    .expect("two invocations answered (a hang guard)");
    let _ = function.kill().await;

    assert_eq!(order, ["next", "answer", "next", "answer", "next"]);
}
