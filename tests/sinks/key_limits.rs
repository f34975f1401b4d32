//! Limits per concurrency key (a route's `per_key`) across consumers: at most `max_in_flight`
//! tasks of one key at the receiver at once, whoever claimed them, and a key at its cap holds
//! back no other key.

use std::sync::Arc;
use std::time::Duration;

use event_bridge::Envelope;
use event_bridge::sink::Delivery;
use serde_json::json;

use crate::gauge::{Gauge, most_within_a_second};
use crate::limits::{drain_together, drain_until_empty, limited};
use harness::{TestQueue, options};

/// Publishes one `partner.call` task per key in `keys` (`None`: without one), in that order.
async fn publish(t: &TestQueue, keys: &[Option<String>]) {
    let envelopes: Vec<Envelope> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut e = Envelope::new("partner.call", json!({ "n": i }));
            e.concurrency_key = key.clone();
            e
        })
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_consumers_never_run_more_than_a_keys_cap_of_it_at_once() {
    let t = TestQueue::new().await;
    let gauge = Gauge::start(Duration::from_millis(20)).await;
    let config = limited(&t, &gauge.url(), json!({"per_key": {"max_in_flight": 2}}));
    // Three keys and some tasks without one, interleaved.
    let keys: Vec<Option<String>> = (0..84)
        .map(|i| (i % 7 != 0).then(|| format!("tenant-{}", i % 3)))
        .collect();
    publish(&t, &keys).await;
    let limited = drain_together(&t, &config, 4).await;
    let arrivals = gauge.arrivals();
    assert_eq!(arrivals.len(), 84, "every task delivered once");
    assert!(
        arrivals
            .iter()
            .all(|(_, r)| r.header("X-Event-Bridge-Attempt") == "1"),
        "waiting costs no attempt"
    );
    let most = gauge.most_per_key();
    for key in ["tenant-0", "tenant-1", "tenant-2"] {
        assert!(most[key] <= 2, "{key}: {most:?}");
    }
    assert!(
        most.values().any(|m| *m == 2),
        "a key's cap was reached: {most:?}"
    );
    assert!(limited > 0, "tasks did wait for their key");
    for key in ["tenant-0", "tenant-1", "tenant-2"] {
        let gate = format!("concurrency/partner%2Ecall/{key}");
        assert!(t.children(&gate).await.is_empty(), "{key}'s slots freed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_at_its_cap_holds_back_no_other_key() {
    let t = TestQueue::new().await;
    let gauge = Gauge::holding(Duration::ZERO, Some("slow")).await;
    // The held request must not time out while the test looks (its slot would go with it).
    let limit = json!({"per_key": {"max_in_flight": 1}, "timeout_ms": 300_000});
    let config = limited(&t, &gauge.url(), limit);
    let slow = || Some("slow".to_string());
    let mut keys = vec![slow(), slow()];
    keys.extend((0..5).map(|_| Some("fast".to_string())));
    publish(&t, &keys).await;
    let delivery = Arc::new(Delivery::from_config(&config).await.unwrap());
    let queue = t.consumer("consumer").await;
    let run = tokio::spawn({
        let t_delivery = delivery.clone();
        async move { event_bridge::process::run(&queue, t_delivery.as_ref(), &options(500, 8)).await }
    });
    // The key behind the held one is delivered while it is held.
    let fast = || std::future::ready(gauge.arrivals_of("fast") == 5);
    harness::poll(Duration::from_secs(60), fast).await;
    assert_eq!(gauge.arrivals_of("fast"), 5, "the other key went on");
    assert_eq!(
        (gauge.arrivals_of("slow"), gauge.in_hand("slow")),
        (1, 1),
        "the held key's second task waited"
    );
    gauge.release();
    run.await.unwrap().unwrap();
    let queue = t.consumer("again").await;
    drain_until_empty(&t, queue, delivery).await;
    assert_eq!(gauge.arrivals_of("slow"), 2);
    let most = gauge.most_per_key();
    assert_eq!((most["slow"], most["fast"]), (1, 1), "{most:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_rate_holds_its_own_tasks_and_not_another_keys() {
    let t = TestQueue::new().await;
    let gauge = Gauge::start(Duration::ZERO).await;
    let config = limited(&t, &gauge.url(), json!({"per_key": {"rate": "5/s"}}));
    let keys: Vec<Option<String>> = (0..20).map(|i| Some(format!("k{}", i % 2))).collect();
    publish(&t, &keys).await;
    drain_together(&t, &config, 2).await;
    assert_eq!(gauge.arrivals().len(), 20);
    let (a, b) = (gauge.times_of("k0"), gauge.times_of("k1"));
    for (key, times) in [("k0", &a), ("k1", &b)] {
        // 5 a second with a burst of 1: ten tasks take 1.8 s at least.
        let span = *times.last().unwrap() - times[0];
        assert!(span >= Duration::from_millis(1_700), "{key}: {span:?}");
        let most = most_within_a_second(times);
        // Five a second, the burst, and one for a delivery that left just before a window.
        assert!(most <= 7, "{key}: {most} within one second");
    }
    assert!(
        b[0] < *a.last().unwrap(),
        "k1 did not wait behind k0's rate"
    );
}
