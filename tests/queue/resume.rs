//! Resumable tasks: a step runs once and its result comes back on every later attempt; a
//! sleep and a wait hold no lease; signals are consumed once, by the wait that came first,
//! including one sent before its wait; a resume that asks for another step fails loudly; a
//! stale holder's checkpoint is refused. Times are driven (`run_at`) rather than waited for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::{FnHandler, HandlerError};
use event_bridge::inspect::{self, Status};
use event_bridge::queue::{Settled, Signalled, TaskOutcome};
use event_bridge::resume::WaitOutcome;
use event_bridge::state::State;
use event_bridge::{Envelope, Task, process, reap};
use serde_json::{Value, json};

use crate::cli::eb;
use harness::{TestQueue, options};

fn stdout(output: std::process::Output) -> String {
    let err = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{err}");
    String::from_utf8(output.stdout).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

/// The dead letter of `name`'s reason, and the error it kept.
async fn dead_letter(t: &TestQueue, name: &str) -> (String, Value) {
    let record = t.read_json(&format!("dead/{name}")).await;
    (record["reason"].as_str().unwrap().to_string(), record)
}

/// Where the task with envelope id `id` is.
async fn state_of(t: &TestQueue, id: &str) -> (Option<State>, Status) {
    let status = inspect::status(&t.queue, &t.now().await, id).await.unwrap();
    (status.state(), status)
}

async fn publish_one(t: &TestQueue, event_type: &str) -> String {
    let envelope = Envelope::new(event_type, json!({}));
    let id = envelope.id.clone();
    t.queue.publish_many(&[envelope]).await.unwrap();
    id
}

/// A moment `ms` past `until_ms`, by a clock the test drives.
fn past(until_ms: i64) -> ZkTime {
    ZkTime::at(until_ms + 1)
}

/// The due time of the task with id `id` under `delayed/` (its record's sleep or wait end).
async fn due_of(t: &TestQueue, id: &str) -> i64 {
    match state_of(t, id).await.1 {
        Status::Sleeping { task } | Status::AwaitingSignal { task } | Status::Waiting { task } => {
            task.envelope.unwrap().retry_at.unwrap()
        }
        other => panic!("{id} is not under delayed/: {other:?}"),
    }
}

#[tokio::test]
async fn a_step_runs_once_and_its_result_comes_back_on_every_later_attempt() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::ZERO).await;
    let id = publish_one(&t, "export").await;
    let (runs_a, runs_b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = FnHandler(|task: Task| {
        let (runs_a, runs_b, seen) = (runs_a.clone(), runs_b.clone(), seen.clone());
        async move {
            let steps = &task.steps;
            let rows: u32 = steps
                .step("count", async { Ok(10 + runs_a.fetch_add(1, SeqCst)) })
                .await?;
            let file: String = steps
                .step("write", async {
                    runs_b.fetch_add(1, SeqCst);
                    Ok(format!("export-{rows}.csv"))
                })
                .await?;
            seen.lock().unwrap().push((rows, file));
            match task.attempt() {
                1 => Err(HandlerError::Retryable("the upload failed".into())),
                _ => Ok(()),
            }
        }
    });
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.retried, 1);
    let (_, Status::Pending { task }) = state_of(&t, &id).await else {
        panic!("retried in place")
    };
    let record = task.envelope.unwrap().resume.expect("the record");
    assert_eq!(record.steps_done(), 2, "both steps recorded: {record:?}");

    let second = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(second.completed, 1);
    assert_eq!((runs_a.load(SeqCst), runs_b.load(SeqCst)), (1, 1));
    let seen = seen.lock().unwrap().clone();
    let once = (10, "export-10.csv".to_string());
    assert_eq!(seen, [once.clone(), once], "the same results as one run");
}

#[tokio::test]
async fn each_step_is_one_write_of_the_task_fenced_by_the_lease() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let TaskOutcome::Claimed(lease) = t.queue.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim")
    };
    let mut stale = *lease;
    // The lease expires and the reaper frees it: another consumer claims the task.
    let later = t.past_lease_of(&name).await;
    assert_eq!(reap::reap_at(&t.queue, &later).await.unwrap().reaped, 1);
    let other = t.consumer("other").await;
    let TaskOutcome::Claimed(fresh) = other.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim again")
    };
    let mut fresh = *fresh;
    let path = format!("{}/tasks/{name}", t.config.root);
    let (_, before) = t.raw.get_data(&path).await.unwrap();

    // The stale holder's checkpoint is refused, and nothing of it lands.
    stale
        .task
        .steps
        .checkpoint(&json!({"cursor": 1}))
        .await
        .unwrap();
    assert_eq!(
        t.queue.extend(&mut stale).await.unwrap(),
        Settled::LeaseLost
    );
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    assert_eq!(stat.version, before.version, "nothing written");
    assert!(!String::from_utf8_lossy(&body).contains("cursor"));

    // The holder's is written by its extension: one write of the task.
    fresh
        .task
        .steps
        .checkpoint(&json!({"cursor": 2}))
        .await
        .unwrap();
    assert_eq!(other.extend(&mut fresh).await.unwrap(), Settled::Done);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    assert_eq!(stat.version, before.version + 1, "one write");
    let written: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(written["resume"]["checkpoint"], json!({"cursor": 2}));
    // An extension with nothing new writes the lease only.
    assert_eq!(other.extend(&mut fresh).await.unwrap(), Settled::Done);
    assert_eq!(t.raw.get_data(&path).await.unwrap().1.version, stat.version);
    assert_eq!(other.complete(fresh).await.unwrap(), Settled::Done);
}

#[tokio::test]
async fn a_sleeping_task_holds_no_lease_and_resumes_after_its_sleep() {
    let t = TestQueue::new().await;
    let id = publish_one(&t, "reminder").await;
    let (before, after) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let handler = FnHandler(|task: Task| {
        let (before, after) = (before.clone(), after.clone());
        async move {
            let steps = &task.steps;
            steps
                .step("book", async { Ok(before.fetch_add(1, SeqCst)) })
                .await?;
            steps.sleep(HOUR).await?;
            steps
                .step("remind", async { Ok(after.fetch_add(1, SeqCst)) })
                .await?;
            Ok(())
        }
    });
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!((first.suspended, first.retried), (1, 0));
    assert_eq!(state_of(&t, &id).await.0, Some(State::Sleeping));
    assert!(
        t.children("leases").await.is_empty(),
        "no lease while it sleeps"
    );
    let why = inspect::explain(&t.queue, &t.now().await, &id)
        .await
        .unwrap();
    assert!(
        why.lines[0].starts_with("asleep after 1 steps until "),
        "{:?}",
        why.lines
    );
    let counted = inspect::detailed_stats(&t.queue, &t.now().await, false).await;
    assert_eq!(counted.unwrap().sleeping, 1);
    let shown = stdout(eb(&t, &["status", &id], ""));
    assert!(
        shown.contains(": sleeping after 1 steps, resumes in "),
        "{shown}"
    );

    // Not before its time.
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.claimed, 0);
    let due = due_of(&t, &id).await;
    let report = process::run_at(&t.queue, &handler, &options(1, 1), &past(due))
        .await
        .unwrap();
    assert_eq!(report.completed, 1);
    assert_eq!((before.load(SeqCst), after.load(SeqCst)), (1, 1));
    let attempts = t.children("tasks").await;
    assert!(attempts.is_empty(), "completed: {attempts:?}");
}

/// A handler that waits for `keys` an hour and records what ended its wait.
fn waiter(
    keys: &'static [&'static str],
    ended: Arc<std::sync::Mutex<Vec<(String, WaitOutcome)>>>,
) -> FnHandler<impl Fn(Task) -> futures::future::BoxFuture<'static, Result<(), HandlerError>>> {
    FnHandler(move |task: Task| {
        let ended = ended.clone();
        Box::pin(async move {
            let outcome = task.steps.wait_for(keys, HOUR).await?;
            ended
                .lock()
                .unwrap()
                .push((task.envelope.id.clone(), outcome));
            Ok(())
        }) as futures::future::BoxFuture<'static, _>
    })
}

#[tokio::test]
async fn a_signal_sent_before_its_wait_is_kept_and_consumed_by_it_once() {
    let t = TestQueue::new().await;
    let signals = t.queue.signals();
    let payload = json!({"approved_by": "ana"});
    assert_eq!(
        signals.signal("order-7", &payload).await.unwrap(),
        Signalled::Kept
    );
    let id = publish_one(&t, "approve").await;
    let ended = Arc::default();
    let handler = waiter(&["order-7"], Arc::clone(&ended));
    // The wait finds the signal and consumes it in its release: back in place, at once.
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.suspended, 1);
    assert_eq!(state_of(&t, &id).await.0, Some(State::Pending));
    // Taken, and a note of it left for its signaller (the reaper deletes it later).
    assert_eq!(t.children("signals/order-7").await, ["d-0000000000"]);
    let second = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(second.completed, 1);
    let want = WaitOutcome::Signal {
        key: "order-7".into(),
        payload,
    };
    assert_eq!(*ended.lock().unwrap(), [(id, want)]);
    let grace = event_bridge::queue::SIGNALLER_GRACE_MS;
    let later = ZkTime::at(t.now().await.now_ms() + grace + 1);
    reap::reap_at(&t.queue, &later).await.unwrap();
    assert!(
        t.children("signals/order-7").await.is_empty(),
        "the note deleted"
    );
}

/// The signal key `locked`, made by another client readable only by itself: that client, and
/// the key's path.
async fn locked_key(t: &TestQueue) -> (zookeeper_client::Client, String) {
    use zookeeper_client as zk;
    let stranger = zk::Client::connector()
        .with_auth("digest", b"stranger:pw")
        .connect(&t.config.zookeeper)
        .await
        .unwrap();
    let key = format!("{}/signals/locked", t.config.root);
    let private = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    stranger.create(&key, b"", &private).await.unwrap();
    (stranger, key)
}

/// A wait whose keys cannot be read (here a key another client made readable only by itself)
/// does not fail the run: the task goes back in place with the wait taken back, holding no
/// registration, and its next run asks for the wait again; once the key can be read, the wait
/// registers and a signal ends it.
#[tokio::test]
async fn a_wait_whose_keys_cannot_be_read_is_asked_for_again_by_the_next_run() {
    use zookeeper_client as zk;
    let t = TestQueue::new().await;
    let (stranger, key) = locked_key(&t).await;
    let id = publish_one(&t, "approve").await;
    let ended = Arc::default();
    let handler = waiter(&["locked"], Arc::clone(&ended));
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!((first.suspended, first.retried), (1, 0), "{first:?}");
    let (state, status) = state_of(&t, &id).await;
    assert_eq!(state, Some(State::Pending), "back in place: {status:?}");
    let Status::Pending { task } = status else {
        unreachable!()
    };
    let record = task.envelope.unwrap().resume;
    assert!(
        record.as_ref().is_none_or(|r| r.suspended_in().is_none()),
        "the wait taken back: {record:?}"
    );
    assert!(t.waiting().await.is_empty(), "nothing under delayed/");
    let anyone = zk::Acls::anyone_all();
    stranger.set_acl(&key, &anyone, None).await.unwrap();
    let second = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(second.suspended, 1, "{second:?}");
    assert_eq!(state_of(&t, &id).await.0, Some(State::AwaitingSignal));
    let payload = json!({"ok": true});
    t.queue.signals().signal("locked", &payload).await.unwrap();
    let third = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(third.completed, 1, "{third:?}");
    let want = WaitOutcome::Signal {
        key: "locked".into(),
        payload,
    };
    assert_eq!(*ended.lock().unwrap(), [(id, want)]);
}

/// As the HTTP sink answers a webhook's `202` that waits for the key `locked`: the checkpoint
/// names the step after the one the task is at.
fn webhook_waits_on_locked(task: &Task) -> Result<(), HandlerError> {
    use event_bridge::resume::Then;
    let step = task.steps.checkpointed::<u64>().unwrap_or(0);
    let wait = Then::WaitFor {
        keys: vec!["locked".into()],
        timeout: HOUR,
    };
    Err(task.steps.suspend_with(Some(json!(step + 1)), wait))
}

/// A webhook's wait (a `202` with a checkpoint and `wait_for`) whose keys cannot be read is
/// taken back with the checkpoint it came with: the next delivery carries the checkpoint from
/// before, so the webhook asks for the wait again rather than go on as if it had ended. (The
/// contract checker met this under a leader kill: the delivery after it carried the new
/// checkpoint and no wait, and the webhook went on past a wait that never was.)
#[tokio::test]
async fn a_webhook_wait_taken_back_takes_its_checkpoint_back_too() {
    let t = TestQueue::new().await;
    let _locked = locked_key(&t).await;
    let id = publish_one(&t, "webhook").await;
    let handler = FnHandler(move |task: Task| async move { webhook_waits_on_locked(&task) });
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.suspended, 1, "{first:?}");
    let (state, status) = state_of(&t, &id).await;
    assert_eq!(state, Some(State::Pending), "back in place: {status:?}");
    let Status::Pending { task } = status else {
        unreachable!()
    };
    let record = task.envelope.unwrap().resume;
    assert_eq!(
        record.as_ref().and_then(|r| r.checkpoint.clone()),
        None,
        "the checkpoint from before the wait: {record:?}"
    );
}

/// A webhook's task back before its wait ended (cancelled and redriven), whose key cannot be
/// read when the run suspends it in its wait again, keeps that wait: its handler did not ask
/// for it in this run, so it cannot ask again, and the checkpoint the wait came with stays.
/// (The contract checker met this under a leader kill: the run dropped the record's wait, the
/// next delivery carried the checkpoint after it and no wait, and the webhook went on past a
/// wait that never ended.)
#[tokio::test]
async fn a_wait_back_before_its_end_keeps_it_when_its_keys_cannot_be_read() {
    use zookeeper_client as zk;
    let t = TestQueue::new().await;
    let (stranger, key) = locked_key(&t).await;
    stranger
        .set_acl(&key, &zk::Acls::anyone_all(), None)
        .await
        .unwrap();
    let id = publish_one(&t, "webhook").await;
    let ran = Arc::new(AtomicU32::new(0));
    let handler = FnHandler(|task: Task| {
        let ran = ran.clone();
        async move {
            ran.fetch_add(1, SeqCst);
            webhook_waits_on_locked(&task)
        }
    });
    let first = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.suspended, 1, "{first:?}");
    assert_eq!(state_of(&t, &id).await.0, Some(State::AwaitingSignal));
    event_bridge::cancel::cancel(&t.queue, &id).await.unwrap();
    let dead = t.children("dead").await;
    let redriven = event_bridge::dead::redrive(&t.queue, &dead).await.unwrap();
    assert_eq!(redriven.redriven.len(), 1, "{redriven:?}");
    let private = zk::Acls::creator_all();
    stranger.set_acl(&key, &private, None).await.unwrap();
    let second = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!((second.suspended, second.retried), (1, 0), "{second:?}");
    assert_eq!(ran.load(SeqCst), 1, "its handler not run again");
    let (state, status) = state_of(&t, &id).await;
    let Status::Pending { task } = status else {
        panic!("back in place: {state:?} {status:?}");
    };
    let record = task.envelope.unwrap().resume.expect("its record");
    assert!(record.suspended_in().is_some(), "its wait kept: {record:?}");
    assert_eq!(record.checkpoint, Some(json!(1)), "and its checkpoint");
}

#[tokio::test]
async fn a_key_two_tasks_wait_for_wakes_the_first_and_its_next_signal_the_other() {
    let t = TestQueue::new().await;
    let (first, second) = (publish_one(&t, "a").await, publish_one(&t, "a").await);
    let ended = Arc::default();
    let handler = waiter(&["shipment", "refund"], Arc::clone(&ended));
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(report.suspended, 2);
    assert_eq!(state_of(&t, &first).await.0, Some(State::AwaitingSignal));
    let why = inspect::explain(&t.queue, &t.now().await, &first)
        .await
        .unwrap();
    assert!(
        why.lines[0].starts_with("waiting after 0 steps for a signal on shipment or refund;"),
        "{:?}",
        why.lines
    );
    assert_eq!(t.children("leases").await, Vec::<String>::new());
    let counted = inspect::detailed_stats(&t.queue, &t.now().await, true).await;
    assert_eq!(counted.unwrap().awaiting_signal, 2);

    let signals = t.queue.signals();
    let one = signals.signal("refund", &json!(1)).await.unwrap();
    assert!(matches!(one, Signalled::Delivered { .. }), "{one:?}");
    assert_eq!(state_of(&t, &first).await.0, Some(State::Pending));
    assert_eq!(state_of(&t, &second).await.0, Some(State::AwaitingSignal));
    let two = signals.signal("shipment", &json!(2)).await.unwrap();
    assert!(matches!(two, Signalled::Delivered { .. }), "{two:?}");
    // Every registration went with its wake: a third signal is kept.
    let three = signals.signal("shipment", &json!(3)).await.unwrap();
    assert_eq!(three, Signalled::Kept);

    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 2);
    let mut ended = ended.lock().unwrap().clone();
    ended.sort_by_key(|(id, _)| (id != &first, id.clone()));
    let by = |key: &str, n: i64| WaitOutcome::Signal {
        key: key.into(),
        payload: json!(n),
    };
    assert_eq!(
        ended,
        [(first, by("refund", 1)), (second, by("shipment", 2))]
    );
    assert_eq!(
        t.children("signals/shipment").await.len(),
        1,
        "the third, kept"
    );
}

#[tokio::test]
async fn a_wait_no_signal_ends_times_out_and_the_step_sees_it() {
    let t = TestQueue::new().await;
    let id = publish_one(&t, "approve").await;
    let ended = Arc::default();
    let handler = waiter(&["never"], Arc::clone(&ended));
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let due = due_of(&t, &id).await;
    // The reaper treats the timeout as a delay: it promotes the task when it passes.
    let reaped = reap::reap_at(&t.queue, &past(due)).await.unwrap();
    assert_eq!(reaped.promoted, 1);
    // The run that claims it judges at that moment too: one whose clock says the timeout
    // has not passed would put it back to wait until it does.
    let report = process::run_at(&t.queue, &handler, &options(1, 1), &past(due))
        .await
        .unwrap();
    assert_eq!(report.completed, 1);
    assert_eq!(*ended.lock().unwrap(), [(id, WaitOutcome::Timeout)]);
    // Its registration is left behind stale; the next signal finds and removes it, and is
    // kept.
    let kept = t.queue.signals().signal("never", &json!(1)).await.unwrap();
    assert_eq!(kept, Signalled::Kept);
    let left = t.children("signals/never").await;
    assert!(left.len() == 1 && left[0].starts_with("s-"), "{left:?}");
}

#[tokio::test]
async fn cancel_ends_a_sleeping_and_a_waiting_task() {
    let t = TestQueue::new().await;
    let sleeper = publish_one(&t, "sleep").await;
    let waiting = publish_one(&t, "wait").await;
    let handler = FnHandler(|task: Task| async move {
        match task.envelope.event_type.as_str() {
            "sleep" => task.steps.sleep(HOUR).await,
            _ => task.steps.wait_for(&["k"], HOUR).await.map(|_| ()),
        }
    });
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(report.suspended, 2);
    for id in [&sleeper, &waiting] {
        event_bridge::cancel::cancel(&t.queue, id).await.unwrap();
        assert_eq!(state_of(&t, id).await.0, Some(State::Dead), "{id}");
    }
    let dead = t.children("dead").await;
    assert_eq!(dead.len(), 2);
    assert_eq!(dead_letter(&t, &dead[0]).await.0, "cancelled");
    let kept = t.queue.signals().signal("k", &json!(1)).await.unwrap();
    assert_eq!(kept, Signalled::Kept, "a cancelled wait takes no signal");
}

#[tokio::test]
async fn a_resume_that_asks_for_another_step_goes_to_the_dead_letters_naming_both() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::ZERO).await;
    let name = t.publish(1).await.remove(0);
    let handler = FnHandler(|task: Task| async move {
        let first = if task.attempt() == 1 {
            "charge"
        } else {
            "refund"
        };
        task.steps.step(first, async { Ok(1) }).await?;
        // Even a handler that swallows the error fails loudly.
        let _ = task.steps.step("ship", async { Ok(2) }).await;
        Err(HandlerError::Retryable("once more".into()))
    });
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1);
    let (reason, _) = dead_letter(&t, &name).await;
    assert_eq!(
        reason,
        "non-deterministic resume at step 1: expected step \"charge\", got step \"refund\""
    );
}

#[tokio::test]
async fn a_record_over_its_cap_sends_the_task_to_the_dead_letters_naming_the_step() {
    let t = TestQueue::with(|c| c.checkpoint_max_bytes = 1024).await;
    let name = t.publish(1).await.remove(0);
    let handler = FnHandler(|task: Task| async move {
        task.steps
            .step("small", async { Ok("x".repeat(100)) })
            .await?;
        task.steps
            .step("rows", async { Ok("x".repeat(2000)) })
            .await?;
        Ok(())
    });
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1);
    let (reason, _) = dead_letter(&t, &name).await;
    assert!(
        reason.starts_with("checkpoint after step \"rows\" is ")
            && reason.ends_with("bytes, over the 1024-byte cap (CHECKPOINT_MAX_BYTES)"),
        "{reason}"
    );
}

#[tokio::test]
async fn patched_is_true_for_a_task_that_reaches_the_change_after_it_and_false_before() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::ZERO;
        c.handler_version = Some("v2".into());
    })
    .await;
    let name = t.publish(1).await.remove(0);
    // A task that ran its first step under the old code (no patch there) is resumed by the new.
    let old = FnHandler(|task: Task| async move {
        task.steps.step("a", async { Ok(1) }).await?;
        Err(HandlerError::Retryable("stopped".into()))
    });
    process::run(&t.queue, &old, &options(1, 1)).await.unwrap();
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let new = FnHandler(|task: Task| {
        let taken = taken.clone();
        async move {
            let patched = task.steps.patched("fee");
            task.steps.step("a", async { Ok(1) }).await?;
            taken
                .lock()
                .unwrap()
                .push((patched, task.steps.started_with()));
            Ok(())
        }
    });
    process::run(&t.queue, &new, &options(1, 1)).await.unwrap();
    let fresh = t.publish(1).await.remove(0);
    process::run(&t.queue, &new, &options(1, 1)).await.unwrap();
    let v2 = Some("v2".to_string());
    assert_eq!(*taken.lock().unwrap(), [(false, v2.clone()), (true, v2)]);
    assert!(
        t.children("tasks").await.is_empty(),
        "{name} and {fresh} done"
    );
}

#[tokio::test]
async fn the_command_sends_a_signal_and_stats_counts_the_wait_it_ends() {
    let t = TestQueue::new().await;
    let id = publish_one(&t, "approve").await;
    let ended = Arc::default();
    let handler = waiter(&["invoice/42"], Arc::clone(&ended));
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let stats = stdout(eb(&t, &["stats"], ""));
    assert!(stats.contains("0 sleeping, 1 awaiting a signal"), "{stats}");
    let shown = stdout(eb(&t, &["status", &id], ""));
    let waits = ": awaiting a signal on invoice/42 after 0 steps, times out in ";
    assert!(shown.contains(waits), "{shown}");

    let args = ["signal", "invoice/42", "--payload", r#"{"paid": true}"#];
    // The answer HTTP gives (`SignalAnswer` in docs/openapi.yaml).
    let sent: Value = serde_json::from_str(&stdout(eb(&t, &args, ""))).unwrap();
    assert_eq!(sent["signal"], "invoice/42", "{sent}");
    assert!(sent["delivered"]["task"].is_string(), "{sent}");
    let kept = stdout(eb(&t, &["signal", "invoice/42"], ""));
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept, json!({"signal": "invoice/42", "kept": true}));
    let bad = eb(&t, &["signal", "invoice/42", "--payload", "{paid"], "");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("signal invoice/42: --payload is not JSON"),
        "{err}"
    );

    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let paid = WaitOutcome::Signal {
        key: "invoice/42".into(),
        payload: json!({"paid": true}),
    };
    assert_eq!(*ended.lock().unwrap(), [(id, paid)]);
}

/// A handler of endless 50 ms steps that says when its first is done.
fn endless(
    first: Arc<tokio::sync::Notify>,
) -> FnHandler<impl Fn(Task) -> futures::future::BoxFuture<'static, Result<(), HandlerError>>> {
    FnHandler(move |task: Task| {
        let first = first.clone();
        Box::pin(async move {
            for i in 0u32.. {
                let step = async {
                    harness::real_time(Duration::from_millis(50), "a step's work").await;
                    Ok(i)
                };
                task.steps.step(&format!("part-{i}"), step).await?;
                // Once: a permit left by later steps would wake the next run's waiter early.
                if i == 0 {
                    first.notify_one();
                }
            }
            Ok(())
        }) as futures::future::BoxFuture<'static, _>
    })
}

#[tokio::test]
async fn a_running_resumable_task_stops_between_steps_when_cancelled_or_paused() {
    let t = TestQueue::new().await;
    let (cancelled, paused) = (publish_one(&t, "a").await, publish_one(&t, "b").await);
    let first = Arc::new(tokio::sync::Notify::new());
    let handler = endless(first.clone());
    for (id, event_type) in [(&cancelled, "a"), (&paused, "b")] {
        let once = options(1, 1);
        let run = process::run(&t.queue, &handler, &once);
        let stop = async {
            first.notified().await;
            match event_type {
                "a" => drop(event_bridge::cancel::cancel(&t.queue, id).await.unwrap()),
                _ => {
                    let target = event_bridge::features::pause::PauseTarget::Type("b".into());
                    t.queue.pauses().pause(&target).await.unwrap();
                }
            }
        };
        let (report, ()) = tokio::join!(run, stop);
        let report = report.unwrap();
        let (state, status) = state_of(&t, id).await;
        match event_type {
            "a" => {
                assert_eq!(
                    (report.cancelled, state),
                    (1, Some(State::Dead)),
                    "{status:?}"
                );
            }
            _ => {
                assert_eq!(
                    (report.suspended, state),
                    (1, Some(State::Pending)),
                    "{status:?}"
                );
                let Status::Pending { task } = status else {
                    unreachable!()
                };
                let done = task.envelope.unwrap().resume.unwrap().steps_done();
                assert!((1..200).contains(&done), "stopped after {done} steps");
            }
        }
    }
}

#[tokio::test]
async fn the_reaper_delivers_a_signal_its_signaller_left_and_deletes_one_kept_too_long() {
    let t = TestQueue::new().await;
    let id = publish_one(&t, "approve").await;
    let ended = Arc::default();
    let handler = waiter(&["half-way"], Arc::clone(&ended));
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    // A signaller that stopped between its write and its delivery, as another client would
    // write a signal (the two operations of the wire format), and a registration another
    // version wrote that this one cannot read.
    let key = format!("{}/signals/half-way", t.config.root);
    let raw = |path: String, data: &'static [u8], mode: zookeeper_client::CreateMode| {
        let raw = t.raw.clone();
        async move {
            let options = mode.with_acls(zookeeper_client::Acls::anyone_all());
            raw.create(&path, data, &options).await.unwrap();
        }
    };
    use zookeeper_client::CreateMode::{Persistent, PersistentSequential};
    raw(
        format!("{key}/w-0000000000001~task-0000000999"),
        b"junk",
        Persistent,
    )
    .await;
    raw(
        format!("{key}/s-"),
        br#"{"payload": 7}"#,
        PersistentSequential,
    )
    .await;
    t.raw.set_data(&key, b"", None).await.unwrap();
    // Left alone while its signaller may still deliver it; delivered once it has had a minute.
    let now = t.now().await;
    let reaped = reap::reap_at(&t.queue, &now).await.unwrap();
    assert_eq!(reaped.swept.get("signals"), Some(&0), "{reaped:?}");
    let grace = event_bridge::queue::SIGNALLER_GRACE_MS;
    let later = ZkTime::at(now.now_ms() + grace + 1);
    let reaped = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(reaped.swept.get("signals"), Some(&1), "{reaped:?}");
    assert_eq!(state_of(&t, &id).await.0, Some(State::Pending));
    assert!(
        t.children("signals/half-way").await.is_empty(),
        "junk registration removed"
    );
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let want = WaitOutcome::Signal {
        key: "half-way".into(),
        payload: json!(7),
    };
    assert_eq!(*ended.lock().unwrap(), [(id, want)]);

    // A signal nobody waits for is kept for SIGNAL_KEEP_MS, then deleted, and its key after.
    let kept = t.queue.signals().signal("nobody", &json!(1)).await.unwrap();
    assert_eq!(kept, Signalled::Kept);
    let keep = t.config.signal_keep.as_millis() as i64;
    let just_before = ZkTime::at(t.now().await.now_ms() + keep - 5_000);
    reap::reap_at(&t.queue, &just_before).await.unwrap();
    assert_eq!(t.children("signals/nobody").await.len(), 1, "kept");
    let after = ZkTime::at(t.now().await.now_ms() + keep + 1_000);
    reap::reap_at(&t.queue, &after).await.unwrap();
    assert!(t.children("signals/nobody").await.is_empty(), "deleted");
    reap::reap_at(&t.queue, &after).await.unwrap();
    let keys = t.children("signals").await;
    assert!(!keys.contains(&"nobody".to_string()), "{keys:?}");
}
