//! Ordered groups through every wait: a grouped task published with `after` or debounced keeps
//! its turn in its group (a place in its lane stands for it), and a group whose task dies on
//! the way (with its parent, cancelled, withdrawn) pauses at that task's turn when asked.

use std::sync::{Arc, Mutex};

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::queue::Published;
use event_bridge::task::{Debounce, OnDead};
use event_bridge::{Envelope, HandlerError, Task, process};
use serde_json::json;

use harness::{TestQueue, options};

fn task(name: &str) -> Envelope {
    Envelope::new("ordered", json!({ "name": name }))
}

fn grouped(name: &str) -> Envelope {
    let mut envelope = task(name);
    envelope.group = Some("g".into());
    envelope
}

fn after(mut envelope: Envelope, parent: &Envelope) -> Envelope {
    envelope.after = vec![parent.id.clone()];
    envelope
}

fn debounced(mut envelope: Envelope, key: &str, period_ms: u64) -> Envelope {
    envelope.debounce = Some(Debounce {
        key: key.into(),
        period_ms,
        max_ms: None,
    });
    envelope
}

/// A handler that records the names of the tasks that succeeded, in order, and fails for good
/// those whose payload says so.
fn ordered(log: &Arc<Mutex<Vec<String>>>) -> impl event_bridge::Handler + use<> {
    let log = log.clone();
    FnHandler(move |task: Task| {
        let log = log.clone();
        async move {
            if task.envelope.payload["fail"] == true {
                return Err(HandlerError::Permanent("told to".into()));
            }
            let name = task.envelope.payload["name"].as_str().unwrap().to_string();
            log.lock().unwrap().push(name);
            Ok(())
        }
    })
}

/// Runs until nothing more runs (a run ends when its passes find nothing to claim).
async fn drain(t: &TestQueue, log: &Arc<Mutex<Vec<String>>>) {
    drain_after(t, log, 0).await;
}

/// As [`drain`], each run judging `ms` past ZooKeeper's time (debounce periods over).
async fn drain_after(t: &TestQueue, log: &Arc<Mutex<Vec<String>>>, ms: i64) {
    let handler = ordered(log);
    for _ in 0..4 {
        let later = ZkTime::at(t.now().await.now_ms() + ms);
        process::run_at(&t.queue, &handler, &options(100, 4), &later)
            .await
            .unwrap();
    }
}

fn names(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// G1 waits for P (not grouped), G2 is published after it: G1 runs before G2. (Before places,
/// G1 joined its lane's tail when P completed, and the run went P, G2, G1.)
#[tokio::test]
async fn a_grouped_child_keeps_its_turn_while_its_parent_runs() {
    let t = TestQueue::new().await;
    let p = task("P");
    let published = t
        .queue
        .publish_all(&[p.clone(), after(grouped("G1"), &p), grouped("G2")])
        .await
        .unwrap();
    assert!(
        matches!(published[1], Published::Blocked { .. }),
        "{published:?}"
    );
    let log = Arc::default();
    drain(&t, &log).await;
    assert_eq!(names(&log), ["P", "G1", "G2"]);
    assert!(t.children("tasks").await.is_empty(), "no place left");
    assert!(t.children("after").await.is_empty());
    assert!(t.children("groups").await.is_empty(), "no lock left");
}

/// Publish order G1, G2 (after P), G3, G4 (debounced), G5 is run order. (Before places it ran
/// G1, G3, G5, G4, G2.)
#[tokio::test]
async fn publish_order_holds_through_after_and_debounce() {
    let t = TestQueue::new().await;
    let p = task("P");
    t.queue.publish_all(std::slice::from_ref(&p)).await.unwrap();
    let envelopes = [
        grouped("G1"),
        after(grouped("G2"), &p),
        grouped("G3"),
        debounced(grouped("G4"), "doc-4", 1),
        grouped("G5"),
    ];
    t.queue.publish_all(&envelopes).await.unwrap();
    // A millisecond's period: over for runs judging a millisecond on.
    let log = Arc::default();
    drain_after(&t, &log, 1).await;
    let ran = names(&log);
    let grouped: Vec<&String> = ran.iter().filter(|n| n.starts_with('G')).collect();
    assert_eq!(grouped, ["G1", "G2", "G3", "G4", "G5"], "{ran:?}");
    assert!(t.children("tasks").await.is_empty(), "no place left");
    assert!(t.children("debounce").await.is_empty());
}

/// A debounced grouped task replaced by later publishes of its key runs at its first publish's
/// turn, with the last payload; a publish of the key in another group is refused, naming it.
#[tokio::test]
async fn a_debounced_grouped_task_runs_at_its_first_publishs_turn() {
    let t = TestQueue::new().await;
    t.queue
        .publish_all(&[
            debounced(grouped("first"), "doc-1", 1),
            grouped("G2"),
            debounced(grouped("last"), "doc-1", 1),
        ])
        .await
        .unwrap();
    let mut elsewhere = debounced(task("other"), "doc-1", 1);
    elsewhere.group = Some("h".into());
    let refused = t.queue.publish_all(&[elsewhere]).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("\"doc-1\" is pending in group \"g\""),
        "{refused}"
    );
    let log = Arc::default();
    drain_after(&t, &log, 1).await;
    assert_eq!(names(&log), ["last", "G2"]);
}

/// P fails for good; G1 (after P, `on_dead: pause`) dies with it, before its turn; G2 waits,
/// paused, until the group is resumed. (Before, the pause was ignored and G2 ran at once.)
#[tokio::test]
async fn a_child_that_dies_with_its_parent_pauses_its_group_when_asked() {
    let t = TestQueue::new().await;
    let mut p = task("P");
    p.payload["fail"] = json!(true);
    let mut g1 = after(grouped("G1"), &p);
    g1.on_dead = Some(OnDead::Pause);
    t.queue.publish_all(&[p, g1, grouped("G2")]).await.unwrap();
    let log = Arc::default();
    drain(&t, &log).await;
    assert!(names(&log).is_empty(), "{:?}", names(&log));
    assert_eq!(t.children("dead").await.len(), 2, "P and G1");
    let paused = t.queue.groups().paused_groups(10).await.unwrap();
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert!(
        paused[0].1.contains("went to the dead letters"),
        "{paused:?}"
    );

    assert!(t.queue.groups().unpause_group("g").await.unwrap());
    drain(&t, &log).await;
    assert_eq!(names(&log), ["G2"]);
}

/// The other ways a grouped task with `on_dead: pause` dies before its turn: a cancel of the
/// child waiting for its parent, of the pending task, of its debounced publish. Each pauses
/// the group at its turn, after the task before it (held by another consumer meanwhile) ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_task_cancelled_before_its_turn_pauses_its_group_there() {
    for how in ["blocked", "pending", "debounced"] {
        let t = TestQueue::new().await;
        let p = task("P");
        let mut g1 = match how {
            "blocked" => after(grouped("G1"), &p),
            "debounced" => debounced(grouped("G1"), "doc-1", 3_600_000),
            _ => grouped("G1"),
        };
        g1.on_dead = Some(OnDead::Pause);
        t.queue
            .publish_all(&[p, grouped("G0"), g1.clone(), grouped("G2")])
            .await
            .unwrap();
        // G0 runs under another consumer while G1 is cancelled.
        let other = t.consumer("other").await;
        let names_now = t.children("tasks").await;
        let g0 = &names_now[1];
        let held = match other.claim(g0, &t.now().await).await.unwrap() {
            event_bridge::queue::TaskOutcome::Claimed(lease) => *lease,
            outcome => panic!("{how}: {outcome:?}"),
        };
        let cancelled = event_bridge::cancel::cancel(&t.queue, &g1.id)
            .await
            .unwrap();
        let answer = serde_json::to_value(&cancelled).unwrap();
        assert!(
            ["cancelled", "withdrawn"].contains(&answer["state"].as_str().unwrap()),
            "{how}: {answer}"
        );
        other.complete(held).await.unwrap();

        let log = Arc::default();
        drain(&t, &log).await;
        assert_eq!(names(&log), ["P"], "{how}: G2 waits, paused");
        let paused = t.queue.groups().paused_groups(10).await.unwrap();
        assert_eq!(paused.len(), 1, "{how}: {paused:?}");
        assert!(t.queue.groups().unpause_group("g").await.unwrap(), "{how}");
        drain(&t, &log).await;
        assert_eq!(names(&log), ["P", "G2"], "{how}");
    }
}

/// Without `on_dead: pause`, a cancelled grouped task's group goes on at its turn, and the
/// place its death left is gone.
#[tokio::test]
async fn a_grouped_task_cancelled_before_its_turn_lets_its_group_go_on_by_default() {
    let t = TestQueue::new().await;
    let g1 = grouped("G1");
    t.queue
        .publish_all(&[g1.clone(), grouped("G2")])
        .await
        .unwrap();
    event_bridge::cancel::cancel(&t.queue, &g1.id)
        .await
        .unwrap();
    let log = Arc::default();
    drain(&t, &log).await;
    assert_eq!(names(&log), ["G2"]);
    assert!(t.children("tasks").await.is_empty(), "no place left");
    assert!(t.children("groups").await.is_empty());
}

/// A place asked for by its name: `status` says whose turn it keeps (not a pending task), and
/// `cancel` of that name cancels the task it stands for (the child waiting for its parent),
/// never the place itself; the group goes on at its turn.
#[tokio::test]
async fn status_and_cancel_of_a_place_are_of_the_task_it_stands_for() {
    let t = TestQueue::new().await;
    let p = task("P");
    let g1 = after(grouped("G1"), &p);
    t.queue
        .publish_all(&[p, g1.clone(), grouped("G2")])
        .await
        .unwrap();
    let lane = t.children("tasks").await;
    let place = &lane[1];
    let status = event_bridge::inspect::status(&t.queue, &t.now().await, place)
        .await
        .unwrap();
    let status = serde_json::to_value(status).unwrap();
    assert_eq!(status["state"], "place", "{status}");
    assert_eq!(status["task"]["id"], g1.id.as_str(), "{status}");
    assert_eq!(status["task"]["place"]["stands_for"], "parents", "{status}");
    let by_id = event_bridge::inspect::status(&t.queue, &t.now().await, &g1.id)
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(by_id).unwrap()["state"], "blocked");

    let cancelled = event_bridge::cancel::cancel(&t.queue, place).await.unwrap();
    let answer = serde_json::to_value(&cancelled).unwrap();
    assert_eq!(answer["state"], "cancelled", "{answer}");
    assert!(
        t.children("after").await.is_empty(),
        "the child is a dead letter"
    );
    assert!(
        t.children("dead")
            .await
            .iter()
            .any(|d| d.starts_with("after-")),
        "{:?}",
        t.children("dead").await
    );
    let log = Arc::default();
    drain(&t, &log).await;
    assert_eq!(names(&log), ["P", "G2"]);
    assert!(t.children("tasks").await.is_empty(), "no place left");
}
