//! Batches on the real ZooKeeper: members counted as they are published, completed and buried
//! (by concurrent consumers, by a reaper after a consumer died holding the last one); one
//! callback, published with the last settlement; bad input refused with nothing written.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::batch::{self, Open};
use event_bridge::error::Error;
use event_bridge::handler::FnHandler;
use event_bridge::queue::{Settled, TaskOutcome};
use event_bridge::{Envelope, HandlerError, Task, process, reap};
use serde_json::{Value, json};

use harness::{Proxy, Recorder, TestQueue};

fn open_args() -> Open {
    Open {
        on_complete: "import.done".into(),
        on_success: Some("import.ok".into()),
        payload: json!({"import": 7}),
    }
}

fn member(batch: &str, n: u64) -> Envelope {
    let mut e = Envelope::new("import.row", json!({ "n": n }));
    e.batch = Some(batch.into());
    e
}

/// The tasks of `event_type` the queue holds, as JSON.
async fn tasks_of(t: &TestQueue, event_type: &str) -> Vec<Value> {
    let mut found = Vec::new();
    for name in t.children("tasks").await {
        let body = t.read_json(&format!("tasks/{name}")).await;
        if body["type"] == event_type {
            found.push(body);
        }
    }
    found
}

#[tokio::test]
async fn the_callback_follows_the_last_member_once_with_its_counts() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "b", open_args()).await.unwrap();
    let members: Vec<Envelope> = (0..6).map(|n| member("b", n)).collect();
    t.queue.publish_all(&members).await.unwrap();
    t.publish(1).await; // not a member
    let sealed = batch::seal(&t.queue, "b").await.unwrap();
    assert_eq!(
        (sealed.total, sealed.pending, sealed.callback),
        (6, 6, None)
    );

    // Two consumers race through the members; the row with n = 2 fails for good.
    let seen = Arc::new(Mutex::new(Vec::<Task>::new()));
    let handler = {
        let seen = Arc::clone(&seen);
        FnHandler(move |task: Task| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(task.clone());
                match task.envelope.payload["n"].as_u64() {
                    Some(2) if task.envelope.event_type == "import.row" => {
                        Err(HandlerError::Permanent("bad row".into()))
                    }
                    _ => Ok(()),
                }
            }
        })
    };
    let a = t.consumer("a").await;
    let b = t.consumer("b").await;
    let options = harness::options(4, 2);
    let (ra, rb) = tokio::join!(
        process::run(&a, &handler, &options),
        process::run(&b, &handler, &options)
    );
    ra.unwrap();
    rb.unwrap();
    // Whatever is left, the callbacks included.
    harness::run(&t.queue, &handler, 50).await;
    harness::run(&t.queue, &handler, 50).await;

    let status = batch::status(&t.queue, "b").await.unwrap();
    assert_eq!(
        (status.total, status.pending, status.completed, status.dead),
        (6, 0, 5, 1),
        "{status:?}"
    );
    assert_eq!(status.dead_members.len(), 1);
    let seen = seen.lock().unwrap();
    let callbacks: Vec<&Task> = (seen.iter())
        .filter(|t| {
            t.envelope.event_type.starts_with("import.") && t.envelope.event_type != "import.row"
        })
        .collect();
    assert_eq!(
        callbacks.len(),
        1,
        "one callback, on_complete only (a member is dead)"
    );
    let callback = callbacks[0];
    assert_eq!(callback.envelope.event_type, "import.done");
    assert_eq!(status.callback.as_deref(), Some(callback.name.as_str()));
    let p = &callback.envelope.payload;
    assert_eq!(
        (&p["total"], &p["completed"], &p["dead"], &p["payload"]),
        (&json!(6), &json!(5), &json!(1), &json!({"import": 7}))
    );
    assert_eq!(p["dead_members"], json!(status.dead_members));
    // After every member: the callback's number is above theirs.
    let last_member = (seen.iter())
        .filter(|t| t.envelope.event_type == "import.row")
        .map(|t| t.name.clone())
        .max()
        .unwrap();
    assert!(
        callback.name > last_member,
        "{} after {last_member}",
        callback.name
    );
}

#[tokio::test]
async fn a_batch_all_completed_also_publishes_its_success_callback() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "ok", open_args()).await.unwrap();
    t.queue
        .publish_all(&[member("ok", 1), member("ok", 2)])
        .await
        .unwrap();
    let recorder = Recorder::default();
    harness::run(&t.queue, &recorder, 10).await;
    assert_eq!(
        tasks_of(&t, "import.done").await.len(),
        0,
        "not sealed: no callback"
    );
    batch::seal(&t.queue, "ok").await.unwrap();
    // Sealed with nothing pending: the seal's own write published them.
    let done = tasks_of(&t, "import.done").await;
    let ok = tasks_of(&t, "import.ok").await;
    assert_eq!((done.len(), ok.len()), (1, 1));
    assert_eq!(ok[0]["payload"]["outcome"], "success");
    let status = batch::status(&t.queue, "ok").await.unwrap();
    assert_eq!((status.completed, status.sealed), (2, true));
    assert!(status.callback.is_some() && status.success_callback_id.is_some());
}

#[tokio::test]
async fn a_consumer_killed_holding_the_last_member_delays_the_callback_and_does_not_lose_it() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "k", open_args()).await.unwrap();
    let names = t.queue.publish_many(&[member("k", 1)]).await.unwrap();
    batch::seal(&t.queue, "k").await.unwrap();
    let name = &names[0];

    // A consumer claims the only member and dies holding it.
    let victim = t.consumer("victim").await;
    let claimed = victim.claim(name, &t.now().await).await.unwrap();
    assert!(matches!(claimed, TaskOutcome::Claimed(_)), "{claimed:?}");
    drop(victim);
    assert!(
        tasks_of(&t, "import.done").await.is_empty(),
        "held: no callback"
    );

    // The reaper frees it past its lease (a clock the test drives); another run completes it.
    let later = t.past_lease_of(name).await;
    assert_eq!(reap::reap_at(&t.queue, &later).await.unwrap().reaped, 1);
    let recorder = Recorder::default();
    harness::run(&t.queue, &recorder, 10).await;
    harness::run(&t.queue, &recorder, 10).await;
    let types: Vec<String> = (recorder.seen.lock().unwrap().iter())
        .map(|t| t.envelope.event_type.clone())
        .collect();
    assert_eq!(types, ["import.row", "import.done", "import.ok"]);
    let status = batch::status(&t.queue, "k").await.unwrap();
    assert_eq!((status.total, status.completed, status.pending), (1, 1, 0));
}

#[tokio::test]
async fn a_redriven_dead_member_is_pending_again_in_its_batch() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "r", open_args()).await.unwrap();
    let names = t
        .queue
        .publish_many(&[member("r", 1), member("r", 2)])
        .await
        .unwrap();
    let fail_once = FnHandler(|task: Task| async move {
        match task.envelope.payload["n"].as_u64() {
            Some(1) => Err(HandlerError::Permanent("no".into())),
            _ => Ok(()),
        }
    });
    harness::run(&t.queue, &fail_once, 10).await;
    let status = batch::status(&t.queue, "r").await.unwrap();
    assert_eq!((status.dead, status.pending), (1, 0));

    let report = event_bridge::dead::redrive(&t.queue, &names[..1])
        .await
        .unwrap();
    assert_eq!(report.redriven.len(), 1, "{report:?}");
    let status = batch::status(&t.queue, "r").await.unwrap();
    assert_eq!(
        (status.dead, status.pending, status.dead_members.len()),
        (0, 1, 0)
    );
    batch::seal(&t.queue, "r").await.unwrap();
    assert!(
        tasks_of(&t, "import.done").await.is_empty(),
        "the redriven member is pending"
    );
    harness::run(&t.queue, &Recorder::default(), 10).await;
    let status = batch::status(&t.queue, "r").await.unwrap();
    assert_eq!((status.completed, status.dead, status.pending), (2, 0, 0));
    assert!(status.callback.is_some());
}

#[tokio::test]
async fn bad_batch_input_is_refused_and_writes_nothing() {
    let t = TestQueue::new().await;
    let unknown = t.queue.publish_all(&[member("nope", 1)]).await.unwrap_err();
    assert!(
        matches!(&unknown, Error::Batch { name, problem } if name == "nope" && problem.contains("no such batch")),
        "{unknown}"
    );
    batch::open(&t.queue, "b", open_args()).await.unwrap();
    let twice = batch::open(&t.queue, "b", open_args()).await.unwrap_err();
    assert!(twice.to_string().contains("exists"), "{twice}");
    // One good member beside one of an unknown batch: neither is published.
    let mixed = t
        .queue
        .publish_all(&[member("b", 1), member("nope", 2)])
        .await;
    assert!(mixed.is_err());
    assert!(t.children("tasks").await.is_empty());
    batch::seal(&t.queue, "b").await.unwrap();
    let again = batch::seal(&t.queue, "b").await.unwrap_err();
    assert!(again.to_string().contains("sealed already"), "{again}");
    let late = t.queue.publish_all(&[member("b", 3)]).await.unwrap_err();
    assert!(late.to_string().contains("sealed"), "{late}");
    let long = batch::open(&t.queue, &"x".repeat(600), open_args())
        .await
        .unwrap_err();
    assert!(
        long.to_string().contains("\"batch\" is 600 bytes"),
        "{long}"
    );
    let mut keyed = member("b", 4);
    keyed.idempotency_key = Some("k".into());
    assert!(t.queue.publish_all(&[keyed]).await.is_err());
    // Only the seal's callbacks are there (on_complete, and on_success: nobody died).
    let left: Vec<String> = t.children("tasks").await;
    assert_eq!(left.len(), 2, "{left:?}");
    let status = batch::status(&t.queue, "b").await.unwrap();
    assert_eq!((status.total, status.sealed), (0, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_opens_joins_seals_and_shows_a_batch() {
    use crate::cli::eb;
    let t = TestQueue::new().await;
    let opened = eb(
        &t,
        &[
            "batch",
            "open",
            "nightly",
            "--on-complete",
            "nightly.done",
            "--payload",
            "{\"day\":1}",
        ],
        "",
    );
    assert!(
        opened.status.success(),
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
    let published = eb(
        &t,
        &["publish", "--type", "row", "--batch", "nightly", "-f", "-"],
        "{\"n\":1}\n{\"n\":2}\n",
    );
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let status = eb(&t, &["batch", "status", "nightly", "--json"], "");
    let status: Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(
        (&status["total"], &status["pending"], &status["sealed"]),
        (&json!(2), &json!(2), &json!(false))
    );
    let text = eb(&t, &["batch", "status", "nightly"], "");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("2 members, 2 pending") && text.contains("open"),
        "{text}"
    );

    let stray = eb(
        &t,
        &[
            "publish",
            "--type",
            "row",
            "--batch",
            "nope",
            "--payload",
            "{}",
        ],
        "",
    );
    assert!(!stray.status.success());
    assert!(String::from_utf8_lossy(&stray.stderr).contains("batch nope: no such batch"));
    assert_eq!(
        t.children("tasks").await.len(),
        2,
        "the stray publish wrote nothing"
    );
    let missing = eb(&t, &["batch", "status", "nope"], "");
    assert_eq!(missing.status.code(), Some(3));

    let sealed = eb(&t, &["batch", "seal", "nightly"], "");
    assert!(sealed.status.success());
    let again = eb(&t, &["batch", "seal", "nightly"], "");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("sealed already"));
}

#[tokio::test]
async fn producers_publishing_into_one_batch_at_once_are_all_counted() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "many", open_args()).await.unwrap();
    let producers = ["p1", "p2", "p3"];
    let mut queues = Vec::new();
    for p in producers {
        queues.push(t.consumer(p).await);
    }
    let publish = queues.iter().map(|q| async move {
        let members: Vec<Envelope> = (0..700).map(|n| member("many", n)).collect();
        q.publish_all(&members).await.map(|p| p.len())
    });
    let published: Vec<usize> = futures::future::try_join_all(publish).await.unwrap();
    assert_eq!(published, [700, 700, 700]);
    let status = batch::status(&t.queue, "many").await.unwrap();
    assert_eq!((status.total, status.pending), (2100, 2100));
    assert_eq!(t.children("tasks").await.len(), 2100);
}

#[tokio::test]
async fn a_batch_payload_over_its_limit_is_refused() {
    let t = TestQueue::new().await;
    let mut args = open_args();
    args.payload = json!({ "blob": "x".repeat(5_000) });
    let refused = batch::open(&t.queue, "big", args).await.unwrap_err();
    assert!(refused.to_string().contains("--payload is"), "{refused}");
    assert!(matches!(
        batch::status(&t.queue, "big").await,
        Err(Error::Batch { .. })
    ));
}

/// A batch's znode overwritten with what is not a batch (by hand, by another tool): its members
/// still complete, or go to the dead letters, and the tasks that settle with them in the same
/// multi-op are not held back. (Before the fix, the completion's read of the batch failed,
/// and with it the completion of every task it carried: they ran again and again.)
#[tokio::test]
async fn members_of_an_unreadable_batch_still_settle_with_the_tasks_beside_them() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "b", open_args()).await.unwrap();
    t.queue
        .publish_all(&[member("b", 1), member("b", 2), member("b", 3)])
        .await
        .unwrap();
    t.publish(3).await; // not members
    let path = format!("{}/batches/b", t.config.root);
    t.raw.set_data(&path, b"not a batch", None).await.unwrap();
    let handler = FnHandler(|task: Task| async move {
        let row = task.envelope.event_type == "import.row";
        match task.envelope.payload["n"].as_u64() {
            Some(2) if row => Err(HandlerError::Permanent("bad row".into())),
            _ => Ok(()),
        }
    });
    let report = process::run(&t.queue, &handler, &harness::options(10, 8))
        .await
        .expect("a run over an unreadable batch");
    assert_eq!(
        (report.completed, report.dead_lettered),
        (5, 1),
        "{report:?}"
    );
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("leases").await.is_empty());
    // The batch is left as it was found, for its owner to look at.
    let (data, _) = t.raw.get_data(&path).await.unwrap();
    assert_eq!(data, b"not a batch");
}

/// Two consumers complete the last two members of a sealed batch. One read the batch, and its
/// multi-op reaches the server only after the other's completion changed it: that multi-op
/// fails at the batch's version, the batch is read again, and the member is counted. Neither
/// count is lost, and the callback comes once.
#[tokio::test]
async fn a_member_whose_batch_moved_under_its_completion_reads_it_again_and_counts() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "b", open_args()).await.unwrap();
    let names = (t.queue.publish_many(&[member("b", 1), member("b", 2)]))
        .await
        .unwrap();
    batch::seal(&t.queue, "b").await.unwrap();
    let proxy = Proxy::start().await;
    let late = event_bridge::Session::open(proxy.config_for(&t), "late", None)
        .await
        .unwrap()
        .queue();
    let now = t.now().await;
    let TaskOutcome::Claimed(first) = late.claim(&names[0], &now).await.unwrap() else {
        panic!("claimed");
    };
    let TaskOutcome::Claimed(second) = t.queue.claim(&names[1], &now).await.unwrap() else {
        panic!("claimed");
    };
    proxy.hold_next_multi();
    let completing = tokio::spawn(async move { late.complete(*first).await });
    // Its batch read before the other completion, its multi-op held on the way.
    proxy.holding().await;
    assert_eq!(t.queue.complete(*second).await.unwrap(), Settled::Done);
    proxy.release();
    assert_eq!(completing.await.unwrap().unwrap(), Settled::Done);
    let status = batch::status(&t.queue, "b").await.unwrap();
    assert_eq!((status.completed, status.pending), (2, 0), "{status:?}");
    let callbacks = tasks_of(&t, "import.done").await;
    assert_eq!(callbacks.len(), 1, "one callback: {callbacks:?}");
}

/// A member that is also a parent: its children are seen to once its ending let go of its
/// turn at the batch, so the process's other members of that batch end meanwhile.
#[tokio::test]
async fn a_members_children_are_seen_to_after_its_turn_at_the_batch_is_let_go() {
    let t = TestQueue::new().await;
    batch::open(&t.queue, "b", open_args()).await.unwrap();
    let mut parent = member("b", 1);
    parent.id = "p".into();
    let names = (t.queue.publish_many(&[parent, member("b", 2)]))
        .await
        .unwrap();
    let mut child = Envelope::new("child", json!({}));
    child.after = vec!["p".into()];
    t.queue.publish_all(&[child]).await.unwrap();
    batch::seal(&t.queue, "b").await.unwrap();
    let proxy = Proxy::start().await;
    // A long session: its connection outlives the hold below by far.
    let mut config = proxy.config_for(&t);
    config.session_timeout = Duration::from_secs(40);
    let late = event_bridge::Session::open(config, "late", None)
        .await
        .unwrap()
        .queue();
    // A second session of the same process: the same features, so the same turns.
    let beside = event_bridge::Session::open(t.config.clone(), "beside", None)
        .await
        .unwrap()
        .queue()
        .with_features(late.features().clone());
    let now = t.now().await;
    let TaskOutcome::Claimed(first) = late.claim(&names[0], &now).await.unwrap() else {
        panic!("claimed");
    };
    let TaskOutcome::Claimed(second) = beside.claim(&names[1], &now).await.unwrap() else {
        panic!("claimed");
    };
    // The parent's ending landed and its child is released; the marker's delete, the last
    // step of seeing to its children, is held.
    proxy.hold_delete_of("dependents/p");
    let completing = tokio::spawn(async move { late.complete(*first).await });
    proxy.holding().await;
    let other = tokio::time::timeout(Duration::from_secs(60), beside.complete(*second)).await;
    let other = other.expect("the other member's ending waits for no parent's children");
    assert_eq!(other.unwrap(), Settled::Done);
    assert!(
        !completing.is_finished(),
        "the other member ended while the parent's children were still being seen to"
    );
    proxy.release();
    assert_eq!(completing.await.unwrap().unwrap(), Settled::Done);
    let status = batch::status(&t.queue, "b").await.unwrap();
    assert_eq!((status.completed, status.pending), (2, 0), "{status:?}");
    assert_eq!(
        tasks_of(&t, "child").await.len(),
        1,
        "the child is in its lane"
    );
}
