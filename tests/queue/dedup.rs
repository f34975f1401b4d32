//! Deduplicated publish: a key that is pending, held, or completed within the window creates
//! nothing and gives back the task that has it; after the window, or once its task went to
//! the dead letters, the key makes a new task.

use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::queue::{KeyState, Published, Settled, TaskOutcome};
use event_bridge::{Envelope, HandlerError, Task, reap};
use serde_json::json;

use harness::{Proxy, Recorder, TestQueue, run};

fn keyed(key: &str) -> Envelope {
    let mut envelope = Envelope::new("order.paid", json!({ "key": key }));
    envelope.idempotency_key = Some(key.to_string());
    envelope
}

async fn publish(t: &TestQueue, key: &str) -> Published {
    t.queue.publish_all(&[keyed(key)]).await.unwrap().remove(0)
}

/// Moves the completion of `key`'s task `ms` back, as if that long had passed since: a key's
/// window is judged by the completing machine's clock against the time its record keeps.
async fn completed_earlier(t: &TestQueue, key: &str, ms: i64) {
    let path = format!("keys/{}", event_bridge::layout::encode_segment(key));
    let mut record = t.read_json(&path).await;
    let at = record["completed_at"].as_i64().expect("a completed key");
    record["completed_at"] = json!(at - ms);
    let full = format!("{}/{path}", t.config.root);
    let data = serde_json::to_vec(&record).unwrap();
    t.raw
        .set_data(&full, &data, None)
        .await
        .expect("rewrite the key");
}

#[tokio::test]
async fn two_producers_racing_over_500_keys_make_exactly_500_tasks() {
    let t = TestQueue::new().await;
    let (a, b) = (
        t.consumer("producer-a").await,
        t.consumer("producer-b").await,
    );
    let batch = |offset: usize| -> Vec<Envelope> {
        (0..1_000)
            .map(|i| keyed(&format!("order-{}", (i + offset) % 500)))
            .collect()
    };
    let (left, right) = (batch(0), batch(250));
    let (left, right) = tokio::join!(a.publish_all(&left), b.publish_all(&right));
    let published: Vec<Published> = left.unwrap().into_iter().chain(right.unwrap()).collect();
    let created = published
        .iter()
        .filter(|p| matches!(p, Published::Created { .. }))
        .count();
    assert_eq!(created, 500);
    assert_eq!(t.children("tasks").await.len(), 500);
    assert_eq!(t.children("keys").await.len(), 500);
    // Every duplicate names the task that has its key.
    let tasks = t.children("tasks").await;
    for p in &published {
        let task = p.task().expect("a name").to_string();
        assert!(tasks.contains(&task), "{p:?}");
    }
}

#[tokio::test]
async fn a_duplicate_says_where_the_task_is_and_completion_keeps_the_key_for_the_window() {
    let t = TestQueue::new().await;
    let Published::Created { id, task } = publish(&t, "k1").await else {
        panic!("created");
    };
    let again = publish(&t, "k1").await;
    assert_eq!(
        again,
        Published::Existing {
            id: id.clone(),
            task: Some(task.clone()),
            state: KeyState::Pending
        }
    );
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 1);
    let Published::Existing { state, .. } = publish(&t, "k1").await else {
        panic!("still taken after completion");
    };
    assert_eq!(state, KeyState::Completed);
    assert!(t.children("tasks").await.is_empty(), "nothing created");
    // The reaper leaves a key whose window has not passed.
    let report = reap::reap(&t.queue).await.unwrap();
    assert_eq!(report.swept.get("idempotency_keys"), Some(&0), "{report:?}");
    assert_eq!(t.children("keys").await.len(), 1);
}

#[tokio::test]
async fn after_the_window_the_key_makes_a_new_task() {
    let t = TestQueue::with(|c| c.dedup_window = Duration::from_millis(1_000)).await;
    publish(&t, "k2").await;
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 1);
    assert!(matches!(
        publish(&t, "k2").await,
        Published::Existing { .. }
    ));
    completed_earlier(&t, "k2", 1_100).await;
    let Published::Created { task, .. } = publish(&t, "k2").await else {
        panic!("the window passed: a new task");
    };
    assert_eq!(t.children("tasks").await, [task]);
}

#[tokio::test]
async fn a_key_whose_task_went_to_the_dead_letters_can_be_published_again() {
    let t = TestQueue::new().await;
    let Published::Created { task: first, .. } = publish(&t, "k3").await else {
        panic!("created");
    };
    let failing = FnHandler(|_t: Task| async { Err(HandlerError::Permanent("bad order".into())) });
    assert_eq!(run(&t.queue, &failing, 10).await.dead_lettered, 1);
    assert_eq!(t.children("dead").await, std::slice::from_ref(&first));
    assert!(
        t.children("keys").await.is_empty(),
        "the key went with its task"
    );
    let Published::Created { task, .. } = publish(&t, "k3").await else {
        panic!("a new task");
    };
    assert_ne!(task, first);
}

#[tokio::test]
async fn a_cancelled_keyed_task_frees_its_key() {
    let t = TestQueue::new().await;
    let Published::Created { task, .. } = publish(&t, "k4").await else {
        panic!("created");
    };
    event_bridge::cancel::cancel(&t.queue, &task).await.unwrap();
    assert!(t.children("keys").await.is_empty());
    assert!(matches!(publish(&t, "k4").await, Published::Created { .. }));
}

#[tokio::test]
async fn the_reaper_deletes_keys_past_their_window_and_only_those() {
    let t = TestQueue::with(|c| c.dedup_window = Duration::from_millis(1_000)).await;
    publish(&t, "old").await;
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 1);
    completed_earlier(&t, "old", 1_100).await;
    publish(&t, "pending").await;
    // Its expiry entry is filed by when it expires: due for a reaper judging as much later.
    let later = ZkTime::at(t.now().await.now_ms() + 1_100);
    let report = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(report.swept.get("idempotency_keys"), Some(&1), "{report:?}");
    assert_eq!(t.children("keys").await, ["pending"], "a pending key stays");
    assert!(
        t.children("keys-expiry").await.is_empty(),
        "its bucket is gone"
    );
}

/// A key published again after its window is filed for expiry in the bucket its first task's
/// completion already filed it in (both expire within the same ten minutes): the second
/// completion still marks it completed, so it expires as the first one did.
#[tokio::test]
async fn a_key_taken_again_after_its_window_is_marked_completed_by_its_second_task() {
    let t = TestQueue::with(|c| c.dedup_window = Duration::from_millis(1_000)).await;
    publish(&t, "k9").await;
    let recorder = Recorder::default();
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 1);
    completed_earlier(&t, "k9", 1_100).await;
    let Published::Created { task, .. } = publish(&t, "k9").await else {
        panic!("the window passed: a new task");
    };
    assert_eq!(run(&t.queue, &recorder, 10).await.completed, 1);
    let key = t.read_json("keys/k9").await;
    assert_eq!(key["task"], json!(task));
    assert!(
        key["completed_at"].is_i64(),
        "the second completion marks the key completed: {key}"
    );
}

#[tokio::test]
async fn a_batch_answers_taken_keys_and_creates_the_rest_in_one_go() {
    let t = TestQueue::new().await;
    let first = publish(&t, "k-1").await;
    let batch = [
        keyed("k-1"),
        keyed("k-2"),
        Envelope::new("order.paid", json!({})),
        keyed("k-2"),
    ];
    let answers = t
        .queue
        .all_or_nothing()
        .publish_batch(&batch)
        .await
        .unwrap();
    assert!(
        matches!(&answers[0], Published::Existing { task, .. } if task.as_deref() == first.task()),
        "{answers:?}"
    );
    let Published::Created { task: k2, .. } = &answers[1] else {
        panic!("{answers:?}")
    };
    assert!(matches!(&answers[2], Published::Created { .. }));
    assert!(
        matches!(&answers[3], Published::Existing { task: Some(t), state: KeyState::Pending, .. } if t == k2),
        "a key given twice in one batch makes one task: {answers:?}"
    );
    assert_eq!(t.children("tasks").await.len(), 3);
    let key = t.read_json("keys/k-2").await;
    assert_eq!(&key["task"], k2, "the key names its task");
}

#[tokio::test]
async fn a_racing_batch_and_producer_over_the_same_keys_make_one_task_per_key() {
    let t = TestQueue::new().await;
    let other = t.consumer("other").await;
    let keys: Vec<Envelope> = (0..100).map(|i| keyed(&format!("r-{i}"))).collect();
    let (batch, single) = tokio::join!(
        t.queue.all_or_nothing().publish_batch(&keys),
        other.publish_all(&keys)
    );
    let (batch, single) = (batch.unwrap(), single.unwrap());
    let created = batch
        .iter()
        .chain(&single)
        .filter(|p| matches!(p, Published::Created { .. }))
        .count();
    assert_eq!(created, 100);
    assert_eq!(t.children("tasks").await.len(), 100);
}

type Outcome = std::future::Ready<Result<(), HandlerError>>;

/// Fails tasks of type `bad` for good (as a route table without their type would), runs the
/// rest.
fn fails_bad() -> FnHandler<fn(Task) -> Outcome> {
    fn handle(task: Task) -> Outcome {
        std::future::ready(match task.envelope.event_type.as_str() {
            "bad" => Err(HandlerError::Permanent("no route".into())),
            _ => Ok(()),
        })
    }
    FnHandler(handle)
}

/// A task of `event_type` with key `key`, due in an hour when `later`.
async fn publish_typed(t: &TestQueue, event_type: &str, key: &str, later: bool) -> String {
    let mut envelope = keyed(key);
    envelope.event_type = event_type.into();
    if later {
        envelope.retry_at = Some(t.now().await.now_ms() + 3_600_000);
    }
    let published = t.queue.publish_all(&[envelope]).await.unwrap().remove(0);
    let Published::Created { task, .. } = published else {
        panic!("created: {published:?}");
    };
    task
}

/// `bad` with key K dies (the key is free), `ok` with K waits an hour (it owns K), then the
/// dead one is redriven: its key belongs to the waiting task.
async fn dead_letter_whose_key_another_task_took(t: &TestQueue) -> (String, String) {
    let dead = publish_typed(t, "bad", "K", false).await;
    assert_eq!(run(&t.queue, &fails_bad(), 10).await.dead_lettered, 1);
    let owner = publish_typed(t, "ok", "K", true).await;
    (dead, owner)
}

#[tokio::test]
async fn a_redriven_task_that_dies_again_leaves_the_key_of_the_task_that_took_it() {
    let t = TestQueue::new().await;
    let (dead, owner) = dead_letter_whose_key_another_task_took(&t).await;
    let report = event_bridge::dead::redrive(&t.queue, std::slice::from_ref(&dead))
        .await
        .unwrap();
    run(&t.queue, &fails_bad(), 10).await;
    let again = publish(&t, "K").await;
    assert!(
        matches!(&again, Published::Existing { task: Some(task), state: KeyState::Waiting, .. } if *task == owner),
        "K still belongs to the waiting task: {again:?}"
    );
    assert!(t.children("tasks").await.is_empty(), "no second task for K");
    assert!(report.redriven.is_empty(), "{report:?}");
    let [skipped] = &report.skipped[..] else {
        panic!("{report:?}")
    };
    assert_eq!(skipped.dead, dead);
    assert!(
        skipped.reason.contains("idempotency key") && skipped.reason.contains(&owner),
        "{}",
        skipped.reason
    );
    assert_eq!(t.children("dead").await, [dead], "the letter stays");
}

#[tokio::test]
async fn a_redriven_task_that_completes_leaves_the_key_of_the_task_that_took_it() {
    let t = TestQueue::new().await;
    let (dead, owner) = dead_letter_whose_key_another_task_took(&t).await;
    event_bridge::dead::redrive(&t.queue, &[dead])
        .await
        .unwrap();
    let recorder = Recorder::default();
    run(&t.queue, &recorder, 10).await;
    let key = t.read_json("keys/K").await;
    assert_eq!(key["task"], owner.as_str(), "{key}");
    assert!(key.get("completed_at").is_none(), "{key}");
    assert!(
        matches!(publish(&t, "K").await, Published::Existing { task: Some(task), state: KeyState::Waiting, .. } if task == owner)
    );
}

#[tokio::test]
async fn a_redrive_takes_a_free_key_again() {
    let t = TestQueue::new().await;
    let dead = publish_typed(&t, "bad", "K", false).await;
    assert_eq!(run(&t.queue, &fails_bad(), 10).await.dead_lettered, 1);
    let report = event_bridge::dead::redrive(&t.queue, &[dead])
        .await
        .unwrap();
    let [redriven] = &report.redriven[..] else {
        panic!("{report:?}")
    };
    let again = publish(&t, "K").await;
    assert!(
        matches!(&again, Published::Existing { task: Some(task), state: KeyState::Pending, .. } if *task == redriven.task),
        "the redriven task has K: {again:?}"
    );
    assert_eq!(redriven.idempotency_key.as_deref(), Some("K"), "{report:?}");
    assert_eq!(
        t.children("tasks").await,
        std::slice::from_ref(&redriven.task)
    );
    // It dies again: the key goes with it, as it went the first time.
    assert_eq!(run(&t.queue, &fails_bad(), 10).await.dead_lettered, 1);
    assert!(t.children("keys").await.is_empty());
}

/// A task that carries a key it does not own (an earlier version's redrive made such tasks):
/// neither its completion nor its burial, held or not, touches the owner's key.
#[tokio::test]
async fn settling_a_task_whose_key_is_another_tasks_leaves_the_key_alone() {
    let t = TestQueue::new().await;
    let owner = publish_typed(&t, "ok", "K", true).await;
    let before = t.read_json("keys/K").await;
    let stray = |event_type: &str, attempts: u32| {
        let mut envelope = keyed("K");
        envelope.event_type = event_type.into();
        envelope.keyed = true;
        envelope.attempts = attempts;
        envelope.to_bytes().unwrap()
    };
    for body in [stray("ok", 0), stray("bad", 0), stray("ok", 5)] {
        t.queue.publish_raw(&body).await.unwrap();
    }
    let report = run(&t.queue, &fails_bad(), 10).await;
    assert_eq!(
        (report.completed, report.dead_lettered),
        (1, 2),
        "{report:?}"
    );
    assert_eq!(
        t.read_json("keys/K").await,
        before,
        "the owner's key as it was"
    );
    assert!(
        matches!(publish(&t, "K").await, Published::Existing { task: Some(task), state: KeyState::Waiting, .. } if task == owner)
    );
}

/// A consumer completes a keyed task whose publisher has not yet written the task's name into
/// the key: the completion reads the key at version 0, the naming write lands, and the
/// completion's multi-op fails at the key's version. The key is still the task's (only the
/// naming write changes a key its task holds), so it is written again at version 1 and ends
/// completed, naming the task.
#[tokio::test]
async fn a_completion_that_read_the_key_before_its_task_was_named_still_marks_it() {
    let t = TestQueue::new().await;
    let (publishing, consuming) = (Proxy::start().await, Proxy::start().await);
    let open = |proxy: &Proxy, name: &'static str| {
        event_bridge::Session::open(proxy.config_for(&t), name, None)
    };
    let producer = open(&publishing, "producer").await.unwrap().queue();
    let consumer = open(&consuming, "consumer").await.unwrap().queue();
    publishing.hold_set_data_of("/keys/k10");
    let publish = tokio::spawn(async move { producer.publish_all(&[keyed("k10")]).await });
    publishing.holding().await;
    let name = t.children("tasks").await.remove(0);
    let now = t.now().await;
    let TaskOutcome::Claimed(lease) = consumer.claim(&name, &now).await.unwrap() else {
        panic!("claimed");
    };
    consuming.hold_next_multi();
    let completing = tokio::spawn(async move { consumer.complete(*lease).await });
    // The key read at version 0, the completion's multi-op held on the way.
    consuming.holding().await;
    publishing.release();
    let published = publish.await.unwrap().unwrap().remove(0);
    assert!(
        matches!(published, Published::Created { .. }),
        "{published:?}"
    );
    consuming.release();
    assert_eq!(completing.await.unwrap().unwrap(), Settled::Done);
    let key = t.read_json("keys/k10").await;
    assert_eq!(key["task"], json!(name));
    assert!(
        key["completed_at"].is_i64(),
        "marked completed at version 1: {key}"
    );
}
