//! What the queue's semantics cost: publishing with an idempotency key against without,
//! draining tasks in ordered groups against ungrouped ones, and with completion records
//! (`KEEP_DONE`) against without, each pair in the same run on the same server, each
//! measurement in a chroot of its own.

use std::time::{Duration, Instant};

use event_bridge::handler::FnHandler;
use event_bridge::{Config, Envelope, Queue, RunOptions, Task, process};
use serde_json::json;

use crate::{Result, delete_tree, fresh_chroot};

/// Groups the grouped drain spreads its tasks over.
const GROUPS: usize = 100;

/// Measures and prints both comparisons over `n` tasks.
pub async fn section(addr: &str, n: usize, concurrency: usize) -> Result<()> {
    let plain = publish_rate(addr, n, |_| None).await?;
    let keyed = publish_rate(addr, n, |i| Some(format!("key-{i}"))).await?;
    let ungrouped = drain_rate(addr, n, concurrency, |_| None, |_| {}).await?;
    let grouped = drain_rate(
        addr,
        n,
        concurrency,
        |i| Some(format!("g{}", i % GROUPS)),
        |_| {},
    )
    .await?;
    let keep = |c: &mut Config| c.keep_done = Some(Duration::from_secs(3600));
    let kept = drain_rate(addr, n, concurrency, |_| None, keep).await?;
    println!();
    println!(
        "semantics, {n} tasks each (one session; drains with the no-op handler, concurrency {concurrency}):"
    );
    println!(
        "  publish: {plain:>8.0}/s without keys, {keyed:>8.0}/s with a key each ({:.2}x)",
        keyed / plain
    );
    println!(
        "  drain:   {ungrouped:>8.0}/s ungrouped, {grouped:>8.0}/s in {GROUPS} ordered groups ({:.2}x)",
        grouped / ungrouped
    );
    println!(
        "  drain:   {ungrouped:>8.0}/s without KEEP_DONE, {kept:>8.0}/s with completion records ({:.2}x)",
        kept / ungrouped
    );
    Ok(())
}

fn envelopes(n: usize, key: impl Fn(usize) -> Option<String>) -> Vec<Envelope> {
    (0..n)
        .map(|i| {
            let mut envelope = Envelope::new("bench", json!({ "user": i }));
            envelope.idempotency_key = key(i);
            envelope
        })
        .collect()
}

/// Publishes `n` envelopes (keyed by `key`) with `publish_all`; tasks per second.
async fn publish_rate(addr: &str, n: usize, key: impl Fn(usize) -> Option<String>) -> Result<f64> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = Queue::new(
        event_bridge::session::connect(&config).await?,
        &config,
        "bench",
    );
    queue.ensure_paths().await?;
    let batch = envelopes(n, key);
    let started = Instant::now();
    let published = queue.publish_all(&batch).await?;
    let took = started.elapsed();
    assert_eq!(published.len(), n);
    delete_tree(&admin, &chroot).await?;
    Ok(n as f64 / took.as_secs_f64())
}

/// Publishes `n` tasks (grouped by `group`), then drains them with one run on a config changed
/// by `setting`; tasks per second.
async fn drain_rate(
    addr: &str,
    n: usize,
    concurrency: usize,
    group: impl Fn(usize) -> Option<String>,
    setting: impl FnOnce(&mut Config),
) -> Result<f64> {
    let (admin, chroot, mut config) = fresh_chroot(addr).await?;
    setting(&mut config);
    let queue = Queue::new(
        event_bridge::session::connect(&config).await?,
        &config,
        "bench",
    );
    queue.ensure_paths().await?;
    let mut batch = envelopes(n, |_| None);
    for (i, envelope) in batch.iter_mut().enumerate() {
        envelope.group = group(i);
    }
    queue.publish_many(&batch).await?;
    let noop = FnHandler(|_task: Task| async { Ok(()) });
    let started = Instant::now();
    let mut completed = 0;
    while completed < n as u32 {
        let options = RunOptions {
            max_tasks: n as u32,
            concurrency,
            deadline: tokio::time::Instant::now() + Duration::from_secs(600),
            margin: Duration::from_secs(1),
        };
        let report = process::run(&queue, &noop, &options).await?;
        if report.completed == 0 {
            return Err(format!("a drain stalled at {completed} of {n}: {report:?}").into());
        }
        completed += report.completed;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    delete_tree(&admin, &chroot).await?;
    Ok(rate)
}
