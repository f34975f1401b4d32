//! `status` and `cancel` while the task they look for moves: they read its places (pending,
//! debounced, waiting, dead, completed) one after another, and a task may leave a place not
//! yet read for one read already. Each test holds the look at an exact request through a
//! [`Tap`], moves the task on a session of its own, then lets the look go on: the task is
//! found where it went, never answered `not_found`.

use std::time::Duration;

use event_bridge::handler::FnHandler;
use event_bridge::inspect::{Status, status};
use event_bridge::{Envelope, HandlerError, Task, cancel};
use serde_json::json;

use crate::link::{Aim, Fault};
use crate::publish_cut::{Tapped, within};

/// A queue through a tap whose retries wait 300 ms at first.
async fn tapped() -> Tapped {
    Tapped::with(|c| c.backoff_base = Duration::from_millis(300)).await
}

/// A task that failed its first attempt and waits out its backoff under `delayed/`; its id.
async fn a_waiting_task(c: &Tapped) -> String {
    let envelope = Envelope::new("moves.waiting", json!({}));
    (c.t.queue.publish_all(std::slice::from_ref(&envelope)))
        .await
        .expect("published");
    let handler =
        FnHandler(|_task: Task| async { Err(HandlerError::Retryable("try again".into())) });
    assert_eq!(harness::run(&c.t.queue, &handler, 1).await.retried, 1);
    let now = c.t.now().await;
    let found = status(&c.t.queue, &now, &envelope.id).await;
    assert!(
        matches!(found, Ok(Status::Waiting { .. })),
        "waiting: {found:?}"
    );
    envelope.id
}

/// Holds the look at its first read of `delayed/` (after it walked the lanes), and meanwhile
/// moves the task `id` waits as from there to its lane: it falls due.
async fn due_while_looked_at<T>(
    c: &Tapped,
    look: impl std::future::Future<Output = T> + Send + 'static,
) -> T
where
    T: Send + 'static,
{
    c.tap.arm(Aim::naming("/delayed"), Fault::Hold);
    let look = tokio::spawn(look);
    within(c.tap.fired()).await;
    let later = event_bridge::clock::ZkTime::at(c.t.now().await.now_ms() + 600_000);
    let promoted = c.t.queue.delays().promote_due(&later, 10).await;
    assert_eq!(promoted.expect("promoted"), 1, "it fell due");
    c.tap.release();
    within(look).await.expect("joined")
}

/// A waiting task that falls due (back to its lane) after the look walked the lanes is
/// found pending. Before the second look it was answered `not_found`.
#[tokio::test]
async fn a_task_that_falls_due_while_its_status_is_read_is_found() {
    let c = tapped().await;
    let id = a_waiting_task(&c).await;
    let queue = c.queue.clone();
    let key = id.clone();
    let found = due_while_looked_at(&c, async move {
        let now = queue.server_time().await.expect("the time");
        status(&queue, &now, &key).await.expect("status")
    })
    .await;
    let Status::Pending { task } = found else {
        panic!("pending in its lane, found {found:?}")
    };
    assert_eq!(task.id.as_deref(), Some(id.as_str()));
}

/// A cancel of a waiting task that falls due meanwhile cancels it where it went: a dead
/// letter with the reason `cancelled`, and nothing left to run. Before the second look the
/// cancel answered `not_found` and the task ran.
#[tokio::test]
async fn a_task_that_falls_due_while_it_is_cancelled_is_cancelled() {
    let c = tapped().await;
    let id = a_waiting_task(&c).await;
    let queue = c.queue.clone();
    let key = id.clone();
    let cancelled = due_while_looked_at(&c, async move {
        cancel::cancel(&queue, &key).await.expect("cancel")
    })
    .await;
    assert!(
        matches!(cancelled, cancel::Cancelled::Cancelled { .. }),
        "cancelled where it went, answered {cancelled:?}"
    );
    let now = c.t.now().await;
    let after = status(&c.t.queue, &now, &id).await.expect("status");
    assert!(matches!(after, Status::Dead { .. }), "{after:?}");
    assert!(c.t.children("tasks").await.is_empty(), "nothing to run");
}
