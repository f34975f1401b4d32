//! The book's handlers in Rust (docs/book/src/integrations/rust-handler.md includes the code
//! between the ANCHOR lines of book_handlers/welcome.rs and export.rs), compiled and run
//! against ZooKeeper, so the page shows code that builds and does what the page says:
//! `Retryable` releases a task with a backoff, `Permanent` buries it at once, and a handler's
//! result reaches its task's completion record.

use std::time::Duration;

use event_bridge::inspect::{self, Status};
use event_bridge::{Envelope, process};
use serde_json::json;

use harness::{TestQueue, options};

mod export;
mod welcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_welcome_mail_handler_retries_what_may_pass_and_buries_what_cannot() {
    let t = TestQueue::new().await;
    let payloads = [
        json!({"to": "ada@example.com"}),
        json!({"to": "bob@down.example"}),
        json!({"name": "no address"}),
    ];
    let envelopes: Vec<Envelope> = payloads
        .iter()
        .map(|p| Envelope::new("user.signup", p.clone()))
        .collect();
    let names = t.queue.publish_many(&envelopes).await.unwrap();
    let handler = welcome::SendWelcomeMail {
        mailer: welcome::Mailer::default(),
    };
    let report = process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(
        (report.completed, report.retried, report.dead_lettered),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(*handler.mailer.sent.lock().unwrap(), [payloads[0].clone()]);
    assert_eq!(
        t.children("delayed").await.len(),
        1,
        "the retry waits out its backoff"
    );
    let letter = t.read_json(&format!("dead/{}", names[2])).await;
    assert_eq!(letter["reason"], "permanent failure", "{letter}");
    assert!(
        letter["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no address to send to")),
        "{letter}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_handler_answers_a_result_kept_in_the_completion_record() {
    let t = TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await;
    let envelope = Envelope::new("report.export", json!({"month": "2026-10"}));
    let name = t.queue.publish(&envelope).await.unwrap();
    let handler = export::ExportReport {
        store: export::ExportStore::default(),
    };
    let report = process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    let parts = handler.store.parts.lock().unwrap().clone();
    assert_eq!(parts[&envelope.id], (0..10).collect::<Vec<u8>>());
    let now = t.now().await;
    let record = match inspect::status(&t.queue, &now, &name).await.unwrap() {
        Status::Completed { record } => record,
        other => panic!("{name} is not completed: {other:?}"),
    };
    assert_eq!(
        record.result,
        Some(json!({"url": format!("https://exports.example/{}.csv", envelope.id)}))
    );
}
