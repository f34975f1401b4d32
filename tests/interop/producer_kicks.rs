//! The packaged producers kick too: Python's and Node's `event-bridge-publish`, with
//! `EVENT_BRIDGE_KICK=on`, start a drain once their tasks landed, through the same `kick` znode
//! as the Rust publishers (the Ruby gem publishes through process_events' HTTP publish, which
//! kicks itself). The trigger is a real local HTTP server that checks the bearer secret and
//! counts the requests it admits (`harness::kick_trigger`).

use std::process::Command;

use event_bridge::Envelope;
use harness::TestQueue;
use harness::kick_trigger::KickTrigger;
use serde_json::json;

use crate::interop::{node_producer, python_producer, require_node, require_python, run_producer};

const SECRET: &str = "producer-kick";

/// Runs `producer` publishing `count` tasks into `t`'s queue with kicks on to `trigger`,
/// off the runtime's threads (the trigger answers on them).
async fn publish(producer: fn() -> Command, t: &TestQueue, trigger: &str, count: usize) {
    let mut command = producer();
    command
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .env("EVENT_BRIDGE_KICK", "on")
        .env("EVENT_BRIDGE_KICK_URL", trigger)
        .env("CRON_SECRET", SECRET)
        .args(["--type", "producer.kick", "--count", &count.to_string()]);
    let printed = tokio::task::spawn_blocking(move || run_producer(&mut command))
        .await
        .expect("the producer's thread");
    assert_eq!(printed.len(), count);
}

/// Three tasks in one command: one kick. A second command while the node stands: none, and the
/// Rust library's publish finds the node standing too. Once the node is cleared (as a kicked
/// drain clears it), the next command kicks again; a node older than `KICK_STALE_MS` is taken
/// over, as the Rust publishers take it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_node_producers_kick_once_through_the_shared_kick_node() {
    require_python();
    require_node();
    for producer in [python_producer as fn() -> Command, node_producer] {
        let mut trigger = KickTrigger::bind(SECRET).await;
        trigger.serve(None);
        let t = TestQueue::with(|config| {
            config.cron_secret = Some(event_bridge::Secret::new(SECRET));
            config.kick = Some(event_bridge::config::KickConfig {
                url: trigger.url.clone(),
                lambda_endpoint: None,
                stale_after: std::time::Duration::from_secs(30),
                wait: std::time::Duration::from_secs(1),
                linger: std::time::Duration::ZERO,
            });
        })
        .await;
        let path = t.queue.layout().kick();

        publish(producer, &t, &trigger.url, 3).await;
        assert_eq!(
            trigger.requests(),
            1,
            "{:?}: one kick for three tasks",
            producer()
        );
        let (data, _) = t.raw.get_data(&path).await.expect("the kick node");
        let node: serde_json::Value = serde_json::from_slice(&data).expect("JSON");
        assert!(node["at_ms"].as_i64().is_some(), "{node}");

        publish(producer, &t, &trigger.url, 1).await;
        let envelope = Envelope::new("rust.publish", json!({}));
        t.queue.publish(&envelope).await.expect("publish");
        assert_eq!(trigger.requests(), 1, "{:?}: the node stands", producer());

        event_bridge::kick::clear(&t.queue).await.expect("clear");
        publish(producer, &t, &trigger.url, 1).await;
        assert_eq!(trigger.requests(), 2, "{:?}: kicked again", producer());

        let old = json!({"at_ms": 0}).to_string();
        t.raw
            .set_data(&path, old.as_bytes(), None)
            .await
            .expect("age");
        publish(producer, &t, &trigger.url, 1).await;
        assert_eq!(
            trigger.requests(),
            3,
            "{:?}: a lost kick taken over",
            producer()
        );
        assert_eq!(t.children("tasks").await.len(), 7);
    }
}

/// A kick that fails (nothing listens at the trigger) never fails the publish: the command
/// exits 0 with its tasks printed, says on stderr that the kick failed, and leaves the node
/// for the cron tick's run or a later publisher once stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_kick_never_fails_a_packaged_producers_publish() {
    require_python();
    require_node();
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let trigger = format!("http://127.0.0.1:{port}/api/process_events?drain=1");
    for producer in [python_producer as fn() -> Command, node_producer] {
        let t = TestQueue::new().await;
        let mut command = producer();
        command
            .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
            .env("EVENT_BRIDGE_ROOT", &t.config.root)
            .env("EVENT_BRIDGE_KICK", "on")
            .env("EVENT_BRIDGE_KICK_URL", &trigger)
            .args(["--type", "producer.kick"]);
        let out = tokio::task::spawn_blocking(move || command.output().expect("spawn"))
            .await
            .expect("the producer's thread");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", producer());
        assert!(stderr.contains("kick failed"), "{:?}: {stderr}", producer());
        assert_eq!(t.children("tasks").await.len(), 1);
        assert!(
            t.raw
                .check_stat(&t.queue.layout().kick())
                .await
                .unwrap()
                .is_some()
        );
    }
}
