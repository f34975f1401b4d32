//! Routing: event types to sinks, the default route, and what happens without a route.

use event_bridge::config::RouteSource;
use event_bridge::sink::Delivery;
use event_bridge::{Config, Envelope};
use serde_json::{Value, json};

use crate::sink_http::{Receiver, Reply};
use harness::{TestQueue, run};

/// A config whose routes are `table`, on the test's chroot.
pub(crate) fn routed(t: &TestQueue, table: Value) -> Config {
    let mut config = t.config.clone();
    config.routes = Some(RouteSource {
        variable: "ROUTES",
        origin: "<inline JSON>".into(),
        text: table.to_string(),
    });
    config
}

async fn publish(t: &TestQueue, event_type: &str) -> String {
    t.queue
        .publish(&Envelope::new(event_type, json!({"about": event_type})))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_type_goes_to_its_route_and_an_unrouted_type_to_the_dead_letters() {
    let t = TestQueue::new().await;
    let receiver = Receiver::start([Reply::status(200)]).await;
    let config = routed(
        &t,
        json!({"routes": {
            "user.signup": {"sink": "http", "url": receiver.url("/signup")},
            "audit": {"sink": "log"}
        }}),
    );
    let delivery = Delivery::from_config(&config).await.unwrap();
    publish(&t, "user.signup").await;
    publish(&t, "audit").await;
    let stray = publish(&t, "unknown.type").await;

    let report = run(&t.queue, &delivery, 10).await;
    assert_eq!((report.completed, report.dead_lettered), (2, 1));
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].target, "/signup");
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["type"], "user.signup");
    let dead = t.read_json(&format!("dead/{stray}")).await;
    assert_eq!(dead["reason"], "permanent failure");
    assert_eq!(
        dead["last_error"],
        "no route for event type \"unknown.type\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_route_takes_what_no_route_names() {
    let t = TestQueue::new().await;
    let receiver = Receiver::start([Reply::status(204), Reply::status(204)]).await;
    let config = routed(
        &t,
        json!({"routes": {"audit": {"sink": "log"}}, "default": {"sink": "http", "url": receiver.url("/all")}}),
    );
    let delivery = Delivery::from_config(&config).await.unwrap();
    for event_type in ["a", "b", "audit"] {
        publish(&t, event_type).await;
    }
    assert_eq!(run(&t.queue, &delivery, 10).await.completed, 3);
    assert_eq!(
        receiver.requests().len(),
        2,
        "a and b went to the default, audit to its log route"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_route_skip_an_unrouted_task_is_completed_undelivered() {
    let t = TestQueue::new().await;
    let config = routed(
        &t,
        json!({"routes": {"audit": {"sink": "log"}}, "no_route": "skip"}),
    );
    let delivery = Delivery::from_config(&config).await.unwrap();
    publish(&t, "unknown.type").await;
    let report = run(&t.queue, &delivery, 10).await;
    assert_eq!((report.completed, report.dead_lettered), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_route_table_stops_a_consumer_at_start_naming_the_route() {
    let t = TestQueue::new().await;
    let mut cmd = std::process::Command::new(harness::binary("event-bridge"));
    let out = cmd
        .args(["process", "--drain"])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env(
            "ROUTES",
            r#"{"routes": {"user.signup": {"sink": "http", "url": "ftp://hooks.example/x"}}}"#,
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ROUTES") && stderr.contains("route \"user.signup\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keep_done_the_completion_record_keeps_what_the_webhook_answered() {
    let t = TestQueue::with(|c| c.keep_done = Some(std::time::Duration::from_secs(3600))).await;
    let receiver = Receiver::start([Reply::status(202)]).await;
    let config = routed(
        &t,
        json!({"routes": {"user.signup": {"sink": "http", "url": receiver.url("/signup")}}}),
    );
    let delivery = Delivery::from_config(&config).await.unwrap();
    let name = publish(&t, "user.signup").await;
    let report = run(&t.queue, &delivery, 10).await;
    assert_eq!(report.completed, 1);
    let record = event_bridge::inspect::find_done(&t.queue, &name)
        .await
        .unwrap()
        .expect("a record");
    let delivered = record.delivered.expect("what the sink answered");
    assert_eq!(
        (delivered.sink.as_deref(), delivered.status),
        (Some("http"), Some(202))
    );
}
