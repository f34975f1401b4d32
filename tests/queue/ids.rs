//! What a publish refuses before writing anything: an empty envelope id, an id given twice in
//! one file or batch (`status` and `cancel` by id would find only the first, and a cancel
//! mark would bury both), and tasks that would not fit in the one ZooKeeper request that
//! writes them (an idempotency key takes three bytes per non-ASCII byte as a znode name).

use std::process::Output;

use event_bridge::{Envelope, Error};
use serde_json::json;

use harness::TestQueue;

use crate::cli::eb;

/// `lines` written to a file of the test's own; its path.
fn file(t: &TestQueue, lines: &[String]) -> String {
    let name = t.config.zookeeper.replace(['/', ':', '.'], "_");
    let path = std::env::temp_dir().join(format!("ids-{name}-{}.jsonl", harness::uuid_like()));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the file");
    path.to_string_lossy().into_owned()
}

/// Asserts `output` failed with one line on stderr holding every one of `words`.
fn refused(output: &Output, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A message quoting a huge key would drown the test's output: its start is enough.
    let stderr: String = stderr.chars().take(600).collect();
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} not in: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_f_refuses_an_empty_id_naming_its_line() {
    let t = TestQueue::new().await;
    let lines = [
        json!({"type": "a", "payload": 1}).to_string(),
        json!({"type": "a", "payload": 2, "id": ""}).to_string(),
    ];
    let path = file(&t, &lines);
    refused(&eb(&t, &["publish", "-f", &path], ""), &[":2:", "\"id\""]);
    refused(
        &eb(&t, &["publish", "-f", "-"], &lines.join("\n")),
        &["-:2:"],
    );
    std::fs::remove_file(&path).unwrap();
    assert!(t.children("tasks").await.is_empty(), "nothing is published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_f_refuses_an_id_given_twice_naming_both_lines() {
    let t = TestQueue::new().await;
    let lines = [
        json!({"type": "a", "payload": 1, "id": "order-7"}).to_string(),
        String::new(),
        json!({"type": "a", "payload": 2}).to_string(),
        json!({"type": "a", "payload": 3, "id": "order-7"}).to_string(),
    ];
    let path = file(&t, &lines);
    let out = eb(&t, &["publish", "-f", &path], "");
    refused(&out, &[":4:", "line 1", "order-7"]);
    refused(
        &eb(&t, &["publish", "-f", "-"], &lines.join("\n")),
        &["order-7"],
    );
    std::fs::remove_file(&path).unwrap();
    assert!(t.children("tasks").await.is_empty(), "nothing is published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_refuses_an_idempotency_key_too_long_for_zookeeper() {
    let t = TestQueue::new().await;
    // 300 kB of UTF-8, 900 kB as a znode name: with its task, over what one request carries.
    let lines = [
        json!({"type": "a", "payload": 1}).to_string(),
        json!({"type": "a", "payload": 2, "idempotency_key": "é".repeat(150_000)}).to_string(),
    ];
    let path = file(&t, &lines);
    refused(
        &eb(&t, &["publish", "-f", &path], ""),
        &[":2:", "idempotency_key"],
    );
    std::fs::remove_file(&path).unwrap();
    // As an argument (under the 128 kB an argument may be): the same clear refusal.
    let key = "é".repeat(20_000);
    let one = ["publish", "--payload", "{}", "--idempotency-key", &key];
    refused(&eb(&t, &one, ""), &["idempotency"]);
    assert!(t.children("tasks").await.is_empty(), "nothing is published");
    assert!(t.children("keys").await.is_empty(), "no key is written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_refuses_a_concurrency_key_that_names_no_gate() {
    let t = TestQueue::new().await;
    let lines = [
        json!({"type": "a", "payload": 1, "concurrency_key": "tenant-1"}).to_string(),
        json!({"type": "a", "payload": 2, "concurrency_key": "/".repeat(400)}).to_string(),
    ];
    let path = file(&t, &lines);
    refused(
        &eb(&t, &["publish", "-f", &path], ""),
        &[":2:", "\"concurrency_key\" is 400 bytes, 1200"],
    );
    std::fs::remove_file(&path).unwrap();
    let one = ["publish", "--payload", "{}", "--concurrency-key", ""];
    refused(&eb(&t, &one, ""), &["\"concurrency_key\" is empty"]);
    assert!(t.children("tasks").await.is_empty(), "nothing is published");
    // A good one is written as given, also to every line without its own.
    let good = [
        "publish",
        "--payload",
        "{}",
        "--concurrency-key",
        "tenant-2",
    ];
    let out = eb(&t, &good, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It waits in its key's lane.
    assert!(t.children("tasks").await.is_empty());
    let task = t.children("lanes/keys/tenant-2").await.remove(0);
    assert_eq!(task, "key.tenant-2.0000000000");
    let body = t.read_json(&format!("lanes/keys/tenant-2/{task}")).await;
    assert_eq!(body["concurrency_key"], "tenant-2");
}

#[tokio::test]
async fn publish_batch_refuses_repeated_ids_and_oversized_batches_writing_nothing() {
    let t = TestQueue::new().await;
    let first = Envelope::new("a", json!(1));
    let twin = Envelope {
        payload: json!(2),
        ..first.clone()
    };
    let err = t
        .queue
        .all_or_nothing()
        .publish_batch(&[first, twin])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unpublishable { item: 2, .. }), "{err}");

    let keyed: Vec<Envelope> = (0..200)
        .map(|i| {
            let mut e = Envelope::new("a", json!(i));
            e.idempotency_key = Some(format!("{}{i}", "é".repeat(680)));
            e
        })
        .collect();
    let err = t
        .queue
        .all_or_nothing()
        .publish_batch(&keyed)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unpublishable { .. }), "{err}");
    assert!(err.to_string().contains("request"), "{err}");
    assert!(t.children("tasks").await.is_empty(), "nothing is published");
    assert!(t.children("keys").await.is_empty(), "no key is written");
    let fits = t
        .queue
        .all_or_nothing()
        .publish_batch(&keyed[..100])
        .await
        .unwrap();
    assert_eq!(fits.len(), 100);
}

/// A line's `delay` makes the task due that long after the publish, by ZooKeeper's clock; a
/// delay that is not a span is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lines_delay_makes_its_task_due_later_by_zookeepers_clock() {
    let t = TestQueue::new().await;
    let before = t.now().await.now_ms();
    let line = json!({"type": "a", "payload": 1, "delay": "60s"}).to_string();
    let out = eb(&t, &["publish", "-f", "-"], &line);
    assert!(out.status.success(), "{out:?}");
    let after = t.now().await.now_ms();
    let task = t.children("tasks").await.remove(0);
    let retry_at = t.read_json(&format!("tasks/{task}")).await["retry_at"]
        .as_i64()
        .expect("a due time");
    assert!(
        (before + 60_000..=after + 60_000).contains(&retry_at),
        "{before} {retry_at} {after}"
    );
    let bad = json!({"type": "a", "payload": 2, "delay": "soon"}).to_string();
    refused(
        &eb(&t, &["publish", "-f", "-"], &bad),
        &["\"delay\" must be a number"],
    );
    assert_eq!(t.children("tasks").await.len(), 1);
}
