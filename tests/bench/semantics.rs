//! What the queue's semantics cost: publishing with an idempotency key against without,
//! draining tasks in ordered groups against ungrouped ones, and with completion records
//! (`KEEP_DONE`) against without, through a route with `max_in_flight` and one with limits per
//! concurrency key against without, and over the three priority lanes against the normal one
//! alone, each pair in the same run on the same server, each
//! measurement in a chroot of its own.

use std::time::{Duration, Instant};

use event_bridge::handler::{FnHandler, Handler, HandlerError};
use event_bridge::limit::{KeyLimit, Limit, RouteLimits};
use event_bridge::task::Priority;
use event_bridge::{Config, Envelope, Queue, RunOptions, Task, process};
use serde_json::json;

use crate::Result;
use crate::server::{delete_tree, fresh_chroot};

/// Groups the grouped drain spreads its tasks over.
const GROUPS: usize = 100;

/// Slots of the limited route of the gated drain: as many as the drain's concurrency, so that
/// the row measures what the gate costs, not what it holds back.
const GATE_SLOTS: u32 = 64;

/// Concurrency keys the keyed drain spreads its tasks over, and how many of one key may run
/// at once (a cap that is not the bottleneck: what the gates cost, not what they hold back).
const CONCURRENCY_KEYS: usize = 100;
const PER_KEY_SLOTS: u32 = 64;

/// The no-op handler, behind a route with these limits.
struct Gated(Limit);

impl Handler for Gated {
    async fn handle(&self, _task: &Task) -> std::result::Result<(), HandlerError> {
        Ok(())
    }

    fn limits(&self) -> RouteLimits {
        RouteLimits {
            types: [("bench".to_string(), self.0)].into(),
            default: Limit::default(),
        }
    }
}

/// Rounds of the section (`BENCH_SEMANTICS_ROUNDS`, default 5): each measures every row and
/// its baseline once, one after the other, and a row's figure is the median of its rounds'
/// ratios (the machine's speed drifts between rounds, less within one).
fn rounds() -> usize {
    std::env::var("BENCH_SEMANTICS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5)
}

/// One round's rates, tasks per second.
struct Round {
    plain: f64,
    keyed: f64,
    ungrouped: f64,
    grouped: f64,
    kept: f64,
    gated: f64,
    keyed_drain: f64,
    laned: f64,
    batch_publish: f64,
    batch_drain: f64,
}

/// Measures every row once over `n` tasks.
async fn round(addr: &str, n: usize, concurrency: usize) -> Result<Round> {
    let plain = publish_rate(addr, n, |_| None).await?;
    let keyed = publish_rate(addr, n, |i| Some(format!("key-{i}"))).await?;
    let ungrouped = drain_rate(addr, n, concurrency, |_, _| {}, |_| {}).await?;
    let group = |i: usize, e: &mut Envelope| e.group = Some(format!("g{}", i % GROUPS));
    let grouped = drain_rate(addr, n, concurrency, group, |_| {}).await?;
    let keep = |c: &mut Config| c.keep_done = Some(Duration::from_secs(3600));
    let kept = drain_rate(addr, n, concurrency, |_, _| {}, keep).await?;
    let lanes = [Priority::High, Priority::Normal, Priority::Low];
    let lane = |i: usize, e: &mut Envelope| e.priority = lanes[i % 3];
    let laned = drain_rate(addr, n, concurrency, lane, |_| {}).await?;
    let capped = Limit {
        max_in_flight: Some(GATE_SLOTS),
        ..Limit::default()
    };
    let gated = gated_drain_rate(addr, n, concurrency, capped, |_| None).await?;
    let per_key = Limit {
        per_key: Some(KeyLimit {
            max_in_flight: Some(PER_KEY_SLOTS),
            rate_per_ms: None,
        }),
        ..Limit::default()
    };
    let key = |i: usize| Some(format!("tenant-{}", i % CONCURRENCY_KEYS));
    let keyed_drain = gated_drain_rate(addr, n, concurrency, per_key, key).await?;
    let batch_publish = batch_rate(addr, n, concurrency, false).await?;
    let batch_drain = batch_rate(addr, n, concurrency, true).await?;
    Ok(Round {
        batch_publish,
        batch_drain,
        plain,
        keyed,
        ungrouped,
        grouped,
        kept,
        gated,
        keyed_drain,
        laned,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Measures [`rounds`] rounds over `n` tasks and prints each row: the median rates, and the
/// median of the rounds' ratios with their range.
pub async fn section(addr: &str, n: usize, concurrency: usize) -> Result<()> {
    let count = rounds();
    let mut rounds = Vec::with_capacity(count);
    for _ in 0..count {
        rounds.push(round(addr, n, concurrency).await?);
    }
    println!();
    println!(
        "semantics, {n} tasks each (one session; drains with the no-op handler, concurrency {concurrency}; medians of {count} rounds):"
    );
    type Rate = fn(&Round) -> f64;
    let rows: [(&str, Rate, String, Rate, String); 8] = [
        (
            "publish",
            |r| r.plain,
            "without keys".into(),
            |r| r.keyed,
            "with a key each".into(),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "ungrouped".into(),
            |r| r.grouped,
            format!("in {GROUPS} ordered groups"),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "without KEEP_DONE".into(),
            |r| r.kept,
            "with completion records".into(),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "unlimited".into(),
            |r| r.gated,
            format!("through a route with max_in_flight {GATE_SLOTS}"),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "without keys".into(),
            |r| r.keyed_drain,
            format!(
                "over {CONCURRENCY_KEYS} concurrency keys, per_key max_in_flight {PER_KEY_SLOTS}"
            ),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "normal only".into(),
            |r| r.laned,
            "a third each high, normal, low".into(),
        ),
        (
            "publish",
            |r| r.plain,
            "without keys".into(),
            |r| r.batch_publish,
            "into one batch".into(),
        ),
        (
            "drain",
            |r| r.ungrouped,
            "no batch".into(),
            |r| r.batch_drain,
            "all of one batch (counted, one callback)".into(),
        ),
    ];
    for (what, base, base_label, rate, label) in rows {
        let ratios: Vec<f64> = rounds.iter().map(|r| rate(r) / base(r)).collect();
        let (low, high) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        let base = median(rounds.iter().map(base).collect());
        let semantic = median(rounds.iter().map(rate).collect());
        println!(
            "  {what:<8} {base:>8.0}/s {base_label}, {semantic:>8.0}/s {label} ({:.2}x; rounds {low:.2}-{high:.2})",
            median(ratios)
        );
    }
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
    let queue = bench_queue(&config).await?;
    let batch = envelopes(n, key);
    let started = Instant::now();
    let published = queue.publish_all(&batch).await?;
    let took = started.elapsed();
    assert_eq!(published.len(), n);
    delete_tree(&admin, &chroot).await?;
    Ok(n as f64 / took.as_secs_f64())
}

/// Publishes `n` tasks (each shaped by `shape`: a group, a lane), then drains them with one run
/// on a config changed by `setting`; tasks per second.
async fn drain_rate(
    addr: &str,
    n: usize,
    concurrency: usize,
    shape: impl Fn(usize, &mut Envelope),
    setting: impl FnOnce(&mut Config),
) -> Result<f64> {
    let (admin, chroot, mut config) = fresh_chroot(addr).await?;
    setting(&mut config);
    let queue = bench_queue(&config).await?;
    let mut batch = envelopes(n, |_| None);
    for (i, envelope) in batch.iter_mut().enumerate() {
        shape(i, envelope);
    }
    queue.publish_many(&batch).await?;
    let noop = FnHandler(|_task: Task| async { Ok(()) });
    let rate = drain_with(&queue, &noop, n, concurrency).await?;
    delete_tree(&admin, &chroot).await?;
    Ok(rate)
}

/// Publishes `n` tasks (with the concurrency key `key` gives each) and drains them through a
/// route with `limit`.
async fn gated_drain_rate(
    addr: &str,
    n: usize,
    concurrency: usize,
    limit: Limit,
    key: impl Fn(usize) -> Option<String>,
) -> Result<f64> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = bench_queue(&config).await?;
    let mut batch = envelopes(n, |_| None);
    for (i, envelope) in batch.iter_mut().enumerate() {
        envelope.concurrency_key = key(i);
    }
    queue.publish_many(&batch).await?;
    let rate = drain_with(&queue, &Gated(limit), n, concurrency).await?;
    delete_tree(&admin, &chroot).await?;
    Ok(rate)
}

/// Opens a batch, publishes `n` members into it and seals it: the publish's tasks per
/// second, or (`drain`) those of a drain of the members after it.
async fn batch_rate(addr: &str, n: usize, concurrency: usize, drain: bool) -> Result<f64> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = bench_queue(&config).await?;
    let open = event_bridge::batch::Open {
        on_complete: "bench.done".into(),
        ..Default::default()
    };
    event_bridge::batch::open(&queue, "bench", open).await?;
    let mut batch = envelopes(n, |_| None);
    for envelope in &mut batch {
        envelope.batch = Some("bench".into());
    }
    let started = Instant::now();
    queue.publish_all(&batch).await?;
    let publish = n as f64 / started.elapsed().as_secs_f64();
    event_bridge::batch::seal(&queue, "bench").await?;
    let rate = match drain {
        false => publish,
        true => {
            let noop = FnHandler(|_task: Task| async { Ok(()) });
            drain_with(&queue, &noop, n, concurrency).await?
        }
    };
    if drain {
        let status = event_bridge::batch::status(&queue, "bench").await?;
        assert_eq!(
            (status.completed, status.pending),
            (n as u64, 0),
            "{status:?}"
        );
    }
    delete_tree(&admin, &chroot).await?;
    Ok(rate)
}

/// Drains `n` tasks with `handler` in as many runs as it takes; tasks per second.
async fn drain_with<H: Handler>(
    queue: &Queue,
    handler: &H,
    n: usize,
    concurrency: usize,
) -> Result<f64> {
    let started = Instant::now();
    let mut completed = 0;
    while completed < n as u32 {
        let options = RunOptions {
            max_tasks: n as u32,
            concurrency,
            deadline: tokio::time::Instant::now() + Duration::from_secs(600),
            margin: Duration::from_secs(1),
        };
        let report = process::run(queue, handler, &options).await?;
        if report.completed == 0 {
            return Err(format!("a drain stalled at {completed} of {n}: {report:?}").into());
        }
        completed += report.completed;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// A queue on a session of its own over `config`, its base paths made.
async fn bench_queue(config: &Config) -> Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    let queue = Queue::new(client, config, "bench");
    queue.ensure_paths().await?;
    Ok(queue)
}
