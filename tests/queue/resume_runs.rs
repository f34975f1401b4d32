//! Resumable tasks from one run to the next: a task stopped to resume in another run is not
//! claimed again by the run that stopped it; a task that makes progress in every run is never
//! buried as interrupted; steps awaited together replay as they were called; a redriven task
//! that was asleep or waiting goes on sleeping or waiting. Time is driven (`run_at`, the
//! tokio clock the run reads moved from within the handler), never waited for.

use std::sync::{Arc, Mutex};

use event_bridge::handler::FnHandler;
use event_bridge::inspect::{self, Status};
use event_bridge::resume::Then;
use event_bridge::state::State;
use event_bridge::{Envelope, Task, process};
use serde_json::json;

use harness::{TestQueue, options};

async fn publish(t: &TestQueue, envelope: Envelope) -> String {
    let id = envelope.id.clone();
    t.queue.publish_many(&[envelope]).await.unwrap();
    id
}

async fn state_of(t: &TestQueue, id: &str) -> (Option<State>, Status) {
    let status = inspect::status(&t.queue, &t.now().await, id).await.unwrap();
    (status.state(), status)
}

/// A task that stops to resume in another run (`Err(steps.stop())`, or a webhook's `202` with
/// a checkpoint alone) is claimed once by the run that stopped it, however many it may claim,
/// and at once by the next run. A grouped one holds its group back for the rest of the run.
#[tokio::test]
async fn a_task_stopped_to_resume_in_another_run_is_not_claimed_again_by_its_run() {
    let t = TestQueue::new().await;
    let stopper = publish(&t, Envelope::new("stop", json!({}))).await;
    let webhook = publish(&t, Envelope::new("webhook", json!({}))).await;
    let mut grouped = Envelope::new("stop", json!({}));
    grouped.group = Some("g".into());
    let grouped = publish(&t, grouped).await;
    let mut behind = Envelope::new("plain", json!({}));
    behind.group = Some("g".into());
    let behind = publish(&t, behind).await;
    let deliveries = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = deliveries.clone();
    let handler = FnHandler(move |task: Task| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(task.envelope.id.clone());
            match task.envelope.event_type.as_str() {
                "stop" => Err(task.steps.stop()),
                "webhook" => {
                    let cursor = task.steps.checkpointed::<u32>().unwrap_or(0);
                    Err(task.steps.suspend_with(Some(json!(cursor + 1)), Then::Now))
                }
                _ => Ok(()),
            }
        }
    });
    let report = process::run(&t.queue, &handler, &options(50, 2))
        .await
        .unwrap();
    assert_eq!(
        (report.claimed, report.suspended),
        (3, 3),
        "each claimed once by the run that stopped it: {report:?}"
    );
    for id in [&stopper, &webhook, &grouped, &behind] {
        assert_eq!(state_of(&t, id).await.0, Some(State::Pending), "{id}");
    }
    let once = deliveries.lock().unwrap().clone();
    assert!(!once.contains(&behind), "the group waits behind its task");

    // Another run (another consumer's, or the next invocation) takes them at once.
    let other = t.consumer("next").await;
    let report = process::run(&other, &handler, &options(3, 2)).await.unwrap();
    assert_eq!(report.claimed, 3, "{report:?}");
}
