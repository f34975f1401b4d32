//! A bulk publish packs its creates into multi-ops (a window of 512 items or more): a multi-op
//! is all or nothing, so an item that cannot be created with the others (its idempotency key
//! taken) is answered on its own and the others land; runs are cut at what one request
//! carries, so a large task in the middle lands with the rest; every item is answered once, in
//! order, and each task is one znode of its lane, as before.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};

use event_bridge::Envelope;
use event_bridge::queue::{Outcome, PublishOptions, Published};
use serde_json::{Value, json};

use harness::{TestQueue, binary};

/// Items of each publish: more than a window needs to be packed.
const ITEMS: usize = 600;

/// `ITEMS` envelopes; items 100..110 with keys of their own.
fn envelopes() -> Vec<Envelope> {
    (0..ITEMS)
        .map(|n| {
            let mut envelope = Envelope::new("packed", json!({ "n": n }));
            if (100..110).contains(&n) {
                envelope.idempotency_key = Some(format!("fresh-{n}"));
            }
            envelope
        })
        .collect()
}

/// Publishes `envelopes` with `publish_each`: the outcomes, checked to be handed on once
/// each, in order.
async fn publish_each(t: &TestQueue, envelopes: &[Envelope]) -> Vec<Outcome> {
    let mut handed = Vec::new();
    let outcomes = t
        .queue
        .publish_each(envelopes, &PublishOptions::default(), |i, _| handed.push(i))
        .await
        .expect("published");
    assert_eq!(handed, (0..envelopes.len()).collect::<Vec<_>>(), "in order");
    outcomes
}

/// The envelope id of each task in `tasks/`, by task name.
async fn ids_in_tasks(t: &TestQueue) -> HashMap<String, String> {
    let mut ids = HashMap::new();
    for name in t.children("tasks").await {
        let body = t.read_json(&format!("tasks/{name}")).await;
        ids.insert(name, body["id"].as_str().expect("an id").to_string());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_key_in_the_middle_of_a_packed_publish_is_answered_and_the_others_land_once() {
    let t = TestQueue::new().await;
    let mut first = Envelope::new("packed", json!({ "first": true }));
    first.idempotency_key = Some("taken".into());
    let holder = t.queue.publish(&first).await.expect("the key's task");
    let mut envelopes = envelopes();
    envelopes[300].idempotency_key = Some("taken".into());
    // A key an earlier item of the same publish has, in another run (sent at the same time):
    // one of the two makes the task, the other is answered with it.
    envelopes[400].idempotency_key = Some("fresh-105".into());

    let outcomes = publish_each(&t, &envelopes).await;

    let mut created: HashMap<String, String> = HashMap::new();
    let mut same_key = Vec::new();
    for (n, outcome) in outcomes.iter().enumerate() {
        match (n, outcome) {
            (300, Outcome::Published(Published::Existing { id, task, .. })) => {
                assert_eq!((id, task.as_deref()), (&first.id, Some(holder.as_str())));
            }
            (105 | 400, Outcome::Published(Published::Existing { id, .. })) => {
                same_key.push((n, id.clone()));
            }
            (_, Outcome::Published(Published::Created { id, task })) => {
                assert_eq!(id, &envelopes[n].id, "item {n}");
                created.insert(task.clone(), id.clone());
            }
            other => panic!("item {n}: {other:?}"),
        }
    }
    let [(n, id)] = &same_key[..] else {
        panic!("items 105 and 400 share a key: one task, one answered with it: {same_key:?}");
    };
    let winner = if *n == 105 { 400 } else { 105 };
    assert_eq!(
        id, &envelopes[winner].id,
        "item {n} is answered with item {winner}"
    );
    assert_eq!(
        created.len(),
        ITEMS - 2,
        "each created item names a task of its own"
    );
    let mut expected = created.clone();
    expected.insert(holder, first.id.clone());
    assert_eq!(
        ids_in_tasks(&t).await,
        expected,
        "every other item once, nothing more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_tasks_in_the_middle_of_a_packed_publish_land_with_the_others() {
    let t = TestQueue::new().await;
    let mut envelopes = envelopes();
    // Three of them are more than one request carries: they cannot share one multi-op.
    for (n, envelope) in envelopes.iter_mut().enumerate().skip(250).take(3) {
        envelope.payload = json!({ "n": n, "blob": "x".repeat(400_000) });
    }
    let outcomes = publish_each(&t, &envelopes).await;
    let ids: HashSet<&str> = envelopes.iter().map(|e| e.id.as_str()).collect();
    let landed = ids_in_tasks(&t).await;
    assert_eq!(landed.len(), ITEMS);
    assert_eq!(
        landed.values().map(String::as_str).collect::<HashSet<_>>(),
        ids
    );
    for (n, outcome) in outcomes.iter().enumerate() {
        let Outcome::Published(Published::Created { id, task }) = outcome else {
            panic!("item {n}: {outcome:?}");
        };
        assert_eq!(landed.get(task), Some(id), "item {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_size_task_in_a_packed_publish_is_refused_before_anything_is_written() {
    let t = TestQueue::new().await;
    let mut envelopes = envelopes();
    envelopes[300].payload = json!({ "blob": "x".repeat(1_100_000) });
    let refused = t
        .queue
        .publish_each(&envelopes, &PublishOptions::default(), |_, _| {})
        .await;
    match refused {
        Err(event_bridge::Error::Unpublishable { item, problem }) => {
            assert_eq!(item, 301, "{problem}");
            assert!(problem.contains("over the 1000000"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
    assert!(t.children("tasks").await.is_empty(), "nothing written");
}

/// `publish -f` of a file whose line 301 has a taken key: one answer a line, in the lines'
/// order, that one naming the task that has the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_f_prints_each_lines_fate_in_order_with_a_taken_key_in_the_middle() {
    let t = TestQueue::new().await;
    let mut first = Envelope::new("packed", json!({}));
    first.idempotency_key = Some("taken".into());
    let holder = t.queue.publish(&first).await.expect("the key's task");
    let lines: Vec<String> = (0..ITEMS)
        .map(|n| match n {
            300 => json!({"idempotency_key": "taken", "payload": {"n": n}}),
            _ => json!({"payload": {"n": n}}),
        })
        .map(|line| line.to_string())
        .collect();
    let path = std::env::temp_dir().join(format!("packed-{}.jsonl", harness::uuid_like()));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the file");
    let out = Command::new(binary("event-bridge"))
        .args(["publish", "-f", path.to_str().expect("UTF-8")])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .stdin(Stdio::null())
        .output()
        .expect("run event-bridge");
    std::fs::remove_file(&path).expect("remove the file");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(answers.len(), ITEMS);
    let landed = ids_in_tasks(&t).await;
    assert_eq!(landed.len(), ITEMS, "599 lines and the key's first task");
    for (n, answer) in answers.iter().enumerate() {
        let task = answer["task"].as_str().expect("a task");
        if n == 300 {
            assert_eq!(task, holder);
            assert_eq!(answer["duplicate"], true, "{answer}");
            continue;
        }
        let body = t.read_json(&format!("tasks/{task}")).await;
        assert_eq!(body["payload"]["n"], n, "line {}: {answer}", n + 1);
        assert_eq!(answer["id"], body["id"], "{answer}");
    }
}
