//! One scheduled run with debounced keys pending: its cost against the number of keys that
//! wait and are not due. A run finds due keys through the due index (`debounce-due/`), so it
//! should cost the same at 10^2 keys pending as at 10^5 (issue 33): the figures are the
//! requests the server received for the run (`mntr`'s `zk_packets_received`) and the run's
//! time, at each size, and their ratios to the smallest size in the same run. The run fires
//! one key that is due (published a millisecond's period before it) and runs its task, as a
//! scheduled `process_events` invocation does.
//!
//! Before the run is measured, the keys are filed: the publish of a key puts it in the
//! index's unfiled bucket, and the runs after a burst of publishes file them (16 384 a run);
//! those runs are reported apart, as what a burst of new keys costs once.

use std::time::{Duration, Instant};

use event_bridge::task::Debounce;
use event_bridge::{Builtin, Envelope, Queue, RunOptions, process};
use serde_json::json;

use crate::Result;
use crate::server::{Mntr, close, delete_tree, fresh_chroot};

/// Envelopes per publish call.
const PUBLISH_CHUNK: usize = 5_000;

/// What one size's measured run cost.
struct Cost {
    keys: usize,
    filing_runs: usize,
    filing: Duration,
    requests: u64,
    took: Duration,
}

/// Measures one scheduled run at each number of pending keys (10^2 and 10^5; 10^2 and 10^3
/// in the smoke run) and prints the costs and their ratios.
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let sizes: &[usize] = if smoke {
        &[100, 1_000]
    } else {
        &[100, 100_000]
    };
    let mut costs = Vec::new();
    for &keys in sizes {
        costs.push(measure(addr, keys).await?);
    }
    println!();
    println!("debounce: one scheduled run firing one due key, beside keys pending and not due:");
    println!(
        "  {:>8}  {:>9}  {:>10}  {:>8}  {:>9}  {:>12}",
        "pending", "requests", "/ first", "run ms", "/ first", "filing runs"
    );
    let first = &costs[0];
    for cost in &costs {
        println!(
            "  {:>8}  {:>9}  {:>10.2}  {:>8.1}  {:>9.2}  {:>5} ({:.1} s)",
            cost.keys,
            cost.requests,
            cost.requests as f64 / first.requests.max(1) as f64,
            cost.took.as_secs_f64() * 1_000.0,
            cost.took.as_secs_f64() / first.took.as_secs_f64().max(1e-9),
            cost.filing_runs,
            cost.filing.as_secs_f64()
        );
    }
    println!("  target: flat (requests the same at every size)");
    Ok(())
}

/// Publishes `keys` keys due in an hour, files them, then publishes one due at once and
/// measures the scheduled run that fires and runs it.
async fn measure(addr: &str, keys: usize) -> Result<Cost> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let client = event_bridge::session::connect(&config).await?;
    let queue = Queue::new(client, &config, "bench-debounce");
    queue.ensure_paths().await?;
    let hour = 3_600_000;
    for start in (0..keys).step_by(PUBLISH_CHUNK) {
        let chunk: Vec<Envelope> = (start..keys.min(start + PUBLISH_CHUNK))
            .map(|n| debounced(&format!("doc-{n}"), hour))
            .collect();
        queue.publish_all(&chunk).await?;
    }
    let options = RunOptions {
        max_tasks: 1,
        concurrency: 1,
        deadline: tokio::time::Instant::now() + Duration::from_secs(600),
        margin: Duration::from_secs(1),
    };
    let handler = Builtin(event_bridge::handler::HandlerKind::Noop);
    let filing = Instant::now();
    let mut filing_runs = 0;
    while unfiled(&admin, &chroot).await? > 0 {
        process::run(&queue, &handler, &options).await?;
        filing_runs += 1;
    }
    let filing = filing.elapsed();
    queue.publish_all(&[debounced("due-now", 1)]).await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = Mntr::read(addr)?;
    let started = Instant::now();
    let report = process::run(&queue, &handler, &options).await?;
    let took = started.elapsed();
    let after = Mntr::read(addr)?;
    if report.completed != 1 {
        return Err(format!("the run at {keys} keys completed {}", report.completed).into());
    }
    drop(queue);
    delete_tree(&admin, &chroot).await?;
    close(admin).await;
    Ok(Cost {
        keys,
        filing_runs,
        filing,
        // The second `mntr` reading's own packet.
        requests: after.packets_received - before.packets_received - 1,
        took,
    })
}

fn debounced(key: &str, period_ms: u64) -> Envelope {
    let mut envelope = Envelope::new("search.reindex", json!({ "key": key }));
    envelope.debounce = Some(Debounce {
        key: key.into(),
        period_ms,
        max_ms: None,
    });
    envelope
}

/// Keys in the due index's unfiled bucket.
async fn unfiled(admin: &zookeeper_client::Client, chroot: &str) -> Result<usize> {
    let path = format!("{chroot}/queue/debounce-due/0000000000000");
    Ok(admin
        .check_stat(&path)
        .await?
        .map_or(0, |s| s.num_children as usize))
}
