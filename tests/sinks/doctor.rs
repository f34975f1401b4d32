//! `event-bridge doctor`'s sink check on SQS (moto): a queue that answers `GetQueueAttributes`
//! passes, a missing one fails saying to create it; the dead-letter queue is asked too.

use serde_json::Value;
use tokio::process::Command;

use harness::{TestQueue, binary};

use crate::sink_sqs::{create_queue, endpoint, missing_queue, moto};

#[tokio::test]
async fn each_sqs_sink_is_asked_for_its_attributes_and_a_missing_one_fails() {
    let t = TestQueue::new().await;
    let client = moto().await;
    let there = create_queue(&client, false, &[]).await;
    let dead_letters = create_queue(&client, false, &[]).await;
    let missing = missing_queue(false);
    let routes = format!(
        r#"{{"routes": {{"invoice.paid": {{"sink": "sqs", "queue_url": "{there}"}},
                        "audit.trail": {{"sink": "sqs", "queue_url": "{missing}"}}}}}}"#
    );
    let out = Command::new(binary("event-bridge"))
        .args(["doctor", "--json", "--platform", "worker"])
        .env_clear()
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("ROUTES", &routes)
        .env("DEAD_LETTER_QUEUE_URL", &dead_letters)
        .env("AWS_ENDPOINT_URL_SQS", endpoint())
        .env("AWS_REGION", event_bridge::sink::sqs::LOCAL_REGION)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let sink = |subject: &str| {
        (report["checks"].as_array().unwrap().iter())
            .find(|c| c["check"] == "sink" && c["subject"] == subject)
            .unwrap_or_else(|| panic!("no sink {subject} in {report:#}"))
            .clone()
    };
    let ok = sink("invoice.paid");
    assert_eq!(ok["status"], "pass", "{ok:#}");
    assert!(
        ok["detail"]
            .as_str()
            .unwrap()
            .contains("answered GetQueueAttributes")
    );
    assert_eq!(sink("dead letters")["status"], "pass");
    let gone = sink("audit.trail");
    assert_eq!(gone["status"], "fail", "{gone:#}");
    assert!(
        gone["detail"].as_str().unwrap().contains("does not exist"),
        "{gone:#}"
    );
    assert!(
        gone["fix"]
            .as_str()
            .unwrap()
            .starts_with("create the queue"),
        "{gone:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}
