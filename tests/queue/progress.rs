//! Progress: a handler's report writes nothing of its own; the holder's next lease extension
//! carries the latest, which `status` and `list` show (each task its own, with consumers
//! racing), and which survives an extension whose reply was lost. A bad report is refused and
//! the one before it stays.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use event_bridge::handler::FnHandler;
use event_bridge::inspect::{self, Status, TaskInfo};
use event_bridge::progress::ProgressReport;
use event_bridge::queue::{Lease, Settled, TaskOutcome};
use event_bridge::{Config, Error, Task, process};
use tokio::sync::Notify;

use crate::cli::eb;
use harness::{Proxy, TestQueue, options};

fn stdout(output: std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn claimed(outcome: TaskOutcome) -> Lease {
    match outcome {
        TaskOutcome::Claimed(lease) => *lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The held task's progress as `status` shows it.
async fn shown(t: &TestQueue, name: &str) -> Option<ProgressReport> {
    let now = t.now().await;
    match inspect::status(&t.queue, &now, name).await.unwrap() {
        Status::Leased { task } => task.lease.and_then(|l| l.progress),
        other => panic!("{name} is not held: {other:?}"),
    }
}

/// The lease's raw data and version.
async fn lease_znode(t: &TestQueue, name: &str) -> (serde_json::Value, i32) {
    let path = format!("{}/leases/{name}", t.config.root);
    let (data, stat) = t.raw.get_data(&path).await.unwrap();
    (serde_json::from_slice(&data).unwrap(), stat.version)
}

#[tokio::test]
async fn the_next_extension_carries_the_latest_report_and_status_and_list_show_it() {
    let t = TestQueue::new().await;
    let names = t.publish(1).await;
    let name = &names[0];
    let now = t.now().await;
    let mut lease = claimed(t.queue.claim(name, &now).await.unwrap());
    let (_, claimed_version) = lease_znode(&t, name).await;

    lease.task.progress.report(10, "started").unwrap();
    lease
        .task
        .progress
        .report(40, "copied 4 of 10 files")
        .unwrap();
    let (_, version) = lease_znode(&t, name).await;
    assert_eq!(version, claimed_version, "a report writes nothing");
    assert_eq!(shown(&t, name).await, None, "not before an extension");

    assert_eq!(t.queue.extend(&mut lease).await.unwrap(), Settled::Done);
    let latest = ProgressReport::new(40, "copied 4 of 10 files").unwrap();
    assert_eq!(shown(&t, name).await, Some(latest.clone()));
    let (held, _) = inspect::leased(&t.queue, &t.now().await, 10).await.unwrap();
    let listed: Vec<&TaskInfo> = held.iter().filter(|i| &i.name == name).collect();
    assert_eq!(listed[0].lease.as_ref().unwrap().progress, Some(latest));
    // The command: `status` (a line, and JSON) and `list`.
    let line = stdout(eb(&t, &["status", name], ""));
    assert!(line.contains(", at 40% copied 4 of 10 files"), "{line}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(eb(&t, &["status", name, "--json"], ""))).unwrap();
    assert_eq!(json["task"]["lease"]["progress"]["percent"], 40, "{json}");
    let table = stdout(eb(&t, &["list"], ""));
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(name.as_str()) && l.ends_with("40% copied 4 of 10 files")),
        "{table}"
    );

    // One write per extension, as before; a reader of the 000 design finds its two fields.
    let (data, version) = lease_znode(&t, name).await;
    assert_eq!(version, claimed_version + 1);
    assert!(data["consumerId"].is_string() && data["timestamp"].is_i64());
    assert_eq!(
        data["progress"],
        serde_json::json!({"percent": 40, "message": "copied 4 of 10 files"})
    );
    assert_eq!(t.queue.complete(lease).await.unwrap(), Settled::Done);
}

#[tokio::test]
async fn a_bad_report_is_refused_and_the_one_before_it_stays() {
    let t = TestQueue::new().await;
    let names = t.publish(1).await;
    let now = t.now().await;
    let mut lease = claimed(t.queue.claim(&names[0], &now).await.unwrap());
    lease.task.progress.report(60, "halfway and more").unwrap();
    let long = "x".repeat(201);
    for (percent, message, says) in [
        (101, "", "percent is 101: report 0 to 100"),
        (
            70,
            long.as_str(),
            "message is 201 bytes: shorten it to 200 bytes at most",
        ),
        (70, "a\nb", "control character"),
    ] {
        match lease.task.progress.report(percent, message) {
            Err(e @ Error::BadProgress(_)) => assert!(e.to_string().contains(says), "{e}"),
            other => panic!("{percent} {message:?} accepted: {other:?}"),
        }
    }
    assert_eq!(t.queue.extend(&mut lease).await.unwrap(), Settled::Done);
    let shown = shown(&t, &names[0]).await.unwrap();
    assert_eq!(
        (shown.percent, shown.message.as_str()),
        (60, "halfway and more")
    );
}

/// The extension lands but its reply is lost with the link; the holder reports on, and the
/// extension it sends again (after reading the lease back as its own) writes the latest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_sent_again_after_a_lost_reply_carries_the_latest_report() {
    let t = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let chroot = t.config.zookeeper.split_once('/').map(|(_, c)| c).unwrap();
    let mut config: Config = t.config.clone();
    config.zookeeper = format!("{}/{chroot}", proxy.address);
    config.session_timeout = Duration::from_secs(30);
    let holder = harness::consumer(&config, "holder").await;
    let names = t.publish(1).await;
    let now = t.now().await;
    let mut lease = claimed(holder.claim(&names[0], &now).await.unwrap());
    lease.task.progress.report(30, "first").unwrap();
    proxy.lose_next_reply();
    assert!(
        holder.extend(&mut lease).await.is_err(),
        "its reply was lost"
    );
    assert_eq!(proxy.replies_lost(), 1);
    assert_eq!(
        shown(&t, &names[0]).await.unwrap().message,
        "first",
        "it landed"
    );
    lease.task.progress.report(55, "second").unwrap();
    let lease = tokio::sync::Mutex::new(lease);
    let extended = harness::eventually("the link to come back", || async {
        holder.extend(&mut *lease.lock().await).await.ok()
    })
    .await;
    assert_eq!(extended, Settled::Done, "still ours");
    let shown = shown(&t, &names[0]).await.unwrap();
    assert_eq!((shown.percent, shown.message.as_str()), (55, "second"));
}

/// Two consumers share eight tasks, all running at once, each handler reporting its own task's name; once
/// every lease was extended, each held task shows its own handler's report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_consumers_each_show_their_own_tasks_progress() {
    // The production minimum: the first extension goes out 3.3 s after each claim.
    let t = TestQueue::with(|c| c.lease_timeout = Duration::from_secs(10)).await;
    let names = t.publish(8).await;
    let go = Arc::new(Notify::new());
    let handler = {
        let go = go.clone();
        FnHandler(move |task: Task| {
            let go = go.clone();
            async move {
                let percent = (event_bridge::layout::sequence(&task.name).unwrap() % 100) as u8;
                task.progress.report(percent, &task.name).unwrap();
                go.notified().await;
                Ok(())
            }
        })
    };
    let handler = Arc::new(handler);
    let mut runs = Vec::new();
    for i in 0..2 {
        let queue = t.consumer(&format!("racer-{i}")).await;
        let handler = handler.clone();
        runs.push(tokio::spawn(async move {
            process::run(&queue, handler.as_ref(), &options(8, 8))
                .await
                .unwrap()
        }));
    }
    // Waits for a condition, not a time: every held task showing a report.
    let seen: HashMap<String, ProgressReport> =
        harness::eventually("every lease extended", || async {
            let (held, _) = inspect::leased(&t.queue, &t.now().await, 100)
                .await
                .unwrap();
            let reports: HashMap<String, ProgressReport> = held
                .into_iter()
                .filter_map(|i| Some((i.name.clone(), i.lease?.progress?)))
                .collect();
            (reports.len() == names.len()).then_some(reports)
        })
        .await;
    for name in &names {
        let report = &seen[name];
        assert_eq!(&report.message, name, "another task's report");
        let percent = (event_bridge::layout::sequence(name).unwrap() % 100) as u8;
        assert_eq!(report.percent, percent);
    }
    // Handlers still to start would miss one notice: told again until every task is done.
    harness::eventually("the handlers to finish", || async {
        go.notify_waiters();
        t.children("tasks").await.is_empty()
    })
    .await;
    let mut completed = 0;
    for run in runs {
        completed += run.await.unwrap().completed;
    }
    assert_eq!(completed as usize, names.len());
}
