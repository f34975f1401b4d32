//! Finding tasks without listing `tasks/`: across gaps, past a jump in numbering, in an empty
//! queue, behind tasks that wait, and after a retry that moved a task to the tail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::{Envelope, HandlerError, Task};
use serde_json::json;
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, run};

fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// Tasks completed out of order by others leave gaps, one of them wider than a probe: a lone
/// consumer still takes every remaining task, oldest first.
#[tokio::test]
async fn tasks_are_claimed_across_gaps_oldest_first() {
    let t = TestQueue::new().await;
    let names = t.publish(300).await;
    // Others completed every third task, and a run of 150 in the middle.
    let mut remaining = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i % 3 == 0 || (100..250).contains(&i) {
            let path = format!("{}/tasks/{name}", t.config.root);
            t.raw.delete(&path, None).await.unwrap();
        } else {
            remaining.push(name.clone());
        }
    }
    let recorder = Recorder::default();
    let mut runs = 0;
    while recorder.count() < remaining.len() && runs < 1_000 {
        let report = run(&t.queue, &recorder, 1).await;
        assert_eq!(report.claimed, 1, "run {runs}: {report:?}");
        runs += 1;
    }
    assert_eq!(
        recorder.names(),
        remaining,
        "every remaining task, oldest first"
    );
    assert_eq!(run(&t.queue, &recorder, 1).await.claimed, 0);
}

/// A task whose number lies past what `tasks/`'s stat says (a jump in numbering, here a task
/// created by name), and a child that is not a task at all: the walk falls back to one listing,
/// takes the task, and remembers the stranger so the next walk need not list again.
#[tokio::test]
async fn a_task_past_a_jump_in_numbering_is_found_and_junk_is_remembered() {
    let t = TestQueue::new().await;
    let first = t.publish(3).await;
    let far = "task-0000050000";
    let body = Envelope::new("far", json!({})).to_bytes().unwrap();
    let tasks = format!("{}/tasks", t.config.root);
    t.raw
        .create(&format!("{tasks}/{far}"), &body, &open())
        .await
        .unwrap();
    t.raw
        .create(&format!("{tasks}/not-a-task"), b"{}", &open())
        .await
        .unwrap();
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!(report.completed, 4, "{report:?}");
    let mut want = first.clone();
    want.push(far.to_string());
    assert_eq!(recorder.names(), want);
    let head = t.read_json("head").await;
    assert_eq!(head["junk"], 1, "{head}");
    assert_eq!(t.children("tasks").await, ["not-a-task"]);
    // New tasks after the jump are found too.
    let more = t.publish(2).await;
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 2);
    assert_eq!(recorder.names(), more);
}

#[tokio::test]
async fn an_empty_queue_claims_nothing_and_says_so() {
    let t = TestQueue::new().await;
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!((report.claimed, report.remaining_depth), (0, Some(0)));
    // And one that was emptied.
    t.publish(5).await;
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 5);
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!((report.claimed, report.remaining_depth), (0, Some(0)));
}

/// The head of the queue is 100 tasks a producer delayed: the first run moves them out of the
/// way (once) and claims the task behind them; later runs never read them again.
#[tokio::test]
async fn tasks_waiting_at_the_head_are_moved_aside_once() {
    let t = TestQueue::new().await;
    let later = t.now().await.now_ms() + 3_600_000;
    let delayed: Vec<Envelope> = (0..100)
        .map(|i| {
            let mut e = Envelope::new("later", json!({ "i": i }));
            e.retry_at = Some(later);
            e
        })
        .collect();
    t.queue.publish_many(&delayed).await.unwrap();
    let ready = t.publish(1).await.remove(0);
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 1).await;
    assert_eq!((report.claimed, report.in_backoff), (1, 100), "{report:?}");
    assert_eq!(recorder.names(), [ready]);
    assert!(
        t.children("tasks").await.is_empty(),
        "nothing waits at the head"
    );
    assert_eq!(t.waiting().await.len(), 100);
    let next = t.publish(1).await.remove(0);
    let report = run(&t.queue, &recorder, 1).await;
    assert_eq!((report.claimed, report.in_backoff), (1, 0), "{report:?}");
    assert_eq!(recorder.names().last(), Some(&next));
}

/// A task that failed once waits out its backoff and comes back at the tail under a new name:
/// the same id, its attempts counted on, its earlier name kept, and a higher fencing token.
#[tokio::test]
async fn a_retried_task_keeps_its_id_attempts_and_fencing_order() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(300)).await;
    let name = t.publish(1).await.remove(0);
    let seen: Arc<Mutex<Vec<Task>>> = Arc::default();
    let record = seen.clone();
    let handler = FnHandler(move |task: Task| {
        let first = {
            let mut seen = record.lock().unwrap();
            seen.push(task);
            seen.len() == 1
        };
        async move {
            if first {
                Err(HandlerError::Retryable("try again".into()))
            } else {
                Ok(())
            }
        }
    });
    assert_eq!(run(&t.queue, &handler, 1).await.retried, 1);
    // Its backoff (300 ms) over: a run judging a second on.
    let later = ZkTime::at(t.now().await.now_ms() + 1_000);
    let report =
        event_bridge::process::run_at(&t.queue, &handler, &harness::options(1, 16), &later)
            .await
            .expect("run");
    assert_eq!(report.completed, 1, "{report:?}");
    let seen = seen.lock().unwrap();
    let (before, after) = (&seen[0], &seen[1]);
    assert_eq!(before.name, name);
    assert_ne!(after.name, name, "back at the tail under a new name");
    assert_eq!(after.envelope.id, before.envelope.id);
    assert_eq!((before.attempt(), after.attempt()), (1, 2));
    assert_eq!(after.envelope.moved_from, [name]);
    assert!(after.fencing_token > before.fencing_token);
    assert_eq!(after.envelope.last_error.as_deref(), Some("try again"));
}

/// `status` finds a task by the name it had and by its id, while it waits and after it came
/// back under a new name.
#[tokio::test]
async fn status_follows_a_task_through_its_moves() {
    use event_bridge::inspect::{Status, status};
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(300)).await;
    let name = t.publish(1).await.remove(0);
    let handler =
        FnHandler(|_task: Task| async { Err(HandlerError::Retryable("try again".into())) });
    assert_eq!(run(&t.queue, &handler, 1).await.retried, 1);
    let now = t.now().await;
    let waiting = status(&t.queue, &now, &name).await.unwrap();
    let Status::Waiting { task } = &waiting else {
        panic!("{waiting:?}")
    };
    let id = task.id.clone().unwrap();
    assert!(matches!(
        status(&t.queue, &now, &id).await.unwrap(),
        Status::Waiting { .. }
    ));

    // Past its backoff of 300 ms.
    let later = ZkTime::at(t.now().await.now_ms() + 400);
    assert_eq!(t.queue.delays().promote_due(&later, 10).await.unwrap(), 1);
    let now = t.now().await;
    for key in [name.as_str(), id.as_str()] {
        match status(&t.queue, &now, key).await.unwrap() {
            Status::Pending { task } => {
                assert_ne!(task.name, name, "under its new name");
                assert_eq!(task.id.as_deref(), Some(id.as_str()));
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(
        status(&t.queue, &now, "task-0000099999").await.unwrap(),
        Status::NotFound
    );
}

/// Four consumers drain part of a queue at once, jumping over each other after lost races:
/// each knows only part of what went, yet the head they leave is the oldest task left, and
/// the ranges it keeps cover only numbers gone.
#[tokio::test]
async fn consumers_draining_together_leave_the_head_at_the_oldest_task_left() {
    let t = TestQueue::new().await;
    let names = t.publish(800).await;
    let recorder = Recorder::default();
    let mut consumers = Vec::new();
    for i in 0..4 {
        consumers.push(t.consumer(&format!("c{i}")).await);
    }
    let runs = consumers.iter().map(|queue| {
        let options = harness::options(150, 32);
        let recorder = recorder.clone();
        async move {
            event_bridge::process::run(queue, &recorder, &options)
                .await
                .expect("run")
        }
    });
    let reports = futures::future::join_all(runs).await;
    assert_eq!(reports.iter().map(|r| r.completed).sum::<u32>(), 600);
    let left = t.children("tasks").await;
    let numbers: Vec<i64> = left
        .iter()
        .filter_map(|n| event_bridge::layout::sequence(n))
        .collect();
    assert_eq!(numbers.len(), 200);
    let head = t.read_json("head").await;
    assert_eq!(head["next"], json!(numbers[0]), "head {head}");
    // No range the head keeps holds a task still there.
    for range in head["gone"].as_array().into_iter().flatten() {
        let (from, to) = (range[0].as_i64().unwrap(), range[1].as_i64().unwrap());
        assert!(
            !numbers.iter().any(|n| (from..to).contains(n)),
            "{from}..{to} holds a task"
        );
    }
    assert_eq!(names.len(), 800);
}

/// A walk that falls back to listing after its own consumer settled tasks, while another
/// consumer moved the head (so the listing's head write loses): what it settled is not
/// forgotten. Every number below the lowest task listed is gone, and its save moves the head
/// there. The four-drain test above found the head left behind a window so settled.
#[tokio::test]
async fn a_walk_that_lists_keeps_what_its_consumer_settled_for_the_head() {
    let t = TestQueue::new().await;
    let names = t.publish(40).await;
    // The head exists (a first walk lists an unknown queue once and writes it).
    let mut first =
        event_bridge::queue::Walk::from_lanes(t.queue.probes().read_lanes().await.unwrap());
    while first.next_window(&t.queue).await.unwrap().is_some() {}
    let mut walk =
        event_bridge::queue::Walk::from_lanes(t.queue.probes().read_lanes().await.unwrap());
    // Children that are not tasks, more than the walk will see: at the tail it lists.
    let tasks = format!("{}/tasks", t.config.root);
    for i in 0..50 {
        let path = format!("{tasks}/not-a-task-{i}");
        t.raw.create(&path, b"", &open()).await.unwrap();
    }
    let window = walk.next_window(&t.queue).await.unwrap().expect("a window");
    assert_eq!(window.len(), 32);
    // Its consumer settles the window's tasks.
    for name in &names[..32] {
        t.raw
            .delete(&format!("{tasks}/{name}"), None)
            .await
            .unwrap();
        walk.mark_gone(name);
    }
    // Another consumer writes the head meanwhile (the same data, a new version).
    let head = format!("{}/head", t.config.root);
    let (data, _) = t.raw.get_data(&head).await.unwrap();
    t.raw.set_data(&head, &data, None).await.unwrap();
    while walk.next_window(&t.queue).await.unwrap().is_some() {}
    walk.save_head(&t.queue).await.unwrap();
    let head = t.read_json("head").await;
    assert_eq!(head["next"], json!(32), "head {head}");
}

/// As above, in the high lane: a listing whose head write lost reads its own lane's head
/// again, and the walk's save moves that head, never the normal lane's (`ROOT/head`).
#[tokio::test]
async fn a_high_lane_walk_that_lists_saves_to_its_own_head() {
    let t = TestQueue::new().await;
    let envelopes: Vec<Envelope> = (0..40)
        .map(|i| {
            let mut e = Envelope::new("high", json!({ "i": i }));
            e.priority = event_bridge::task::Priority::High;
            e
        })
        .collect();
    let names = t.queue.publish_many(&envelopes).await.unwrap();
    // One normal task, so that the normal lane has a head to be confused with.
    t.publish(1).await;
    let mut first =
        event_bridge::queue::Walk::from_lanes(t.queue.probes().read_lanes().await.unwrap());
    while first.next_window(&t.queue).await.unwrap().is_some() {}
    let normal = format!("{}/head", t.config.root);
    let normal_before = t.raw.get_data(&normal).await.ok().map(|(data, _)| data);
    let mut walk =
        event_bridge::queue::Walk::from_lanes(t.queue.probes().read_lanes().await.unwrap());
    let lane = format!("{}/lanes/high", t.config.root);
    for i in 0..50 {
        let path = format!("{lane}/not-a-task-{i}");
        t.raw.create(&path, b"", &open()).await.unwrap();
    }
    let window = walk.next_window(&t.queue).await.unwrap().expect("a window");
    assert_eq!(window.len(), 32);
    for name in &names[..32] {
        t.raw.delete(&format!("{lane}/{name}"), None).await.unwrap();
        walk.mark_gone(name);
    }
    let head = format!("{}/heads/high", t.config.root);
    let (data, _) = t.raw.get_data(&head).await.unwrap();
    t.raw.set_data(&head, &data, None).await.unwrap();
    while walk.next_window(&t.queue).await.unwrap().is_some() {}
    walk.save_head(&t.queue).await.unwrap();
    let high = t.read_json("heads/high").await;
    assert_eq!(high["next"], json!(32), "high head {high}");
    let normal_after = t.raw.get_data(&normal).await.ok().map(|(data, _)| data);
    assert_eq!(normal_after, normal_before, "the normal lane's head");
}
