//! Results (`KEEP_DONE`): what a handler answers is kept in its task's completion record, with
//! consumers racing and replies lost; a result over the limit is refused when built and, when
//! it reaches a completion anyway, kept as its size without failing the completion; a batch of
//! large results completes in requests ZooKeeper takes.

use std::sync::Arc;
use std::time::Duration;

use event_bridge::handler::{Delivered, Handler};
use event_bridge::inspect::{self, Status};
use event_bridge::queue::DoneRecord;
use event_bridge::task_result::MAX_RESULT_BYTES;
use event_bridge::{Error, HandlerError, RunOptions, Session, Task, TaskResult, process};
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::{Proxy, TestQueue, options};

/// Succeeds with the result `answer` makes of each task.
struct Answering<F>(F);

impl<F: Fn(&Task) -> TaskResult + Send + Sync> Handler for Answering<F> {
    async fn handle(&self, _task: &Task) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_delivered(&self, task: &Task) -> Result<Delivered, HandlerError> {
        Ok(Delivered::with_result((self.0)(task)))
    }
}

/// What each task's handler answers in these tests: its own name and claim.
fn own(task: &Task) -> TaskResult {
    TaskResult::json(json!({"task": task.name, "token": task.fencing_token})).unwrap()
}

async fn keeping() -> TestQueue {
    TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await
}

async fn record(t: &TestQueue, name: &str) -> Box<DoneRecord> {
    let now = t.now().await;
    match inspect::status(&t.queue, &now, name).await.unwrap() {
        Status::Completed { record } => record,
        other => panic!("{name} is not completed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_result_is_kept_with_its_own_task_when_consumers_race() {
    let t = keeping().await;
    let names = t.publish(90).await;
    let mut runs = Vec::new();
    for i in 0..3 {
        let queue = t.consumer(&format!("racer-{i}")).await;
        runs.push(tokio::spawn(async move {
            process::run(&queue, &Answering(own), &options(90, 8))
                .await
                .unwrap()
        }));
    }
    let mut completed = 0;
    for run in runs {
        completed += run.await.unwrap().completed;
    }
    assert_eq!(completed, 90);
    for name in &names {
        let record = record(&t, name).await;
        let result = record.result.as_ref().expect("a result");
        assert_eq!(result["task"], json!(name), "another task's result");
        assert_eq!(
            result["token"],
            json!(record.fencing_token),
            "another claim's"
        );
        assert!(record.result_omitted.is_none());
    }
    // As `status --json` and `?status=` print it.
    let now = t.now().await;
    let status = inspect::status(&t.queue, &now, &names[0]).await.unwrap();
    let printed = serde_json::to_value(&status).unwrap();
    assert_eq!(printed["state"], "completed");
    assert_eq!(printed["record"]["result"]["task"], json!(names[0]));
    let output = crate::cli::eb(&t, &["status", &names[0], "--json"], "");
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed["record"]["result"]["task"], json!(names[0]));
    let output = crate::cli::eb(&t, &["status", &names[0]], "");
    let line = String::from_utf8(output.stdout).unwrap();
    let token = printed["record"]["fencing_token"].clone();
    let shown = format!(r#", result {{"task":"{}","token":{token}}}"#, names[0]);
    assert!(line.contains(&shown), "{line}");
}

#[tokio::test]
async fn a_result_over_the_limit_is_refused_when_built_and_kept_as_its_size() {
    let t = keeping().await;
    let big = Value::String("x".repeat(MAX_RESULT_BYTES));
    match TaskResult::json(big.clone()) {
        Err(Error::ResultTooLarge { bytes, limit }) => {
            assert_eq!((bytes, limit), (MAX_RESULT_BYTES + 2, MAX_RESULT_BYTES))
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Built by hand past the check: the task completes, its record keeps the size only.
    let names = t.publish(2).await;
    let over_name = names[0].clone();
    let handler = Answering(move |task: &Task| match task.name == over_name {
        true => TaskResult::Json(big.clone()),
        false => own(task),
    });
    let report = process::run(&t.queue, &handler, &options(10, 2))
        .await
        .unwrap();
    assert_eq!(report.completed, 2, "{report:?}");
    assert!(t.children("tasks").await.is_empty());
    let over = record(&t, &names[0]).await;
    assert_eq!(over.result, None);
    let omitted = over.result_omitted.as_ref().expect("its size");
    assert_eq!(omitted.bytes, Some(MAX_RESULT_BYTES as u64 + 2));
    assert_eq!(omitted.reason, format!("over {MAX_RESULT_BYTES} bytes"));
    let output = crate::cli::eb(&t, &["status", &names[0]], "");
    let line = String::from_utf8(output.stdout).unwrap();
    assert!(
        line.contains(", result not kept (over 65536 bytes: 65538 bytes, application/json)"),
        "{line}"
    );
    let fine = record(&t, &names[1]).await;
    assert_eq!(fine.result.as_ref().unwrap()["task"], json!(names[1]));
}

/// 32 tasks finishing together complete in one batch; with a result of 60 KiB each, their
/// records alone are about 2 MB, twice what one ZooKeeper request may carry.
#[tokio::test]
async fn a_batch_of_large_results_completes_in_requests_zookeeper_takes() {
    let t = keeping().await;
    let names = t.publish(32).await;
    let bulk = |task: &Task| {
        let filler = "r".repeat(60 * 1024);
        TaskResult::json(json!({"task": task.name, "filler": filler})).unwrap()
    };
    let report = process::run(&t.queue, &Answering(bulk), &options(32, 32))
        .await
        .unwrap();
    assert_eq!(
        (report.completed, report.leases_lost),
        (32, 0),
        "{report:?}"
    );
    assert!(t.children("tasks").await.is_empty());
    for name in &names {
        let record = record(&t, name).await;
        assert_eq!(record.result.as_ref().unwrap()["task"], json!(name));
    }
}

/// The completion lands but its reply is lost with the link: the record, result included, is
/// there once, and the run says completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_reply_was_lost_keeps_its_result() {
    let t = keeping().await;
    let proxy = Arc::new(Proxy::start().await);
    let chroot = t.config.zookeeper.split_once('/').map(|(_, c)| c).unwrap();
    let mut config = t.config.clone();
    config.zookeeper = format!("{}/{chroot}", proxy.address);
    config.session_timeout = Duration::from_secs(30);
    let session = Session::open(config, "test", None).await.unwrap();
    let names = t.publish(1).await;
    let arm = proxy.clone();
    let handler = Answering(move |task: &Task| {
        arm.lose_next_reply();
        own(task)
    });
    let options = RunOptions {
        max_tasks: 1,
        concurrency: 1,
        deadline: Instant::now() + Duration::from_secs(30),
        margin: Duration::from_secs(1),
    };
    let report = process::run_on(&session, &handler, &options).await.unwrap();
    assert_eq!(proxy.replies_lost(), 1, "a reply was lost");
    assert_eq!((report.completed, report.leases_lost), (1, 0), "{report:?}");
    let record = record(&t, &names[0]).await;
    assert_eq!(record.result.as_ref().unwrap()["task"], json!(names[0]));
}
