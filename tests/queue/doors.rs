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
