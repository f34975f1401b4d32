//! A signal's answer: it names the task that got this signal's payload, and says `kept` only
//! when no task waiting took it, however many signallers race; keys a signal cannot have are
//! refused naming their problem.

use std::sync::Arc;
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::queue::Signalled;
use event_bridge::{Envelope, Error, Task, process, reap};
use serde_json::{Value, json};

use harness::{TestQueue, options};

const HOUR: Duration = Duration::from_secs(3600);

/// Publishes `n` tasks that wait an hour for `key`, and runs them until they all wait.
async fn waiting_for(t: &TestQueue, key: &'static str, n: usize) {
    let envelopes: Vec<Envelope> = (0..n).map(|_| Envelope::new("wait", json!({}))).collect();
    t.queue.publish_many(&envelopes).await.unwrap();
    let handler =
        FnHandler(
            move |task: Task| async move { task.steps.wait_for(&[key], HOUR).await.map(drop) },
        );
    let report = process::run(&t.queue, &handler, &options(n as u32, 4))
        .await
        .unwrap();
    assert_eq!(report.suspended, n as u32, "{report:?}");
}

/// The payload the wait of task `name` (pending in `tasks/`) ended with.
async fn payload_of(t: &TestQueue, name: &str) -> Value {
    let task = t.read_json(&format!("tasks/{name}")).await;
    let wait = task["resume"]["done"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(wait["outcome"]["by"], "signal", "{task}");
    wait["outcome"]["payload"].clone()
}

/// A signal sent while an older one waits to be delivered (its signaller stopped between its
/// two writes) goes to the task its turn gives it, and its answer names that task: the one
/// that got its payload. (Before the fix, the signaller delivered both and answered with the
/// task that got the older signal's payload.) The reaper delivers the older one once its
/// signaller has had a minute.
#[tokio::test]
async fn a_signal_answer_names_the_task_that_got_its_payload() {
    let t = TestQueue::new().await;
    waiting_for(&t, "k", 2).await;
    // The older signal, written as another client writes one, its delivery left undone.
    let key = format!("{}/signals/k", t.config.root);
    let options = zookeeper_client::CreateMode::PersistentSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let left = format!("{key}/s-");
    t.raw
        .create(&left, br#"{"payload": 0}"#, &options)
        .await
        .unwrap();
    t.raw.set_data(&key, b"", None).await.unwrap();

    let sent = t.queue.signals().signal("k", &json!(1)).await.unwrap();
    let Signalled::Delivered { task } = sent else {
        panic!("two tasks wait: {sent:?}")
    };
    assert_eq!(
        payload_of(&t, &task).await,
        json!(1),
        "the task named got it"
    );

    let later = ZkTime::at(t.now().await.now_ms() + 61_000);
    let reaped = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(reaped.swept.get("signals"), Some(&1), "{reaped:?}");
    let tasks = t.children("tasks").await;
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    let other = tasks.iter().find(|n| **n != task).unwrap();
    assert_eq!(payload_of(&t, other).await, json!(0));
}

/// Six signallers, each on its own session, signal one key at once while twelve tasks wait
/// for it: each answer names a task that got that signaller's payload, no answer is `kept`,
/// and every payload reached one task. (Before the fix, one signaller's delivery handed out
/// the others' signals too: answers named tasks that got another payload, and `kept` was
/// answered while tasks waited.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_signallers_each_get_the_answer_of_their_own_signal() {
    const SIGNALLERS: i64 = 6;
    let t = TestQueue::new().await;
    waiting_for(&t, "race", 12).await;
    let mut signallers = Vec::new();
    for i in 0..SIGNALLERS {
        signallers.push(t.consumer(&format!("signaller-{i}")).await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(SIGNALLERS as usize));
    let sends = signallers.into_iter().enumerate().map(|(i, queue)| {
        let start = start.clone();
        tokio::spawn(async move {
            start.wait().await;
            let sent = queue.signals().signal("race", &json!(i)).await.unwrap();
            (i as i64, sent)
        })
    });
    let answers = futures::future::join_all(sends).await;
    let mut got = Vec::new();
    for answer in answers {
        let (i, sent) = answer.unwrap();
        let Signalled::Delivered { task } = sent else {
            panic!("signal {i} answered {sent:?} while tasks waited")
        };
        assert_eq!(payload_of(&t, &task).await, json!(i), "signal {i}: {task}");
        got.push(task);
    }
    got.sort();
    got.dedup();
    assert_eq!(got.len(), SIGNALLERS as usize, "each to a task of its own");
    assert!(
        t.children("signals/race")
            .await
            .iter()
            .all(|c| !c.starts_with("s-"))
    );
}

/// A key with a control character is refused, naming the problem; nothing is sent.
#[tokio::test]
async fn a_signal_key_with_a_control_character_is_refused() {
    let t = TestQueue::new().await;
    for key in ["order\n7", "order\u{1b}[31m7", "order\t7"] {
        let refused = t.queue.signals().signal(key, &json!(1)).await;
        let Err(Error::Signal { problem, .. }) = refused else {
            panic!("{key:?} accepted: {refused:?}")
        };
        assert!(problem.contains("control character"), "{key:?}: {problem}");
    }
    let signals = format!("{}/signals", t.config.root);
    let made = t.raw.list_children(&signals).await.unwrap_or_default();
    assert!(made.is_empty(), "{made:?}");
}
