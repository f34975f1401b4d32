//! `serve`'s `/metrics`, read by a real parser ([`harness::prometheus`]).

use std::time::Duration;

use harness::TestQueue;
use harness::prometheus::{parse, sample};
use serde_json::json;

use crate::http;
use crate::scene;
use crate::serve::Serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exposes_the_queue_figures_a_prometheus_parser_reads() {
    let t = TestQueue::new().await;
    let before = t.now().await.now_ms();
    scene::build(&t).await;
    let serve = Serve::start(&t, &[], &[]).await;
    // `serve` reads ZooKeeper's clock itself: /metrics is read until it has the scene and the
    // oldest task is a second old by that clock (it samples every second).
    let mut samples = Vec::new();
    harness::poll(Duration::from_secs(10), || {
        let text = http::get(&serve.address, "/metrics").expect("metrics").body;
        samples = parse(&text);
        let figure = |name: &str| sample(&samples, name, json!({}));
        let ready = figure("event_bridge_queue_depth") == Some(5.0)
            && figure("event_bridge_oldest_task_age_seconds").is_some_and(|age| age >= 1.0);
        std::future::ready(ready)
    })
    .await;
    let figure = |name: &str| sample(&samples, name, json!({}));
    let by_type = |t: &str| sample(&samples, "event_bridge_pending_tasks", json!({ "type": t }));
    assert_eq!(
        (
            figure("event_bridge_queue_depth"),
            figure("event_bridge_queue_leased"),
            figure("event_bridge_queue_dead"),
            figure("event_bridge_queue_delayed"),
            figure("event_bridge_queue_blocked"),
        ),
        (Some(5.0), Some(1.0), Some(2.0), Some(0.0), Some(0.0)),
        "{samples:?}"
    );
    assert_eq!(
        (by_type("mail.send"), by_type("report.export")),
        (Some(3.0), Some(2.0)),
        "{samples:?}"
    );
    // Seven tasks were created under tasks/; the two cancelled ones left it.
    assert_eq!(
        (
            figure("event_bridge_tasks_created_total"),
            figure("event_bridge_tasks_removed_total")
        ),
        (Some(7.0), Some(2.0)),
        "{samples:?}"
    );
    // At least the second waited, at most the time since before the scene was built (both
    // by ZooKeeper's clock, which stamped the tasks).
    let most = (t.now().await.now_ms() - before) as f64 / 1000.0;
    let age = figure("event_bridge_oldest_task_age_seconds").expect("an age");
    assert!(
        (1.0..=most + 0.001).contains(&age),
        "age {age}, at most {most}"
    );
}
