//! Per-route limits across consumers: `max_in_flight` (slots under the route's gate, freed
//! when a handler ends or its consumer's session does) and `rate` (a token bucket by
//! ZooKeeper's clock). A task over a limit waits without costing an attempt.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use event_bridge::sink::Delivery;
use event_bridge::{Config, Envelope, Queue};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::gauge::{Gauge, most_within_a_second};
use harness::{TestQueue, options};

/// A config whose one route `partner.call` goes to `url` with `limit` added.
pub(crate) fn limited(t: &TestQueue, url: &str, limit: Value) -> Config {
    let mut route = json!({"sink": "http", "url": url});
    route
        .as_object_mut()
        .unwrap()
        .extend(limit.as_object().unwrap().clone());
    crate::routing::routed(t, json!({"routes": {"partner.call": route}}))
}

async fn publish(t: &TestQueue, n: usize) {
    let envelopes: Vec<Envelope> = (0..n)
        .map(|i| Envelope::new("partner.call", json!({ "n": i })))
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap();
}

/// Runs drains on `queue` until `tasks/` is empty; tasks that waited for the limit, summed.
/// Runs `consumers` drains at once on `config`, each until `tasks/` is empty; tasks that
/// waited for a limit, summed.
pub(crate) async fn drain_together(t: &TestQueue, config: &Config, consumers: usize) -> u32 {
    let mut drains = Vec::new();
    for i in 0..consumers {
        let delivery = Arc::new(Delivery::from_config(config).await.unwrap());
        let queue = t.consumer(&format!("consumer-{i}")).await;
        drains.push(drain_until_empty(t, queue, delivery));
    }
    futures::future::join_all(drains).await.into_iter().sum()
}

pub(crate) async fn drain_until_empty(t: &TestQueue, queue: Queue, delivery: Arc<Delivery>) -> u32 {
    let mut limited = 0;
    for _ in 0..200 {
        let report = event_bridge::process::run(&queue, delivery.as_ref(), &options(500, 16))
            .await
            .unwrap();
        limited += report.limited;
        if t.children("tasks").await.is_empty() {
            return limited;
        }
    }
    panic!("the queue did not drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_consumers_never_run_more_than_max_in_flight_at_once() {
    let t = TestQueue::new().await;
    let gauge = Gauge::start(Duration::from_millis(20)).await;
    let config = limited(&t, &gauge.url(), json!({"max_in_flight": 3}));
    publish(&t, 200).await;
    let limited = drain_together(&t, &config, 4).await;
    let arrivals = gauge.arrivals();
    assert!(gauge.most.load(Ordering::SeqCst) <= 3, "at most 3 at once");
    assert_eq!(arrivals.len(), 200, "every task delivered once");
    assert!(
        arrivals
            .iter()
            .all(|(_, r)| r.header("X-Event-Bridge-Attempt") == "1"),
        "waiting costs no attempt"
    );
    assert!(limited > 0, "tasks did wait for the limit");
    assert!(
        t.children("limits/partner%2Ecall").await.is_empty(),
        "every slot freed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_holds_deliveries_to_it_in_every_window() {
    let t = TestQueue::new().await;
    let gauge = Gauge::start(Duration::ZERO).await;
    let config = limited(&t, &gauge.url(), json!({"rate": "20/s"}));
    publish(&t, 60).await;
    drain_together(&t, &config, 2).await;
    let times: Vec<Instant> = gauge.arrivals().into_iter().map(|(at, _)| at).collect();
    assert_eq!(times.len(), 60);
    // 20 a second and a burst of 2 (a tenth of a second's worth), plus one for a delivery that
    // left just before a window and arrived in it.
    let most = most_within_a_second(&times);
    assert!(most <= 23, "{most} deliveries within one second");
    let first = *times.iter().min().unwrap();
    let last = *times.iter().max().unwrap();
    assert!(
        last - first >= Duration::from_millis(2_700),
        "60 tasks at 20/s with a burst of 2 take 2.9 s at least: {:?}",
        last - first
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_slot_frees_itself_with_its_session() {
    let t = TestQueue::new().await;
    let gauge = Gauge::start(Duration::from_secs(3_600)).await; // never answers in time
    let config = limited(&t, &gauge.url(), json!({"max_in_flight": 1}));
    publish(&t, 2).await;
    let stuck = t.consumer("stuck").await;
    let delivery = Arc::new(Delivery::from_config(&config).await.unwrap());
    let held = tokio::spawn({
        let (stuck, delivery) = (stuck.clone(), delivery.clone());
        async move { event_bridge::process::run(&stuck, delivery.as_ref(), &options(1, 1)).await }
    });
    let arrived = || std::future::ready(gauge.arrivals().len() == 1);
    harness::poll(Duration::from_secs(5), arrived).await;
    assert_eq!(
        t.children("limits/partner%2Ecall").await.len(),
        1,
        "the slot is held"
    );
    let other = t.consumer("other").await;
    let free = Gauge::start(Duration::ZERO).await;
    let waiting = Arc::new(
        Delivery::from_config(&limited(&t, &free.url(), json!({"max_in_flight": 1})))
            .await
            .unwrap(),
    );
    let mut short = options(1, 1);
    short.deadline = tokio::time::Instant::now() + Duration::from_millis(1_500);
    short.margin = Duration::from_millis(200);
    let report = event_bridge::process::run(&other, waiting.as_ref(), &short)
        .await
        .unwrap();
    assert_eq!((report.claimed, report.limited), (0, 1), "{report:?}");
    // The holder dies: its session ends, and the slot with it.
    held.abort();
    let _ = held.await;
    drop(stuck);
    let freed = || async { t.children("limits/partner%2Ecall").await.is_empty() };
    harness::poll(Duration::from_secs(5), freed).await;
    let report = event_bridge::process::run(&other, waiting.as_ref(), &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(free.arrivals().len(), 1);
}
