//! Cancelling tasks: pending and waiting ones go to the dead letters with the reason
//! `cancelled`; a held one is marked, so its holder's completion still counts but it is never
//! run again, whether its holder fails, dies or completes.

use std::time::Duration;

use event_bridge::cancel::{Cancelled, cancel};
use event_bridge::handler::FnHandler;
use event_bridge::queue::TaskOutcome;
use event_bridge::{HandlerError, Task, reap};

use harness::{Recorder, TestQueue, options, run};

fn cancelled(name: &str) -> Cancelled {
    Cancelled::Cancelled {
        name: name.to_string(),
    }
}

fn marked(name: &str) -> Cancelled {
    Cancelled::Marked {
        name: name.to_string(),
    }
}

async fn dead_reason(t: &TestQueue, name: &str) -> String {
    let record = t.read_json(&format!("dead/{name}")).await;
    record["reason"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_pending_task_cancelled_by_id_is_a_dead_letter_with_its_reason() {
    let t = TestQueue::new().await;
    let name = t.publish(2).await.remove(0);
    let id = t.read_json(&format!("tasks/{name}")).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(cancel(&t.queue, &id).await.unwrap(), cancelled(&name));
    assert_eq!(dead_reason(&t, &name).await, "cancelled");
    assert_eq!(t.children("tasks").await.len(), 1, "the other task stays");
    let again = cancel(&t.queue, &name).await.unwrap();
    assert_eq!(again, Cancelled::Dead { name: name.clone() });
    assert_eq!(
        cancel(&t.queue, "no-such-id").await.unwrap(),
        Cancelled::NotFound
    );
}

#[tokio::test]
async fn a_task_waiting_out_its_backoff_is_cancelled_where_it_waits() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let failing = FnHandler(|_task: Task| async { Err(HandlerError::Retryable("later".into())) });
    assert_eq!(run(&t.queue, &failing, 1).await.retried, 1);
    assert_eq!(t.waiting().await.len(), 1);
    assert_eq!(cancel(&t.queue, &name).await.unwrap(), cancelled(&name));
    assert!(t.waiting().await.is_empty());
    assert_eq!(dead_reason(&t, &name).await, "cancelled");
}

#[tokio::test]
async fn a_held_task_that_completes_counts_and_its_mark_is_swept() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let TaskOutcome::Claimed(lease) = t.queue.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim");
    };
    let lease = *lease;
    assert_eq!(cancel(&t.queue, &name).await.unwrap(), marked(&name));
    assert_eq!(t.children("cancelled").await.len(), 1);
    assert_eq!(
        t.queue.complete(lease).await.unwrap(),
        event_bridge::queue::Settled::Done
    );
    let report = reap::reap(&t.queue).await.unwrap();
    assert_eq!(report.swept.get("cancel"), Some(&1), "{:?}", report.swept);
    assert!(t.children("cancelled").await.is_empty());
    assert!(
        t.children("dead").await.is_empty(),
        "it completed: no dead letter"
    );
}

#[tokio::test]
async fn a_held_task_whose_attempt_fails_is_buried_not_retried() {
    for backoff in [Duration::ZERO, Duration::from_secs(60)] {
        let t = TestQueue::with(|c| c.backoff_base = backoff).await;
        let name = t.publish(1).await.remove(0);
        let operator = t.consumer("operator").await;
        let key = name.clone();
        let handler = FnHandler(move |_task: Task| {
            let (operator, key) = (operator.clone(), key.clone());
            async move {
                cancel(&operator, &key).await.unwrap();
                Err(HandlerError::Retryable("partner down".into()))
            }
        });
        let report = event_bridge::process::run(&t.queue, &handler, &options(1, 1))
            .await
            .unwrap();
        assert_eq!(
            (report.cancelled, report.retried),
            (1, 0),
            "backoff {backoff:?}"
        );
        assert_eq!(dead_reason(&t, &name).await, "cancelled");
        assert!(t.children("tasks").await.is_empty());
        assert!(t.waiting().await.is_empty());
        assert!(
            t.children("cancelled").await.is_empty(),
            "the mark went with it"
        );
    }
}

#[tokio::test]
async fn a_held_task_whose_holder_died_is_buried_at_its_next_claim() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let dying = t.consumer("dying").await;
    let TaskOutcome::Claimed(_lease) = dying.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim");
    };
    drop(dying);
    assert_eq!(cancel(&t.queue, &name).await.unwrap(), marked(&name));
    let later = t.past_lease_of(&name).await;
    assert_eq!(reap::reap_at(&t.queue, &later).await.unwrap().reaped, 1);
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 5).await;
    assert_eq!(
        (report.cancelled, recorder.count()),
        (1, 0),
        "never run again"
    );
    assert_eq!(dead_reason(&t, &name).await, "cancelled");
    assert!(t.children("cancelled").await.is_empty());
}

/// A queue made before `cancelled/` existed has no mark to find: a release leaves the mark's
/// check out (its feature's answer to `NoNode`) and gives the task back.
#[tokio::test]
async fn a_release_in_a_queue_without_cancelled_gives_the_task_back() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let cancelled = format!("{}/cancelled", t.config.root);
    t.raw.delete(&cancelled, None).await.expect("no cancelled/");
    let now = t.now().await;
    let TaskOutcome::Claimed(lease) = t.queue.claim(&name, &now).await.unwrap() else {
        panic!("claim");
    };
    let back = event_bridge::queue::GiveBack::after(None, Duration::ZERO, &now, true);
    let settled = t.queue.release(*lease, back).await.unwrap();
    assert_eq!(settled, event_bridge::queue::Settled::Done);
    assert_eq!(t.children("tasks").await, [name]);
    assert!(t.children("leases").await.is_empty());
}
