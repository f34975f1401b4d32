//! The worker's Prometheus endpoint, scraped while it runs and read by a real parser (the
//! `prometheus_client` Python package's).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use event_bridge::Envelope;
use serde_json::json;

use harness::prometheus::{parse, sample};
use harness::{TestQueue, binary};

/// `GET /metrics` from `address`: the body.
fn scrape(address: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_serves_prometheus_metrics_a_parser_reads() {
    let t = TestQueue::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut worker = Command::new(binary("event-bridge"))
        .args(["worker", "--metrics-listen", &address])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .env("EVENT_BRIDGE_HANDLER", "noop")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut envelopes: Vec<Envelope> = (0..3)
        .map(|i| Envelope::new("order.paid", json!({ "n": i })))
        .collect();
    envelopes.extend((0..2).map(|i| Envelope::new("user.signup", json!({ "n": i }))));
    t.queue.publish_many(&envelopes).await.unwrap();
    let delivered = || async {
        let samples = parse(&scrape(&address)?);
        let done = sample(
            &samples,
            "event_bridge_delivery_seconds_count",
            json!({"route": "builtin"}),
        );
        (done == Some(5.0)).then_some(samples)
    };
    let samples = harness::poll(Duration::from_secs(30), delivered)
        .await
        .unwrap_or_else(|| {
            scrape(&address)
                .map(|text| parse(&text))
                .unwrap_or_default()
        });
    let _ = worker.kill();
    let _ = worker.wait();
    let handled = |t: &str| {
        sample(
            &samples,
            "event_bridge_tasks_handled_total",
            json!({"type": t, "outcome": "delivered"}),
        )
    };
    assert_eq!(
        (handled("order.paid"), handled("user.signup")),
        (Some(3.0), Some(2.0)),
        "{samples:?}"
    );
    let count = sample(
        &samples,
        "event_bridge_delivery_seconds_count",
        json!({"route": "builtin"}),
    );
    assert_eq!(count, Some(5.0), "{samples:?}");
    assert!(
        sample(
            &samples,
            "event_bridge_delivery_seconds_bucket",
            json!({"route": "builtin", "le": "+Inf"})
        ) == Some(5.0),
        "a histogram with buckets: {samples:?}"
    );
}
