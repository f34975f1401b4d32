//! The long-running worker: watches, session expiry, graceful shutdown.

use std::time::Duration;

use event_bridge::handler::FnHandler;
use event_bridge::worker::Worker;
use event_bridge::{Config, Handler, Task};
use tokio::sync::watch;

use harness::{Proxy, Recorder, TestQueue, eventually};

/// Starts a worker on the test's chroot; returns its stop switch and its join handle.
fn start<H: Handler + 'static>(
    worker: Worker<H>,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<event_bridge::worker::WorkerReport>,
) {
    let (stop, stopped) = watch::channel(false);
    let join = tokio::spawn(async move { worker.run(stopped).await.expect("worker") });
    (stop, join)
}

/// Awaits `f` for at most 30 s (a hang guard, not a speed claim).
async fn within<F: std::future::IntoFuture>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("gave up waiting after 30 s")
}

/// No timer to fall back on: what these tests see, the watches did.
const NO_TIMER: Duration = Duration::from_secs(3_600);

/// A worker on `config` whose only wake-ups are ZooKeeper's watches (and its stop).
fn watching<H: Handler>(config: Config, handler: H, concurrency: usize) -> Worker<H> {
    Worker::new(config, handler, concurrency).with_idle_check(NO_TIMER)
}

fn config(t: &TestQueue) -> Config {
    let mut config = t.config.clone();
    config.deadline_margin = Duration::from_millis(500);
    config
}

#[tokio::test]
async fn the_worker_picks_up_tasks_published_after_it_started() {
    let t = TestQueue::new().await;
    let recorder = Recorder::default();
    let (stop, join) = start(watching(config(&t), recorder.clone(), 4));
    let names = t.publish(3).await;
    eventually("three tasks processed", || async { recorder.count() == 3 }).await;
    let more = t.publish(2).await;
    eventually("two more processed", || async { recorder.count() == 5 }).await;
    stop.send(true).unwrap();
    let report = within(join).await.unwrap();
    assert_eq!((report.completed, report.sessions), (5, 1));
    let mut seen = recorder.names();
    seen.sort();
    assert_eq!(seen, [names, more].concat());
}

#[tokio::test]
async fn the_worker_recovers_when_its_session_expires() {
    let t = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let chroot = t.config.zookeeper.split_once('/').map(|(_, c)| c).unwrap();
    let mut through_proxy = config(&t);
    through_proxy.zookeeper = format!("{}/{chroot}", proxy.address);
    // The shortest session the server grants (two ticks).
    through_proxy.session_timeout = Duration::from_millis(4_000);
    through_proxy.connect_timeout = Duration::from_millis(1_000);
    let recorder = Recorder::default();
    let worker = watching(through_proxy, recorder.clone(), 2);
    let mut sessions = worker.sessions();
    let (stop, join) = start(worker);
    let first = within(sessions.wait_for(Option::is_some))
        .await
        .unwrap()
        .clone()
        .unwrap();
    t.publish(1).await;
    eventually("first task processed", || async { recorder.count() == 1 }).await;

    // A partition, and the session ends on the server meanwhile (as it would once the
    // partition outlasted the session timeout): the worker learns it when the link is back.
    proxy.set_cut(true);
    harness::end_session(&first).await;
    proxy.set_cut(false);
    let renewed = sessions.wait_for(|s| s.as_ref().is_some_and(|s| s.id() != first.id()));
    within(renewed).await.unwrap();

    t.publish(1).await;
    eventually("a task published after the expiry is processed", || async {
        recorder.count() == 2
    })
    .await;
    stop.send(true).unwrap();
    assert_eq!(within(join).await.unwrap().sessions, 2);
}

#[tokio::test]
async fn a_stopped_worker_releases_what_it_could_not_finish() {
    let t = TestQueue::new().await;
    // Never ends by itself.
    let slow = FnHandler(|_task: Task| async {
        std::future::pending::<()>().await;
        Ok(())
    });
    let (stop, join) = start(watching(config(&t), slow, 2));
    t.publish(2).await;
    eventually("both tasks claimed", || async {
        t.children("leases").await.len() == 2
    })
    .await;
    stop.send(true).unwrap();
    let report = within(join).await.unwrap();
    assert_eq!(report.completed, 0);
    assert!(
        t.children("leases").await.is_empty(),
        "in-flight claims released"
    );
    for name in t.children("tasks").await {
        assert_eq!(t.read_json(&format!("tasks/{name}")).await["attempts"], 0);
    }
}

#[tokio::test]
async fn a_task_published_while_a_slow_one_runs_does_not_wait_for_it() {
    let t = TestQueue::new().await;
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let done = Recorder::default();
    let (gate, seen) = (release.clone(), done.clone());
    let handler = FnHandler(move |task: Task| {
        let (gate, seen) = (gate.clone(), seen.clone());
        async move {
            if task.envelope.payload["slow"] == true {
                gate.notified().await;
            }
            seen.handle(&task).await
        }
    });
    let (stop, join) = start(watching(config(&t), handler, 4));
    let slow = t
        .queue
        .publish(&event_bridge::Envelope::new(
            "t",
            serde_json::json!({"slow": true}),
        ))
        .await
        .unwrap();
    eventually("the slow task is running", || async {
        t.children("leases").await == [slow.clone()]
    })
    .await;
    // One task after the other: each must be seen while the slow one still runs, not only the
    // first change of a drain.
    let mut fast = Vec::new();
    for _ in 0..3 {
        fast.extend(t.publish(1).await);
        eventually(
            "each fast task ran while the slow one still runs",
            || async { done.names() == fast },
        )
        .await;
    }
    release.notify_one();
    eventually("the slow task finished", || async { done.count() == 4 }).await;
    stop.send(true).unwrap();
    assert_eq!(within(join).await.unwrap().completed, 4);
}

/// A worker's run lasts as long as tasks keep coming: a pause given meanwhile holds the next
/// tasks of that type, and `resume` lets them run.
#[tokio::test]
async fn a_worker_honours_a_pause_given_while_it_runs() {
    use event_bridge::Envelope;
    use event_bridge::features::pause::PauseTarget;
    use serde_json::json;
    let t = TestQueue::new().await;
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let done = Recorder::default();
    let (gate, seen) = (release.clone(), done.clone());
    let handler = FnHandler(move |task: Task| {
        let (gate, seen) = (gate.clone(), seen.clone());
        async move {
            if task.envelope.payload["slow"] == true {
                gate.notified().await;
            }
            seen.handle(&task).await
        }
    });
    let (stop, join) = start(watching(config(&t), handler, 4));
    let slow = t
        .queue
        .publish(&Envelope::new("sms", json!({"slow": true})))
        .await
        .unwrap();
    eventually("the slow task runs", || async {
        t.children("leases").await == [slow.clone()]
    })
    .await;
    let email = PauseTarget::Type("email".into());
    t.queue.pauses().pause(&email).await.unwrap();
    let held = t
        .queue
        .publish(&Envelope::new("email", json!({})))
        .await
        .unwrap();
    let sms = t
        .queue
        .publish(&Envelope::new("sms", json!({})))
        .await
        .unwrap();
    eventually("the sms task ran", || async {
        done.names() == [sms.clone()]
    })
    .await;
    assert!(
        t.children("tasks").await.contains(&held),
        "the email task waits"
    );
    release.notify_one();
    eventually("the slow task finished", || async { done.count() == 2 }).await;
    t.queue.pauses().unpause(&email).await.unwrap();
    // Resuming changes nothing under tasks/: the worker's watch on `paused` wakes it.
    let next = t.publish(1).await.remove(0);
    eventually("the email task ran once resumed", || async {
        done.names().contains(&held) && done.names().contains(&next)
    })
    .await;
    stop.send(true).unwrap();
    assert_eq!(within(join).await.unwrap().completed, 4);
}

/// A resume reaches an idle worker by itself: its drain passed the paused task over and
/// ended, and nothing under the lanes changes after the resume. (Before the fix, the worker
/// waited for its next publish or its idle timer: with the timer off, for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_wakes_an_idle_worker_that_passed_the_task_over() {
    use event_bridge::Envelope;
    use event_bridge::features::pause::PauseTarget;
    use serde_json::json;
    let t = TestQueue::new().await;
    let done = Recorder::default();
    let email = PauseTarget::Type("email".into());
    t.queue.pauses().pause(&email).await.unwrap();
    let (stop, join) = start(watching(config(&t), done.clone(), 4));
    let held = t
        .queue
        .publish(&Envelope::new("email", json!({})))
        .await
        .unwrap();
    // Behind the paused task in its lane: once it ran, a drain has passed the paused one over.
    let sms = t
        .queue
        .publish(&Envelope::new("sms", json!({})))
        .await
        .unwrap();
    eventually("the sms task ran", || async {
        done.names() == [sms.clone()]
    })
    .await;
    let why = "the worker ends its last drain and waits: nothing it exposes says when it idles";
    harness::real_time(Duration::from_secs(2), why).await;
    t.queue.pauses().unpause(&email).await.unwrap();
    eventually(
        "the email task ran once resumed, with nothing else published",
        || async { done.names().contains(&held) },
    )
    .await;
    stop.send(true).unwrap();
    assert_eq!(within(join).await.unwrap().completed, 2);
}

/// While one slow task keeps the worker's drain going (as steady traffic does), a task whose
/// first try failed comes back when its backoff ends, and a task whose consumer died is
/// freed when its lease expires: neither waits for the drain to end. (Before the fix, both
/// waited for the slow task: due retries were promoted and leases reaped only between
/// drains.) The waits are hang guards; the slow task is released only at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_worker_still_brings_back_retries_and_frees_a_dead_consumers_task() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::from_millis(100);
        c.backoff_max = Duration::from_millis(100);
        // The production minimum: the reaper frees the dead consumer's task after it.
        c.lease_timeout = Duration::from_secs(10);
    })
    .await;
    let envelope = |kind: &str| event_bridge::Envelope::new(kind, serde_json::json!({}));
    let orphan = t.queue.publish_many(&[envelope("orphan")]).await.unwrap();
    // A consumer claims it and dies: its lease stays until it expires.
    let dying = t.consumer("dying").await;
    let now = t.now().await;
    let claimed = dying.claim(&orphan[0], &now).await.unwrap();
    assert!(matches!(
        claimed,
        event_bridge::queue::TaskOutcome::Claimed(_)
    ));
    drop(dying);
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let attempts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = {
        let (release, attempts) = (release.clone(), attempts.clone());
        FnHandler(move |task: Task| {
            let (release, attempts) = (release.clone(), attempts.clone());
            async move {
                let kind = task.envelope.event_type.clone();
                attempts
                    .lock()
                    .unwrap()
                    .push((kind.clone(), task.attempt()));
                match kind.as_str() {
                    "slow" => release.notified().await,
                    "flaky" if task.attempt() == 1 => {
                        return Err(event_bridge::HandlerError::Retryable("first try".into()));
                    }
                    _ => {}
                }
                Ok(())
            }
        })
    };
    let (stop, join) = start(watching(config(&t), handler, 4));
    t.queue.publish_many(&[envelope("slow")]).await.unwrap();
    let seen = |kind: &'static str, attempt: u32| {
        let attempts = attempts.clone();
        move || {
            let attempts = attempts.lock().unwrap();
            attempts.iter().any(|(k, a)| k == kind && *a == attempt)
        }
    };
    let slow_running = seen("slow", 1);
    eventually("the slow task running", || async { slow_running() }).await;
    t.queue.publish_many(&[envelope("flaky")]).await.unwrap();
    let retried = seen("flaky", 2);
    eventually("the retry delivered while the slow task runs", || async {
        retried()
    })
    .await;
    let freed = seen("orphan", 2);
    eventually("the dead consumer's task run again", || async { freed() }).await;
    release.notify_one();
    stop.send(true).unwrap();
    let report = within(join).await.unwrap();
    assert_eq!(report.reaped, 1, "{report:?}");
    assert!(t.children("tasks").await.is_empty());
}

/// The grouped tasks of `kinds` (event types), published in order in group `g`.
fn grouped(kinds: &[&str]) -> Vec<event_bridge::Envelope> {
    (kinds.iter())
        .map(|kind| {
            let mut envelope = event_bridge::Envelope::new(*kind, serde_json::json!({}));
            envelope.group = Some("g".into());
            envelope
        })
        .collect()
}

fn types(recorder: &Recorder) -> Vec<String> {
    (recorder.seen.lock().unwrap().iter())
        .map(|task| task.envelope.event_type.clone())
        .collect()
}

/// A grouped debounced task falls due while a worker waits with nothing in its lanes changing:
/// the worker's upkeep finds it due and wakes the lane, and its place is taken, with no timer
/// to fall back on; the group's next task follows.
#[tokio::test]
async fn a_worker_runs_a_grouped_debounced_task_when_it_falls_due() {
    let t = TestQueue::new().await;
    let mut envelopes = grouped(&["debounced", "next"]);
    envelopes[0].debounce = Some(event_bridge::task::Debounce {
        key: "k".into(),
        period_ms: 300,
        max_ms: None,
    });
    t.queue.publish_many(&envelopes).await.unwrap();
    let recorder = Recorder::default();
    let (stop, join) = start(watching(config(&t), recorder.clone(), 2));
    eventually("both tasks", || async { recorder.count() == 2 }).await;
    assert_eq!(types(&recorder), ["debounced", "next"]);
    stop.send(true).unwrap();
    within(join).await.unwrap();
}

/// A grouped child whose parent's settlement was left to the reaper's sweep (its consumer died
/// after the completion, before seeing to the children): the sweep readies the child and wakes
/// its lane, and the waiting worker runs it, then the rest of its group.
#[tokio::test]
async fn a_worker_runs_a_grouped_child_the_sweep_readies() {
    let t = TestQueue::new().await;
    let parent = event_bridge::Envelope::new("parent", serde_json::json!({}));
    let mut envelopes = grouped(&["child", "next"]);
    envelopes[0].after = vec![parent.id.clone()];
    let names = (t.queue.publish_many(std::slice::from_ref(&parent)).await).unwrap();
    t.queue.publish_many(&envelopes).await.unwrap();
    // The parent completes and its consumer dies before its children: what that leaves, by hand.
    // Claimed before the worker starts, which would otherwise race for it.
    let other = t.consumer("other").await;
    let held = match other.claim(&names[0], &t.now().await).await.unwrap() {
        event_bridge::queue::TaskOutcome::Claimed(lease) => *lease,
        outcome => panic!("{outcome:?}"),
    };
    let recorder = Recorder::default();
    let (stop, join) = start(watching(config(&t), recorder.clone(), 2));
    let root = &t.config.root;
    let marker = format!("{root}/dependents/{}", parent.id);
    let settled = serde_json::json!({"settled": "completed", "task": names[0]}).to_string();
    t.raw
        .set_data(&marker, settled.as_bytes(), None)
        .await
        .unwrap();
    t.raw
        .delete(&format!("{root}/leases/{}", names[0]), None)
        .await
        .unwrap();
    t.raw
        .delete(&format!("{root}/tasks/{}", names[0]), None)
        .await
        .unwrap();
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        recorder.count(),
        0,
        "the child waits for its parent's settlement"
    );
    let swept = event_bridge::features::dependencies::settled_markers(&t.queue);
    assert_eq!(swept.await.unwrap(), 1);
    eventually("the child and the next", || async { recorder.count() == 2 }).await;
    assert_eq!(types(&recorder), ["child", "next"]);
    stop.send(true).unwrap();
    within(join).await.unwrap();
}
