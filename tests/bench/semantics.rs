//! What the queue's semantics cost: publishing with an idempotency key against without,
//! draining tasks in ordered groups against ungrouped ones, and with completion records
//! (`KEEP_DONE`) against without, through a route with `max_in_flight` and one with limits per
//! concurrency key against without, and over the three priority lanes against the normal one
//! alone, each pair in the same run on the same server, each
//! measurement in a chroot of its own. Each row gives its rate and the requests per task
//! ZooKeeper received for it (`mntr`'s `zk_packets_received`): the rate moves with the machine,
//! the requests hardly at all, so they show what a mechanism saves where the rate cannot.

use std::time::{Duration, Instant};

use event_bridge::handler::{FnHandler, Handler, HandlerError};
use event_bridge::limit::{KeyLimit, Limit, RouteLimits};
use event_bridge::task::Priority;
use event_bridge::{Config, Envelope, Queue, RunOptions, Task, process};
use serde_json::json;

use crate::Result;
use crate::server::{Mntr, delete_tree, fresh_chroot};

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

/// One measurement: tasks per second, and the requests ZooKeeper received per task.
#[derive(Clone, Copy)]
struct Measure {
    rate: f64,
    requests: f64,
}

/// Counts the requests ZooKeeper at `addr` receives from here on (see [`Requests::per_task`]).
struct Requests<'a> {
    addr: &'a str,
    before: u64,
}

impl<'a> Requests<'a> {
    fn count(addr: &'a str) -> Result<Self> {
        let before = Mntr::read(addr)?.packets_received;
        Ok(Requests { addr, before })
    }

    /// The requests received since [`Requests::count`] (less the second reading's own), per
    /// task of `n`; with `took`, the rate.
    fn per_task(self, n: usize, took: Duration) -> Result<Measure> {
        let after = Mntr::read(self.addr)?.packets_received;
        Ok(Measure {
            rate: n as f64 / took.as_secs_f64(),
            requests: after.saturating_sub(self.before + 1) as f64 / n as f64,
        })
    }
}

/// One round: per row (in [`rows`]' order), the baseline's measurement and the semantic's,
/// one right after the other.
type Round = [(Measure, Measure); ROWS];

/// Rows of the section.
const ROWS: usize = 8;

/// The rows: what is measured, the baseline's label and the semantic's.
fn rows() -> [(&'static str, &'static str, String); ROWS] {
    [
        ("publish", "without keys", "with a key each".into()),
        ("drain", "ungrouped", format!("in {GROUPS} ordered groups")),
        (
            "drain",
            "without KEEP_DONE",
            "with completion records".into(),
        ),
        (
            "drain",
            "unlimited",
            format!("through a route with max_in_flight {GATE_SLOTS}"),
        ),
        (
            "drain",
            "without keys",
            format!(
                "over {CONCURRENCY_KEYS} concurrency keys, per_key max_in_flight {PER_KEY_SLOTS}"
            ),
        ),
        (
            "drain",
            "normal only",
            "a third each high, normal, low".into(),
        ),
        ("publish", "without keys", "into one batch".into()),
        (
            "drain",
            "no batch",
            "all of one batch (counted, one callback)".into(),
        ),
    ]
}

/// Two rates measured one right after the other, the semantic's first when `flip` (every other
/// round), so that neither always meets the server as the other left it: (baseline, semantic).
async fn pair<B, S>(flip: bool, base: B, semantic: S) -> Result<(Measure, Measure)>
where
    B: std::future::Future<Output = Result<Measure>>,
    S: std::future::Future<Output = Result<Measure>>,
{
    if flip {
        let semantic = semantic.await?;
        Ok((base.await?, semantic))
    } else {
        let base = base.await?;
        Ok((base, semantic.await?))
    }
}

/// Measures every row once over `n` tasks, each against a baseline of its own taken beside it
/// (one baseline for every row let a slow or fast baseline drain move them all at once).
async fn round(addr: &str, n: usize, concurrency: usize, flip: bool) -> Result<Round> {
    let plain = || publish_rate(addr, n, |_| None);
    let ungrouped = || drain_rate(addr, n, concurrency, |_, _| {}, |_| {});
    let keyed = publish_rate(addr, n, |i| Some(format!("key-{i}")));
    let group = |i: usize, e: &mut Envelope| e.group = Some(format!("g{}", i % GROUPS));
    let grouped = drain_rate(addr, n, concurrency, group, |_| {});
    let keep = |c: &mut Config| c.keep_done = Some(Duration::from_secs(3600));
    let kept = drain_rate(addr, n, concurrency, |_, _| {}, keep);
    let capped = Limit {
        max_in_flight: Some(GATE_SLOTS),
        ..Limit::default()
    };
    let gated = gated_drain_rate(addr, n, concurrency, capped, |_| None);
    let per_key = Limit {
        per_key: Some(KeyLimit {
            max_in_flight: Some(PER_KEY_SLOTS),
            rate_per_ms: None,
        }),
        ..Limit::default()
    };
    let key = |i: usize| Some(format!("tenant-{}", i % CONCURRENCY_KEYS));
    let keyed_drain = gated_drain_rate(addr, n, concurrency, per_key, key);
    let lanes = [Priority::High, Priority::Normal, Priority::Low];
    let lane = |i: usize, e: &mut Envelope| e.priority = lanes[i % 3];
    let laned = drain_rate(addr, n, concurrency, lane, |_| {});
    Ok([
        pair(flip, plain(), keyed).await?,
        pair(flip, ungrouped(), grouped).await?,
        pair(flip, ungrouped(), kept).await?,
        pair(flip, ungrouped(), gated).await?,
        pair(flip, ungrouped(), keyed_drain).await?,
        pair(flip, ungrouped(), laned).await?,
        pair(flip, plain(), batch_rate(addr, n, concurrency, false)).await?,
        pair(flip, ungrouped(), batch_rate(addr, n, concurrency, true)).await?,
    ])
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Measures [`rounds`] rounds over `n` tasks and prints each row: the median rates, and the
/// median of the rounds' ratios with their range.
pub async fn section(addr: &str, n: usize, concurrency: usize) -> Result<()> {
    let count = rounds();
    let mut rounds: Vec<Round> = Vec::with_capacity(count);
    for r in 0..count {
        rounds.push(round(addr, n, concurrency, r % 2 == 1).await?);
    }
    println!();
    println!(
        "semantics, {n} tasks each (one session; drains with the no-op handler, concurrency {concurrency}; medians of {count} rounds, each row beside a baseline of its own, in turn first and second):"
    );
    for (row, (what, base_label, label)) in rows().into_iter().enumerate() {
        let rate = |m: &Measure| m.rate;
        let ratios: Vec<f64> = rounds
            .iter()
            .map(|r| r[row].1.rate / r[row].0.rate)
            .collect();
        let (low, high) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        let base = median(rounds.iter().map(|r| rate(&r[row].0)).collect());
        let semantic = median(rounds.iter().map(|r| rate(&r[row].1)).collect());
        println!(
            "  {what:<8} {base:>8.0}/s {base_label}, {semantic:>8.0}/s {label} ({:.2}x; rounds {low:.2}-{high:.2})",
            median(ratios)
        );
    }
    println!(
        "requests per task (medians of the same rounds; the rate's cost in ZooKeeper's work):"
    );
    for (row, (what, base_label, label)) in rows().into_iter().enumerate() {
        let base = median(rounds.iter().map(|r| r[row].0.requests).collect());
        let semantic = median(rounds.iter().map(|r| r[row].1.requests).collect());
        println!(
            "  {what:<8} {base:>6.2} {base_label}, {semantic:>6.2} {label} ({:.2}x)",
            semantic / base
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
async fn publish_rate(
    addr: &str,
    n: usize,
    key: impl Fn(usize) -> Option<String>,
) -> Result<Measure> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = bench_queue(&config).await?;
    let batch = envelopes(n, key);
    let requests = Requests::count(addr)?;
    let started = Instant::now();
    let published = queue.publish_all(&batch).await?;
    let measure = requests.per_task(n, started.elapsed())?;
    assert_eq!(published.len(), n);
    delete_tree(&admin, &chroot).await?;
    Ok(measure)
}

/// Publishes `n` tasks (each shaped by `shape`: a group, a lane), then drains them with one run
/// on a config changed by `setting`; tasks per second.
async fn drain_rate(
    addr: &str,
    n: usize,
    concurrency: usize,
    shape: impl Fn(usize, &mut Envelope),
    setting: impl FnOnce(&mut Config),
) -> Result<Measure> {
    let (admin, chroot, mut config) = fresh_chroot(addr).await?;
    setting(&mut config);
    let queue = bench_queue(&config).await?;
    let mut batch = envelopes(n, |_| None);
    for (i, envelope) in batch.iter_mut().enumerate() {
        shape(i, envelope);
    }
    queue.publish_many(&batch).await?;
    let noop = FnHandler(|_task: Task| async { Ok(()) });
    let measure = drain_with(addr, &queue, &noop, n, concurrency).await?;
    delete_tree(&admin, &chroot).await?;
    Ok(measure)
}

/// Publishes `n` tasks (with the concurrency key `key` gives each) and drains them through a
/// route with `limit`.
async fn gated_drain_rate(
    addr: &str,
    n: usize,
    concurrency: usize,
    limit: Limit,
    key: impl Fn(usize) -> Option<String>,
) -> Result<Measure> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = bench_queue(&config).await?;
    let mut batch = envelopes(n, |_| None);
    for (i, envelope) in batch.iter_mut().enumerate() {
        envelope.concurrency_key = key(i);
    }
    queue.publish_many(&batch).await?;
    let measure = drain_with(addr, &queue, &Gated(limit), n, concurrency).await?;
    delete_tree(&admin, &chroot).await?;
    Ok(measure)
}

/// Opens a batch, publishes `n` members into it and seals it: the publish's tasks per
/// second, or (`drain`) those of a drain of the members after it.
async fn batch_rate(addr: &str, n: usize, concurrency: usize, drain: bool) -> Result<Measure> {
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
    let requests = Requests::count(addr)?;
    let started = Instant::now();
    queue.publish_all(&batch).await?;
    let publish = requests.per_task(n, started.elapsed())?;
    event_bridge::batch::seal(&queue, "bench").await?;
    let measure = match drain {
        false => publish,
        true => {
            let noop = FnHandler(|_task: Task| async { Ok(()) });
            drain_with(addr, &queue, &noop, n, concurrency).await?
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
    Ok(measure)
}

/// Drains `n` tasks with `handler` in as many runs as it takes.
async fn drain_with<H: Handler>(
    addr: &str,
    queue: &Queue,
    handler: &H,
    n: usize,
    concurrency: usize,
) -> Result<Measure> {
    let requests = Requests::count(addr)?;
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
    requests.per_task(n, started.elapsed())
}

/// A queue on a session of its own over `config`, its base paths made.
async fn bench_queue(config: &Config) -> Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    let queue = Queue::new(client, config, "bench");
    queue.ensure_paths().await?;
    Ok(queue)
}
