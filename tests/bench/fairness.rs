//! Fairness across concurrency keys: tenant `big` has a backlog, tenant `small` publishes one
//! task a second behind it, and [`CONSUMERS`] consumers drain. The figure is `small`'s wait,
//! from its publish to its handler's start, against the same tenant's wait on an empty queue,
//! in the same run and on the same server.
//!
//! The target (issue 20) is a p99 within one claim batch of the empty queue's: the empty
//! queue's p99 plus the time the backlog run takes to drain [`CLAIM_BATCH`] tasks. Each key
//! waits in its own lane and consumers take the lanes in turn, so `small` should not wait
//! behind `big`'s backlog; this section says how long it waits, and whether the target is met.
//! It asserts nothing: figures of a shared machine are not a test's outcome.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_bridge::handler::FnHandler;
use event_bridge::queue::CLAIM_BATCH;
use event_bridge::{Config, Envelope, Queue, RunOptions, Task, process};
use serde_json::json;

use crate::Result;
use crate::server::{delete_tree, fresh_chroot};

/// Consumers draining at once, each on a session of its own.
const CONSUMERS: usize = 4;

/// Envelopes per publish call of the backlog.
const PUBLISH_CHUNK: usize = 5_000;

/// What one measurement saw.
struct Waits {
    /// `small`'s waits, seconds, sorted.
    small: Vec<f64>,
    /// Tasks per second the consumers handled, `big`'s and `small`'s together.
    rate: f64,
}

impl Waits {
    fn quantile(&self, q: f64) -> f64 {
        let i = ((self.small.len() as f64 * q).ceil() as usize).clamp(1, self.small.len());
        self.small[i - 1]
    }
}

/// Measures `small`'s wait on an empty queue, then behind a backlog of `big` tasks
/// (`BENCH_FAIR_BIG`, 100 000), and prints both with the target.
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let big = match smoke {
        true => 200,
        false => crate::env_list("BENCH_FAIR_BIG", "100000")?
            .first()
            .copied()
            .unwrap_or(100_000),
    };
    let samples = if smoke { 3 } else { 20 };
    let period = Duration::from_millis(if smoke { 50 } else { 1_000 });
    let empty = measure(addr, 0, samples, period).await?;
    let behind = measure(addr, big, samples, period).await?;
    let batch = CLAIM_BATCH as f64 / behind.rate.max(1.0);
    let target = empty.quantile(0.99) + batch;
    println!();
    println!(
        "fairness: tenant small publishing one task every {period:?}, {CONSUMERS} consumers; wait from publish to handler start:"
    );
    for (what, w) in [
        ("empty queue", &empty),
        (&*format!("behind {big} of big"), &behind),
    ] {
        println!(
            "  {what:<22} p50 {:>8.3} s, p99 {:>8.3} s, max {:>8.3} s over {} tasks",
            w.quantile(0.5),
            w.quantile(0.99),
            w.small.last().copied().unwrap_or(0.0),
            w.small.len()
        );
    }
    println!("  the backlog drained at {:.0} tasks/s", behind.rate);
    let met = behind.quantile(0.99) <= target;
    println!(
        "  target: p99 behind the backlog <= the empty queue's + one claim batch ({CLAIM_BATCH} tasks, {batch:.3} s) = {target:.3} s: {}",
        if met { "met" } else { "NOT MET" }
    );
    Ok(())
}

/// Publishes `big` tasks of key `big`, then tasks of key `small` one every `period` (`samples`
/// of them on an empty queue, else while `big` has tasks left), while [`CONSUMERS`] consumers
/// drain; returns `small`'s waits.
async fn measure(addr: &str, big: usize, samples: usize, period: Duration) -> Result<Waits> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let producer = queue_on(&config, "fair-producer").await?;
    for start in (0..big).step_by(PUBLISH_CHUNK) {
        let chunk: Vec<Envelope> = (start..(start + PUBLISH_CHUNK).min(big))
            .map(|i| keyed("big", json!({ "n": i })))
            .collect();
        producer.publish_many(&chunk).await?;
    }
    let waits = Arc::new(Mutex::new(Vec::new()));
    let completed = Arc::new(Mutex::new(0usize));
    let seen = waits.clone();
    let count = completed.clone();
    let handler = FnHandler(move |task: Task| {
        let seen = seen.clone();
        let count = count.clone();
        async move {
            *count.lock().expect("not poisoned") += 1;
            if task.envelope.concurrency_key.as_deref() == Some("small") {
                let at = task.envelope.payload["at_ms"].as_f64().unwrap_or(0.0);
                seen.lock()
                    .expect("not poisoned")
                    .push((now_ms() - at) / 1000.0);
            }
            Ok(())
        }
    });
    let mut consumers = Vec::new();
    for i in 0..CONSUMERS {
        consumers.push(queue_on(&config, &format!("fair-{i}")).await?);
    }
    let stop = AtomicBool::new(false);
    let started = tokio::time::Instant::now();
    let drains = futures::future::try_join_all(
        (consumers.iter()).map(|queue| consume(queue, &handler, &stop)),
    );
    // On an empty queue `samples` tasks; behind a backlog, one a period for as long as `big`
    // has tasks left (at least one), so that every sample waited behind it.
    let publish = async {
        let published = publish_small(&producer, big, samples, period, &completed, &waits).await;
        // The consumers stop however the publishing ended.
        stop.store(true, Ordering::Relaxed);
        published
    };
    let (drained, published) = tokio::join!(drains, publish);
    drained?;
    published?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut small = waits.lock().expect("not poisoned").clone();
    small.sort_by(f64::total_cmp);
    let rate = *completed.lock().expect("not poisoned") as f64 / elapsed;
    delete_tree(&admin, &chroot).await?;
    Ok(Waits { small, rate })
}

/// Publishes `small`'s tasks one every `period` (`samples` of them on an empty queue, else
/// while `big` has tasks left, at least one), then waits until each has started (ten minutes
/// at most).
async fn publish_small(
    producer: &Queue,
    big: usize,
    samples: usize,
    period: Duration,
    handled: &Mutex<usize>,
    waits: &Mutex<Vec<f64>>,
) -> Result<()> {
    let mut published = 0;
    loop {
        // Handled so far, less `small`'s: `big`'s.
        let big_done = (handled.lock().expect("not poisoned"))
            .saturating_sub(waits.lock().expect("not poisoned").len());
        let more = match big {
            0 => published < samples,
            _ => big_done < big || published == 0,
        };
        if !more {
            break;
        }
        let envelope = keyed("small", json!({ "at_ms": now_ms() }));
        producer.publish(&envelope).await?;
        published += 1;
        tokio::time::sleep(period).await;
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(600);
    while waits.lock().expect("not poisoned").len() < published {
        if tokio::time::Instant::now() > until {
            return Err("small's tasks did not all start within ten minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A consumer's loop of runs until `stop`: a run that found nothing is followed by a short
/// sleep, as a worker's idle wait would be.
async fn consume<H: event_bridge::handler::Handler>(
    queue: &Queue,
    handler: &H,
    stop: &AtomicBool,
) -> Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let options = RunOptions {
            max_tasks: 10_000,
            concurrency: Config::default().drain_concurrency,
            deadline: tokio::time::Instant::now() + Duration::from_secs(60),
            margin: Duration::from_secs(1),
        };
        let report = process::run(queue, handler, &options).await?;
        if report.claimed == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

fn keyed(key: &str, payload: serde_json::Value) -> Envelope {
    let mut envelope = Envelope::new("bench.fair", payload);
    envelope.concurrency_key = Some(key.into());
    envelope
}

async fn queue_on(config: &Config, consumer: &str) -> Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    let queue = Queue::new(client, config, consumer);
    queue.ensure_paths().await?;
    Ok(queue)
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
