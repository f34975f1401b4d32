//! What a publish refuses at the door: a text field holding a control character (which no
//! delivery could carry as an HTTP header), an empty group or type; and a refusal quotes at
//! most about 100 bytes of the bad value. Each refusal names the field and publishes nothing.

use event_bridge::Envelope;
use event_bridge::task::Debounce;
use serde_json::json;

use crate::cli::eb;
use harness::TestQueue;

/// The fields a control character is refused in, each set on an envelope.
fn with_field(field: &str, value: &str) -> Envelope {
    let mut envelope = Envelope::new("order.paid", json!({}));
    match field {
        "id" => envelope.id = value.into(),
        "type" => envelope.event_type = value.into(),
        "group" => envelope.group = Some(value.into()),
        "idempotency_key" => envelope.idempotency_key = Some(value.into()),
        "concurrency_key" => envelope.concurrency_key = Some(value.into()),
        "debounce_key" => {
            envelope.debounce = Some(Debounce {
                key: value.into(),
                period_ms: 1_000,
                max_ms: None,
            })
        }
        other => panic!("{other}"),
    }
    envelope
}

const FIELDS: [&str; 6] = [
    "id",
    "type",
    "group",
    "idempotency_key",
    "concurrency_key",
    "debounce_key",
];

/// `Queue::publish_all` and the HTTP-style batch refuse a control character in every text
/// field, naming it, and write nothing.
#[tokio::test]
async fn the_library_refuses_a_control_character_in_each_field() {
    let t = TestQueue::new().await;
    for field in FIELDS {
        for bad in ["line\nbreak", "carriage\rreturn", "nul\0byte", "del\u{7f}"] {
            let envelope = with_field(field, bad);
            let refused = (t.queue.publish_all(std::slice::from_ref(&envelope)).await).unwrap_err();
            let text = refused.to_string();
            assert!(
                text.contains(&format!("\"{field}\" holds a control character")),
                "{field}: {text}"
            );
            let batch = t
                .queue
                .all_or_nothing()
                .publish_batch(&[envelope])
                .await
                .unwrap_err();
            assert!(
                batch.to_string().contains(&format!("\"{field}\"")),
                "{batch}"
            );
        }
    }
    for dir in ["tasks", "debounce", "keys", "lanes/keys"] {
        assert!(t.children(dir).await.is_empty(), "{dir}: nothing published");
    }
}

/// The command refuses the same, from its flags and from JSON lines (the whole file checked
/// first: a good line before the bad one is not published), and an empty `--group` or
/// `--type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_refuses_control_characters_and_empty_names() {
    let t = TestQueue::new().await;
    let flags: [(&[&str], &str); 4] = [
        (
            &["--group", "a\u{1b}b"],
            "\"group\" holds a control character",
        ),
        (&["--group", ""], "\"group\" is empty"),
        (&["--type", ""], "\"type\" is empty"),
        (
            &["--idempotency-key", "k\r\nX-Injected: 1"],
            "\"idempotency_key\" holds",
        ),
    ];
    for (args, problem) in flags {
        let mut all = vec!["publish", "--payload", "{}"];
        if !args.contains(&"--type") {
            all.extend(["--type", "order.paid"]);
        }
        all.extend(args);
        let out = eb(&t, &all, "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(problem), "{args:?}: {stderr}");
    }
    let file = std::env::temp_dir().join(format!("doors-{}.jsonl", harness::uuid_like()));
    let lines = [
        json!({"type": "order.paid", "payload": {}}),
        json!({"type": "order.paid", "payload": {}, "concurrency_key": "tenant\n7"}),
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&file, text.join("\n")).unwrap();
    let out = eb(&t, &["publish", "-f", file.to_str().unwrap()], "");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(":2: ") && stderr.contains("\"concurrency_key\" holds"),
        "{stderr}"
    );
    assert!(t.children("tasks").await.is_empty(), "nothing published");
    assert!(t.children("lanes/keys").await.is_empty());
}

/// A refusal quotes at most about 100 bytes of a bad value: a 100 KB parent name, a 100 KB
/// id given twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quotes_a_long_value_short() {
    let t = TestQueue::new().await;
    let long = "p".repeat(100_000);
    let out = eb(
        &t,
        &[
            "publish",
            "--type",
            "a",
            "--payload",
            "{}",
            "--after",
            &long,
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr:.300}");
    assert!(stderr.len() < 600, "{} bytes: {stderr:.300}", stderr.len());
    assert!(stderr.contains("(100000 bytes)"), "{stderr:.300}");

    let mut envelope = with_field("group", &format!("{long}\n"));
    let refused = (t.queue.publish_all(std::slice::from_ref(&envelope)).await).unwrap_err();
    assert!(refused.to_string().len() < 600, "{refused:.300}");
    envelope.group = None;
    envelope.id = long.clone();
    let twice = t
        .queue
        .all_or_nothing()
        .publish_batch(&[envelope.clone(), envelope])
        .await
        .unwrap_err();
    assert!(twice.to_string().len() < 600, "{twice:.300}");
}

/// Every name that ends up in a znode name has a limit, measured as that name (a byte other
/// than ASCII letters, digits, `-` and `_` takes three): `id`, `type`, `group` and each of
/// `after` at most 256 bytes. The library refuses one over it naming the field and the limit.
#[tokio::test]
async fn the_library_refuses_a_name_over_its_limit() {
    let t = TestQueue::new().await;
    for field in ["id", "type", "group"] {
        let fits = with_field(field, &"n".repeat(256));
        t.queue.publish_all(&[fits]).await.expect(field);
        let over = with_field(field, &"n".repeat(257));
        let refused = (t.queue.publish_all(&[over]).await)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!("\"{field}\" is 257 bytes"))
                && refused.contains("over the 256"),
            "{field}: {refused}"
        );
    }
    let mut child = Envelope::new("order.paid", json!({}));
    child.after = vec!["é".repeat(43)];
    let refused = (t.queue.publish_all(&[child]).await)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("\"after\"") && refused.contains("258 as a znode name"),
        "{refused}"
    );
    assert_eq!(t.children("tasks").await.len(), 3, "only those that fit");
}

/// The command refuses a group of 100 000 bytes from its flag and a 600 000-byte one from a JSON
/// line (naming the line), quoting neither; nothing is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_refuses_a_huge_group_from_a_flag_or_a_line() {
    let t = TestQueue::new().await;
    let huge = "g".repeat(100_000);
    let flag = [
        "publish",
        "--type",
        "a",
        "--payload",
        "{}",
        "--group",
        &huge,
    ];
    let out = eb(&t, &flag, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr:.300}");
    assert!(
        stderr.contains("\"group\" is 100000 bytes") && stderr.contains("over the 256"),
        "{stderr:.300}"
    );
    assert!(stderr.len() < 600, "{} bytes: {stderr:.300}", stderr.len());
    let line = json!({"type": "a", "payload": {}, "group": "g".repeat(600_000)});
    let lines = format!("{}\n{line}\n", json!({"type": "a", "payload": {}}));
    let out = eb(&t, &["publish", "-f", "-"], &lines);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr:.300}");
    assert!(
        stderr.contains(":2:") && stderr.contains("\"group\" is 600000 bytes"),
        "{stderr:.300}"
    );
    assert!(stderr.len() < 600, "{} bytes: {stderr:.300}", stderr.len());
    assert!(t.children("tasks").await.is_empty(), "nothing published");
    assert!(t.children("groups").await.is_empty());
}

/// A task no consumer could claim, already in the queue (written by a producer that knows no
/// limit, or an older version): its group is 600 000 bytes, so its lock's name and its body
/// would make a claim's multi-op larger than ZooKeeper takes, and ZooKeeper would drop the
/// consumer's connection on every claim. The claim sends it to the dead letters with the
/// reason instead, and the tasks published around it complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_a_huge_group_goes_to_the_dead_letters_and_its_neighbours_complete() {
    let t = TestQueue::new().await;
    let before = t.publish(2).await;
    let mut foreign = Envelope::new("order.paid", json!({"n": "huge"}));
    foreign.group = Some("g".repeat(600_000));
    let body = serde_json::to_vec(&foreign).unwrap();
    let prefix = format!("{}/tasks/task-", t.config.root);
    let options = zookeeper_client::CreateMode::PersistentSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let (_, sequence) = t.raw.create(&prefix, &body, &options).await.unwrap();
    let huge = format!("task-{sequence}");
    let after = t.publish(2).await;
    let recorder = harness::Recorder::default();
    let drained = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        harness::run(&t.queue, &recorder, 16),
    )
    .await
    .expect("the run ends: a task it cannot claim does not hold it up");
    assert_eq!(
        (drained.completed, drained.dead_lettered),
        (4, 1),
        "{drained:?}"
    );
    let mut ran = recorder.names();
    ran.sort();
    let mut neighbours = [before, after].concat();
    neighbours.sort();
    assert_eq!(ran, neighbours, "every neighbour ran, and not the huge one");
    let letter = t.read_json(&format!("dead/{huge}")).await;
    let reason = letter["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"group\" is 600000 bytes") && reason.contains("over the 4096"),
        "{letter:.300}"
    );
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("groups").await.is_empty(), "no lock was taken");
}

/// An empty idempotency key is refused (by the library, the flag and a JSON line), naming the
/// field: it would name no key, and dedupe nothing or everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_idempotency_key_is_refused_at_every_door() {
    let t = TestQueue::new().await;
    let empty = with_field("idempotency_key", "");
    let refused = (t.queue.publish_all(&[empty]).await)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("\"idempotency_key\" is empty"),
        "{refused}"
    );
    let flag = ["publish", "--payload", "{}", "--idempotency-key", ""];
    let line = json!({"type": "a", "payload": {}, "idempotency_key": ""}).to_string();
    for out in [eb(&t, &flag, ""), eb(&t, &["publish", "-f", "-"], &line)] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("\"idempotency_key\" is empty"), "{stderr}");
    }
    assert!(t.children("tasks").await.is_empty(), "nothing published");
    assert!(t.children("keys").await.is_empty());
}

/// `--delay` takes what a line's `"delay"` takes, days included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_in_days_is_taken_by_the_flag_as_by_a_line() {
    let t = TestQueue::new().await;
    let before = t.now().await.now_ms();
    let out = eb(&t, &["publish", "--payload", "{}", "--delay", "1d"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let task = t.children("tasks").await.remove(0);
    let retry_at = t.read_json(&format!("tasks/{task}")).await["retry_at"]
        .as_i64()
        .expect("a due time");
    assert!(retry_at >= before + 86_400_000, "{before} {retry_at}");
}

/// A bad argument is quoted short and escaped in the error that names it: no terminal escape
/// sequence, not its line break, not 100 KB of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_quotes_a_bad_argument_short_and_escaped() {
    let t = TestQueue::new().await;
    let bad = format!("bad\u{1b}[31mred\nline{}", "x".repeat(100_000));
    for flag in [
        "--delay",
        "--after",
        "--priority",
        "--retry-for",
        "--traceparent",
    ] {
        let args = ["publish", "--type", "a", "--payload", "{}", flag, &bad];
        let out = eb(&t, &args, "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}");
        assert!(
            stderr.len() < 600,
            "{flag}: {} bytes: {stderr:.300}",
            stderr.len()
        );
        assert!(!stderr.contains('\u{1b}'), "{flag}: {stderr:?}");
        assert!(
            !stderr.contains("\nline"),
            "{flag}: its line break: {stderr:.300}"
        );
    }
    assert!(t.children("tasks").await.is_empty());
}
