//! Pausing the queue or one event type: paused tasks are not claimed, tasks in flight finish,
//! producers keep publishing, and `resume` lets them run.

use std::time::Duration;

use event_bridge::features::pause::{PauseTarget, Paused};
use event_bridge::handler::FnHandler;
use event_bridge::inspect::{self, Status};
use event_bridge::{Envelope, HandlerError, Task};
use serde_json::json;

use harness::{Recorder, TestQueue, options, run};

fn email() -> PauseTarget {
    PauseTarget::Type("email".into())
}

/// Publishes `n` tasks, alternately of type `email` and `sms`.
async fn publish_mixed(t: &TestQueue, n: usize) -> Vec<String> {
    let envelopes: Vec<Envelope> = (0..n)
        .map(|i| {
            let event_type = if i % 2 == 0 { "email" } else { "sms" };
            Envelope::new(event_type, json!({ "n": i }))
        })
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap()
}

fn types(recorder: &Recorder) -> Vec<String> {
    let seen = recorder.seen.lock().unwrap();
    seen.iter().map(|t| t.envelope.event_type.clone()).collect()
}

#[tokio::test]
async fn a_paused_type_is_left_alone_by_four_consumers_and_runs_once_resumed() {
    let t = TestQueue::new().await;
    publish_mixed(&t, 200).await;
    assert!(t.queue.pauses().pause(&email()).await.unwrap());
    assert!(
        !t.queue.pauses().pause(&email()).await.unwrap(),
        "paused already"
    );
    let recorder = Recorder::default();
    let mut consumers = Vec::new();
    for i in 0..4 {
        consumers.push(t.consumer(&format!("c{i}")).await);
    }
    let runs = consumers.iter().map(|queue| {
        let recorder = recorder.clone();
        async move {
            event_bridge::process::run(queue, &recorder, &options(1_000, 16))
                .await
                .unwrap()
        }
    });
    let reports = futures::future::join_all(runs).await;
    let seen = types(&recorder);
    assert_eq!(seen.len(), 100, "every sms task, once");
    assert!(seen.iter().all(|t| t == "sms"), "no email task claimed");
    assert!(reports.iter().all(|r| r.paused > 0 && r.paused <= 100));
    assert_eq!(t.children("tasks").await.len(), 100, "the email tasks wait");
    // Producers keep publishing meanwhile; stats and status say what is paused.
    let late = publish_mixed(&t, 1).await.remove(0);
    let now = t.now().await;
    let stats = inspect::detailed_stats(&t.queue, &now, false)
        .await
        .unwrap();
    let paused = Paused::in_stats(&stats.stats);
    assert!(paused.types.contains_key("email"));
    let Status::Pending { task } = inspect::status(&t.queue, &now, &late).await.unwrap() else {
        panic!("pending");
    };
    assert!(task.paused);
    assert!(t.queue.pauses().unpause(&email()).await.unwrap());
    let report = run(&t.queue, &recorder, 1_000).await;
    assert_eq!((report.completed, report.paused), (101, 0));
    assert!(t.children("tasks").await.is_empty());
}

#[tokio::test]
async fn a_paused_queue_claims_nothing_and_the_run_says_so() {
    let t = TestQueue::new().await;
    let names = publish_mixed(&t, 4).await;
    t.queue.pauses().pause(&PauseTarget::Queue).await.unwrap();
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert!(report.queue_paused);
    assert_eq!((report.claimed, recorder.count()), (0, 0));
    let now = t.now().await;
    let Status::Pending { task } = inspect::status(&t.queue, &now, &names[1]).await.unwrap() else {
        panic!("pending");
    };
    assert!(task.paused, "sms is held by the queue's pause");
    t.queue.pauses().unpause(&PauseTarget::Queue).await.unwrap();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 4);
}

/// No task starts once `pause` has returned: a claim decided on what was paused before (a
/// consumer's copy, read less than half a second ago) checks the pause in its own multi-op, so
/// it cannot land after the pause; and after a resume the same stale copy claims again on a
/// consumer that never saw the pause. (The consumer whose claim did see it keeps what it read
/// until its copy is read again, so a resume reaches it within half a second.) The first
/// pause of a queue is as exact as any (the `paused` znode is one of the base paths).
#[tokio::test]
async fn a_claim_decided_before_a_pause_does_not_land_after_it() {
    use event_bridge::queue::{Restraints, TaskOutcome};
    let t = TestQueue::new().await;
    let name = (t.queue)
        .publish(&Envelope::new("email", json!({})))
        .await
        .unwrap();
    let start = t.queue.read_start().await.unwrap();
    let before = Restraints {
        found: start.found,
        ..Restraints::default()
    };
    let features = t.queue.features();
    let email_task = Envelope::new("email", json!({}));
    assert_eq!(
        features.at_claim(&email_task, 0, &before.found),
        event_bridge::feature::AtClaim::Take,
        "nothing paused yet"
    );
    assert!(t.queue.pauses().pause(&email()).await.unwrap());
    let (t, name, before) = (&t, &name, &before);
    let claim = |queue: event_bridge::Queue| async move {
        let path = format!("{}/tasks/{name}", t.config.root);
        let (body, stat) = t.raw.get_data(&path).await.unwrap();
        let now = t.now().await;
        (queue.claim_read(name, &body, &stat, &now, before))
            .await
            .unwrap()
    };
    let outcome = claim(t.queue.clone()).await;
    assert!(matches!(outcome, TaskOutcome::Paused), "{outcome:?}");
    assert!(t.children("leases").await.is_empty(), "nothing claimed");
    assert!(t.queue.pauses().unpause(&email()).await.unwrap());
    let outcome = claim(t.consumer("never saw the pause").await).await;
    assert!(matches!(outcome, TaskOutcome::Claimed(_)), "{outcome:?}");
}

/// A claim decides on the very read of `paused` its multi-op checks: what a run read while
/// `email` was paused leaves an email task, on a consumer whose queue never read `paused`
/// itself (its session renewed under the run, say), though the check at that version passes.
/// (A first version answered from what the consumer's own features had read: nothing, so
/// the task was claimed while paused.)
#[tokio::test]
async fn a_claim_decides_on_the_read_it_checks_on_any_consumer() {
    use event_bridge::queue::{Restraints, TaskOutcome};
    let t = TestQueue::new().await;
    let name = (t.queue)
        .publish(&Envelope::new("email", json!({})))
        .await
        .unwrap();
    assert!(t.queue.pauses().pause(&email()).await.unwrap());
    let start = t.queue.read_start().await.unwrap();
    let paused = Restraints {
        found: start.found,
        ..Restraints::default()
    };
    let fresh = t.consumer("never read paused").await;
    let path = format!("{}/tasks/{name}", t.config.root);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    let now = t.now().await;
    let outcome = (fresh.claim_read(&name, &body, &stat, &now, &paused))
        .await
        .unwrap();
    assert!(matches!(outcome, TaskOutcome::Paused), "{outcome:?}");
    assert!(t.children("leases").await.is_empty(), "nothing claimed");
}

#[tokio::test]
async fn a_task_in_flight_when_its_type_is_paused_finishes() {
    let t = TestQueue::new().await;
    publish_mixed(&t, 1).await; // one email task
    let pauser = t.consumer("operator").await;
    let handler = FnHandler(move |_task: Task| {
        let pauser = pauser.clone();
        async move {
            pauser.pauses().pause(&email()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<(), HandlerError>(())
        }
    });
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(report.completed, 1);
    assert!(t.queue.pauses().paused().await.unwrap().covers("email"));
}

/// A pause reaches a run that is already draining: claims made after it see it within a
/// second. The handler of the fourth task pauses, then takes longer than that, so the run's
/// next claim comes after the pause is a second old whatever the machine's speed: nothing
/// more may start. (Before the fix, a run read what is paused only between passes, and one
/// pass walked the whole backlog: all 20 ran.)
async fn a_pause_stops_a_running_drain(target: PauseTarget) {
    let t = TestQueue::new().await;
    let envelopes: Vec<Envelope> = (0..20)
        .map(|i| Envelope::new("email", json!({ "n": i })))
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap();
    let operator = t.consumer("operator").await;
    let delivered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = delivered.clone();
    let handler = FnHandler(move |task: Task| {
        let (operator, seen, target) = (operator.clone(), seen.clone(), target.clone());
        async move {
            let n = task.envelope.payload["n"].as_u64().unwrap();
            seen.lock().unwrap().push(n);
            if n == 3 {
                assert!(operator.pauses().pause(&target).await.unwrap());
                // Longer than a second by the run's clock: the clock moves on at once.
                tokio::time::pause();
                tokio::time::advance(Duration::from_millis(1_200)).await;
                tokio::time::resume();
            }
            Ok::<(), HandlerError>(())
        }
    });
    let report = event_bridge::process::run(&t.queue, &handler, &options(100, 1))
        .await
        .unwrap();
    assert_eq!(*delivered.lock().unwrap(), [0, 1, 2, 3], "{report:?}");
    assert_eq!(report.completed, 4);
    assert_eq!(t.children("tasks").await.len(), 16, "the rest wait");
}

#[tokio::test]
async fn pausing_a_type_stops_a_running_drain_within_a_second() {
    a_pause_stops_a_running_drain(email()).await;
}

#[tokio::test]
async fn pausing_the_queue_stops_a_running_drain_within_a_second() {
    a_pause_stops_a_running_drain(PauseTarget::Queue).await;
}
