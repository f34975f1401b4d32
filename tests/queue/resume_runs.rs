//! Resumable tasks from one run to the next: a task stopped to resume in another run is not
//! claimed again by the run that stopped it; a task that makes progress in every run is never
//! buried as interrupted; steps awaited together replay as they were called; a redriven task
//! that was asleep or waiting goes on sleeping or waiting. Time is driven (`run_at`, the
//! tokio clock the run reads moved from within the handler), never waited for.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::{FnHandler, HandlerError};
use event_bridge::inspect::{self, Status};
use event_bridge::queue::Signalled;
use event_bridge::resume::{Entry, Then, WaitOutcome};
use event_bridge::state::State;
use event_bridge::{Envelope, RunOptions, Task, process};
use serde_json::json;
use tokio::time::Instant;

use harness::{TestQueue, options};

const HOUR: Duration = Duration::from_secs(3600);

async fn publish(t: &TestQueue, envelope: Envelope) -> String {
    let id = envelope.id.clone();
    t.queue.publish_many(&[envelope]).await.unwrap();
    id
}

async fn state_of(t: &TestQueue, id: &str) -> (Option<State>, Status) {
    let status = inspect::status(&t.queue, &t.now().await, id).await.unwrap();
    (status.state(), status)
}

/// The due time of the task with id `id` under `delayed/`.
async fn due_of(t: &TestQueue, id: &str) -> i64 {
    match state_of(t, id).await.1 {
        Status::Sleeping { task } | Status::AwaitingSignal { task } | Status::Waiting { task } => {
            task.envelope.unwrap().retry_at.unwrap()
        }
        other => panic!("{id} is not under delayed/: {other:?}"),
    }
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
    let report = process::run(&other, &handler, &options(3, 2))
        .await
        .unwrap();
    assert_eq!(report.claimed, 3, "{report:?}");
}

/// The run's clock (tokio's) moved to just past when the run stops handlers: what a run whose
/// time ran out sees, without waiting for it.
async fn jump_past_stop(options: &RunOptions) {
    let stop_at = options.deadline - options.margin / 2;
    let by = stop_at.saturating_duration_since(Instant::now()) + Duration::from_millis(1);
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

/// A task that completes a step in every run, the next step cut at the run's deadline, is
/// released each time and finishes, however many runs it takes: a run that made progress is
/// no interruption. (Before the fix, the third such run buried it: "did not finish within a
/// run's time, 3 times".) The deadline comes by the clock the run reads, moved by the step
/// that is cut.
#[tokio::test]
async fn a_task_that_makes_progress_in_every_run_is_not_buried_as_interrupted() {
    const STEPS: u32 = 5;
    let t = TestQueue::with(|c| c.keep_done = Some(HOUR)).await;
    let id = publish(&t, Envelope::new("export", json!({}))).await;
    // A generous margin: the release after the cut has a quarter of it (10 s) in real time.
    let run_options = || RunOptions {
        margin: Duration::from_secs(40),
        ..options(1, 1)
    };
    let this_run = Arc::new(Mutex::new(run_options()));
    let (new_in_run, finished) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let handler = {
        let (this_run, new_in_run, finished) =
            (this_run.clone(), new_in_run.clone(), finished.clone());
        FnHandler(move |task: Task| {
            let (this_run, new_in_run, finished) =
                (this_run.clone(), new_in_run.clone(), finished.clone());
            async move {
                for i in 0..STEPS {
                    let work = async {
                        // The first new step of a run completes; the next runs into the deadline.
                        if new_in_run.fetch_add(1, SeqCst) > 0 {
                            let options = this_run.lock().unwrap().clone();
                            jump_past_stop(&options).await;
                            std::future::pending::<()>().await;
                        }
                        finished.fetch_add(1, SeqCst);
                        Ok(i)
                    };
                    task.steps.step(&format!("part-{i}"), work).await?;
                }
                Ok(())
            }
        })
    };
    let mut runs = 0;
    while state_of(&t, &id).await.0 == Some(State::Pending) {
        runs += 1;
        assert!(runs <= STEPS + 1, "no end after {runs} runs");
        let options = run_options();
        *this_run.lock().unwrap() = options.clone();
        new_in_run.store(0, SeqCst);
        let report = process::run(&t.queue, &handler, &options).await.unwrap();
        assert_eq!(report.dead_lettered, 0, "run {runs}: {report:?}");
    }
    let (state, status) = state_of(&t, &id).await;
    assert_eq!(state, Some(State::Completed), "{status:?}");
    assert_eq!(runs, STEPS, "one step a run");
    assert_eq!(finished.load(SeqCst), STEPS, "each step finished once");
}

/// Two steps awaited together (`tokio::join!`) are recorded in the order they were called,
/// whichever finished first, so unchanged code resumes: the second attempt replays both.
/// (Before the fix they were recorded as they finished, and the replay went to the dead
/// letters: "non-deterministic resume at step 1: expected step \"b\", got step \"a\"".)
#[tokio::test]
async fn steps_awaited_together_replay_in_the_order_they_were_called() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::ZERO).await;
    let id = publish(&t, Envelope::new("fan-out", json!({}))).await;
    let (runs_a, runs_b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = FnHandler(|task: Task| {
        let (runs_a, runs_b, seen) = (runs_a.clone(), runs_b.clone(), seen.clone());
        async move {
            // `b` finishes first: `a` waits until `b`'s work is done.
            let b_done = Arc::new(tokio::sync::Notify::new());
            let a = task.steps.step("a", async {
                b_done.notified().await;
                Ok(10 + runs_a.fetch_add(1, SeqCst))
            });
            let b = task.steps.step("b", async {
                b_done.notify_one();
                Ok(20 + runs_b.fetch_add(1, SeqCst))
            });
            let (a, b): (Result<u32, _>, Result<u32, _>) = tokio::join!(a, b);
            seen.lock().unwrap().push((a?, b?));
            match task.attempt() {
                1 => Err(HandlerError::Retryable("once more".into())),
                _ => Ok(()),
            }
        }
    });
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.retried, 1, "{first:?}");
    let Status::Pending { task } = state_of(&t, &id).await.1 else {
        panic!("retried in place")
    };
    let record = task.envelope.unwrap().resume.expect("a record");
    assert_eq!(record.stored, 2, "both in step znodes: {record:?}");
    let names: Vec<String> = stored_entries(&t, &id, record.stored)
        .await
        .iter()
        .map(|e| e.label())
        .collect();
    assert_eq!(names, ["step \"a\"", "step \"b\""], "in call order");
    let second = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(
        (second.completed, second.dead_lettered),
        (1, 0),
        "{second:?}"
    );
    assert_eq!((runs_a.load(SeqCst), runs_b.load(SeqCst)), (1, 1));
    assert_eq!(*seen.lock().unwrap(), [(10, 20), (10, 20)]);
}

/// The first `stored` entries of the record of the task with id `id`, read from its step
/// znodes.
async fn stored_entries(t: &TestQueue, id: &str, stored: usize) -> Vec<Entry> {
    let folder = t.queue.layout().steps_of(id);
    let mut chunks = Vec::new();
    for name in t.raw.list_children(&folder).await.unwrap() {
        let (data, _) = t.raw.get_data(&format!("{folder}/{name}")).await.unwrap();
        chunks.push((name, data));
    }
    event_bridge::resume::store::join(stored, chunks).unwrap()
}

/// Cancels the task with id `id` and redrives its dead letter.
async fn cancel_and_redrive(t: &TestQueue, id: &str) {
    event_bridge::cancel::cancel(&t.queue, id).await.unwrap();
    assert_eq!(state_of(t, id).await.0, Some(State::Dead));
    let dead = t.children("dead").await;
    let redriven = event_bridge::dead::redrive(&t.queue, &dead).await.unwrap();
    assert_eq!(redriven.redriven.len(), 1, "{redriven:?}");
    assert_eq!(state_of(t, id).await.0, Some(State::Pending));
}

/// A sleeping task cancelled and redriven sleeps out the rest of its sleep: the run that
/// claims it before its end puts it back to sleep until that end, without running it.
/// (Before the fix, it went on at once, past its sleep.)
#[tokio::test]
async fn a_redriven_sleeping_task_sleeps_until_its_sleep_ends() {
    let t = TestQueue::new().await;
    let id = publish(&t, Envelope::new("reminder", json!({}))).await;
    let after = Arc::new(AtomicU32::new(0));
    let handler = FnHandler(|task: Task| {
        let after = after.clone();
        async move {
            task.steps.sleep(HOUR).await?;
            after.fetch_add(1, SeqCst);
            Ok(())
        }
    });
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let due = due_of(&t, &id).await;
    cancel_and_redrive(&t, &id).await;
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!((report.suspended, report.completed), (1, 0), "{report:?}");
    assert_eq!(after.load(SeqCst), 0, "not past its sleep");
    assert_eq!(state_of(&t, &id).await.0, Some(State::Sleeping));
    assert_eq!(due_of(&t, &id).await, due, "the sleep's own end");
    let report = process::run_at(&t.queue, &handler, &options(1, 1), &ZkTime::at(due + 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(after.load(SeqCst), 1);
}

/// A waiting task cancelled and redriven waits again until its own timeout: it takes a signal
/// kept for its key meanwhile, and with none it waits registered under its key again. (Before
/// the fix, it was delivered at once as timed out, and the kept signal stayed unused.)
#[tokio::test]
async fn a_redriven_waiting_task_waits_again_and_takes_a_kept_signal() {
    let t = TestQueue::new().await;
    let (signalled, unsignalled) = (
        publish(&t, Envelope::new("approve", json!({"key": "yes"}))).await,
        publish(&t, Envelope::new("approve", json!({"key": "later"}))).await,
    );
    let ended = Arc::new(Mutex::new(Vec::new()));
    let handler = FnHandler(|task: Task| {
        let ended = ended.clone();
        async move {
            let key = task.envelope.payload["key"].as_str().unwrap().to_string();
            let outcome = task.steps.wait_for(&[key], HOUR).await?;
            ended
                .lock()
                .unwrap()
                .push((task.envelope.id.clone(), outcome));
            Ok(())
        }
    });
    process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    let due = due_of(&t, &unsignalled).await;
    for id in [&signalled, &unsignalled] {
        cancel_and_redrive(&t, id).await;
    }
    // Sent while it was dead: kept for the first wait of its key.
    let sent = t.queue.signals().signal("yes", &json!(1)).await.unwrap();
    assert_eq!(sent, Signalled::Kept);
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!((report.suspended, report.completed), (2, 0), "{report:?}");
    assert!(ended.lock().unwrap().is_empty(), "no wait ended early");
    let left = t.children("signals/yes").await;
    assert!(!left.iter().any(|c| c.starts_with("s-")), "taken: {left:?}");
    assert_eq!(state_of(&t, &signalled).await.0, Some(State::Pending));
    assert_eq!(
        state_of(&t, &unsignalled).await.0,
        Some(State::AwaitingSignal)
    );
    assert_eq!(due_of(&t, &unsignalled).await, due, "its own timeout");
    let sent = t.queue.signals().signal("later", &json!(2)).await.unwrap();
    assert!(matches!(sent, Signalled::Delivered { .. }), "{sent:?}");
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 2, "{report:?}");
    let mut ended = ended.lock().unwrap().clone();
    ended.sort_by_key(|(id, _)| id != &signalled);
    let by = |key: &str, n: i64| WaitOutcome::Signal {
        key: key.into(),
        payload: json!(n),
    };
    assert_eq!(
        ended,
        [(signalled, by("yes", 1)), (unsignalled, by("later", 2))]
    );
}

/// A handler that swallows the error a sleep gave it (`let _ = steps.sleep(…)`) would skip the
/// sleep: the task goes to the dead letters saying so, and nothing after the sleep runs.
/// (Before the fix, it went on at once and completed.)
#[tokio::test]
async fn a_swallowed_sleep_sends_the_task_to_the_dead_letters_saying_so() {
    let t = TestQueue::new().await;
    let (goes_on, returns) = (
        publish(&t, Envelope::new("goes-on", json!({}))).await,
        publish(&t, Envelope::new("returns", json!({}))).await,
    );
    let after = Arc::new(AtomicU32::new(0));
    let handler = FnHandler(|task: Task| {
        let after = after.clone();
        async move {
            let _ = task.steps.sleep(HOUR).await;
            if task.envelope.event_type == "goes-on" {
                let work = async { Ok(after.fetch_add(1, SeqCst)) };
                task.steps.step("after", work).await?;
            }
            Ok(())
        }
    });
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 2, "{report:?}");
    assert_eq!(after.load(SeqCst), 0, "nothing after the sleep ran");
    for (id, reason) in [
        (
            &goes_on,
            "step \"after\" asked after a sleep suspended the handler: return the error the \
             sleep gave (`?`) instead of going on",
        ),
        (
            &returns,
            "the handler ended without the error a sleep gave it: return that error (`?`), or \
             the sleep would be skipped",
        ),
    ] {
        let Status::Dead { record, .. } = state_of(&t, id).await.1 else {
            panic!("{id} is not dead")
        };
        assert_eq!(record["reason"], reason, "{record}");
    }
}

/// A worker's drain lasts while tasks keep coming, so "another run" is its next drain or, in
/// a drain that goes on, a pass after the time an idle worker waits between drains
/// (`WORKER_IDLE_CHECK`): a task it stopped is taken again then, not starved for the drain's
/// life, and not claimed again before. The time passes by the clock the run reads, moved by
/// the task that keeps the drain busy.
#[tokio::test]
async fn a_worker_drain_takes_a_task_it_stopped_again_after_its_idle_wait() {
    let t = TestQueue::new().await;
    let session = event_bridge::Session::open(t.config.clone(), "worker", None)
        .await
        .unwrap();
    let stopper = publish(&t, Envelope::new("stop-once", json!({}))).await;
    publish(&t, Envelope::new("busy", json!({}))).await;
    let deliveries = Arc::new(Mutex::new(Vec::<String>::new()));
    let queue = t.queue.clone();
    let handler = FnHandler(|task: Task| {
        let (seen, queue) = (deliveries.clone(), queue.clone());
        async move {
            seen.lock().unwrap().push(task.envelope.event_type.clone());
            match task.envelope.event_type.as_str() {
                "stop-once" if task.steps.checkpointed::<u32>().is_none() => {
                    Err(task.steps.suspend_with(Some(json!(1)), Then::Now))
                }
                "busy" => {
                    // More work keeps the drain going, while the clock moves past the wait.
                    let idle = event_bridge::worker::WORKER_IDLE_CHECK;
                    tokio::time::pause();
                    tokio::time::advance(idle + Duration::from_millis(1)).await;
                    tokio::time::resume();
                    let more = Envelope::new("plain", json!({}));
                    queue.publish_many(&[more]).await.unwrap();
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    });
    let stop = tokio::sync::watch::channel(false).1;
    let refill = tokio::sync::Notify::new();
    let report = process::run_refilling(&session, &handler, &options(10, 1), &stop, Some(&refill))
        .await
        .unwrap();
    let seen = deliveries.lock().unwrap().clone();
    assert_eq!(
        seen,
        ["stop-once", "busy", "stop-once", "plain"],
        "{report:?}"
    );
    assert_eq!(state_of(&t, &stopper).await.0, None, "completed");
}
