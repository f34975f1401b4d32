//! Queue throughput on one ZooKeeper, as ratios to what that ZooKeeper can do at all.
//!
//! Absolute rates say more about the machine than about the code, so every size is measured
//! against the *raw create rate* of the same server in the same run: persistent sequential
//! creates of a typical task body from one pipelined session, which is what a producer costs
//! and an upper bound for any single-session write path. Per size (each in a chroot of its
//! own, removed afterwards) it measures:
//!
//! - raw creates/s: one session, windows of [`WINDOW`] creates in flight, under `/raw`;
//! - publish/s: [`Queue::publish_many`] of the same number of envelopes;
//! - drain/s: one [`process::run`] with the no-op handler over all of them, on a fresh session;
//! - drain/raw: a drained task costs a read and two writes (claim multi, complete multi), so
//!   0.5 is the ceiling and 0.4 the target;
//! - requests/task: the server's `zk_packets_received` (four-letter word `mntr`) across the
//!   drain, minus the reading's own packet, divided by the tasks completed. Target: ≤ 3, flat
//!   across sizes. It is the raw figure: it includes the run's fixed requests (clock write,
//!   snapshots, final stat) and any pings, but the drain session is the only one open and
//!   pings only when idle, so pings are near zero. Other clients on the same server would
//!   count too: the bench warns when it sees any.
//!
//! For the smallest size only, it also drains the same number of tasks through the SQS sink into
//! a fresh standard queue on moto's server (`MOTO_TEST_ENDPOINT`, default
//! `http://127.0.0.1:5000`; `make moto-up` starts it, and the bench stops at once, saying so,
//! when nothing answers there): once with batching (the route default) and once without, each
//! on a fresh session and queue, and prints each drain rate as a ratio to that size's no-op
//! drain rate, with the requests the sink made. moto is a single Python process, so these
//! ratios say how much the sink's request pattern costs against a slow local server, not what
//! real SQS would do; batched/unbatched is the comparison that carries.
//!
//! Settings: `ZK_TEST_ADDRESS` (127.0.0.1:2181), `BENCH_SIZES` (2000,50000), `BENCH_CONCURRENCY`
//! (the drain concurrency default), `MOTO_TEST_ENDPOINT`, `BENCH_ONLY=coldstart`, `semantics`, `fairness`, `debounce`, `steps` (the resumable step curve, [`steps`]), `kick` (publish to done with kicks, invocations per 1 000 tasks, [`kick`]), `concurrent` (the Lambda binary's invocations eight at once against one at a time, [`concurrent`]), `baseline` (the before/after alone, with
//! `BENCH_BASELINE_BIN` set) or `publish` (publishing before and after packing, [`publish`])
//! (only that section, [`coldstart`], [`semantics`] or [`fairness`], the second at the first of
//! `BENCH_SIZES`), `BENCH_FAIR_BIG` (100000: the backlog of the fairness section), `BENCH_SEMANTICS_ROUNDS` (5). No tracing subscriber is installed, so logging costs nothing.

mod baseline;
mod coldstart;
mod concurrent;
mod debounce;
mod fairness;
mod kick;
mod publish;
mod rss;
mod scale;
mod semantics;
mod server;
mod steps;

use std::time::{Duration, Instant};

use event_bridge::handler::FnHandler;
use event_bridge::handler::HandlerKind;
use event_bridge::sink::sqs::{self, SqsSink, SqsSpec, SqsStats};
use event_bridge::worker::Worker;
use event_bridge::{Builtin, Config, Envelope, ProcessReport, Queue, RunOptions, Task, process};
use serde_json::json;
use server::{Mntr, admin_client, close, delete_tree, four_letter, fresh_chroot};
use zookeeper_client as zk;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Creates or deletes kept in flight at once, as `publish_many` does.
const WINDOW: usize = 1_000;
const BENCH_ROOT: &str = "/eb-bench";
const PERSISTENT: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
const SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());

/// One size's figures.
struct Row {
    size: usize,
    raw: Duration,
    publish: Duration,
    drain: Duration,
    requests: u64,
    report: ProcessReport,
}

impl Row {
    fn rate(&self, took: Duration) -> f64 {
        self.size as f64 / took.as_secs_f64()
    }

    fn requests_per_task(&self) -> f64 {
        self.requests as f64 / self.report.completed.max(1) as f64
    }
}

fn main() -> Result<()> {
    // Run again as the RSS helper of a measured command: nothing else, before any runtime.
    if let Some(code) = rss::helper() {
        std::process::exit(code);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench())
}

async fn bench() -> Result<()> {
    let addr = std::env::var("ZK_TEST_ADDRESS").unwrap_or_else(|_| "127.0.0.1:2181".into());
    // `cargo bench` passes --bench; `cargo test --all-targets` does not, and gets a small
    // smoke run that proves the benchmark still works, without the figures.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let default_sizes = if smoke { "200" } else { "2000,50000" };
    let sizes: Vec<usize> = env_list("BENCH_SIZES", default_sizes)?;
    if smoke {
        println!("queue bench: smoke run (cargo test); `make bench` measures");
    }
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("coldstart") => return coldstart::section(&addr, smoke).await,
        Ok("fairness") => return fairness::section(&addr, smoke).await,
        Ok("baseline") => return baseline::section(&addr).await,
        Ok("publish") => return publish::section(&addr, smoke).await,
        Ok("debounce") => return debounce::section(&addr, smoke).await,
        Ok("steps") => return steps::section(&addr, smoke).await,
        Ok("kick") => return kick::section(&addr, smoke).await,
        Ok("concurrent") => return concurrent::section(&addr, smoke).await,
        Ok("semantics") => {
            let size = *env_list("BENCH_SIZES", "2000")?
                .first()
                .ok_or("BENCH_SIZES is empty")?;
            let concurrency = Config::default().drain_concurrency;
            return semantics::section(&addr, size, concurrency).await;
        }
        _ => {}
    }
    let concurrency = env_list("BENCH_CONCURRENCY", "")?
        .first()
        .copied()
        .unwrap_or(Config::default().drain_concurrency);

    let moto =
        std::env::var("MOTO_TEST_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".into());
    let moto_address = moto.trim_start_matches("http://").trim_end_matches('/');
    // The smoke run works without moto (it skips the SQS rows); `make bench` starts moto and
    // measures them.
    let moto_up = match std::net::TcpStream::connect(moto_address) {
        Ok(_) => true,
        Err(e) if smoke => {
            println!("queue bench: moto is not reachable at {moto} ({e}): SQS rows skipped");
            false
        }
        Err(e) => {
            eprintln!(
                "queue bench: moto is not reachable at {moto} ({e}); the SQS sink rows need it: \
                 run `make moto-up` (scripts/moto.sh up) or set MOTO_TEST_ENDPOINT"
            );
            std::process::exit(2);
        }
    };

    let version = four_letter(&addr, "srvr")?
        .lines()
        .next()
        .unwrap_or("?")
        .to_string();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?");
    let body_len = envelope(0).to_bytes()?.len();
    println!(
        "queue bench: nproc {nproc} (load {load}); {version}; drain concurrency {concurrency}; \
         body {body_len} B"
    );

    let mut rows = Vec::new();
    for &size in &sizes {
        rows.push(bench_size(&addr, size, concurrency).await?);
    }
    let smallest = rows
        .iter()
        .min_by_key(|r| r.size)
        .ok_or("BENCH_SIZES is empty")?;
    let mut sqs_rows = Vec::new();
    for batch in [true, false].into_iter().filter(|_| moto_up) {
        sqs_rows.push(bench_sqs(&addr, smallest.size, concurrency, &moto, batch).await?);
    }

    println!();
    println!(
        "{:>7}  {:>13}  {:>9}  {:>8}  {:>9}  {:>13}",
        "size", "raw creates/s", "publish/s", "drain/s", "drain/raw", "requests/task"
    );
    for row in &rows {
        let (raw, drain) = (row.rate(row.raw), row.rate(row.drain));
        println!(
            "{:>7}  {:>13.0}  {:>9.0}  {:>8.0}  {:>9.2}  {:>13.2}",
            row.size,
            raw,
            row.rate(row.publish),
            drain,
            drain / raw,
            row.requests_per_task()
        );
    }
    println!("targets: drain/raw >= 0.40 (0.50 is the ceiling), requests/task <= 3");

    let noop = smallest.rate(smallest.drain);
    if !sqs_rows.is_empty() {
        print_sqs(&sqs_rows, &moto, smallest.size, concurrency, noop);
    }
    worker_section(&addr, smoke).await?;
    semantics::section(&addr, smallest.size, concurrency).await?;
    fairness::section(&addr, smoke).await?;
    debounce::section(&addr, smoke).await?;
    steps::section(&addr, smoke).await?;
    kick::section(&addr, smoke).await?;
    concurrent::section(&addr, smoke).await?;
    if !smoke {
        baseline::section(&addr).await?;
    }
    publish::section(&addr, smoke).await?;
    coldstart::section(&addr, smoke).await?;
    let max = env_list("BENCH_MAX", "1000000")?
        .first()
        .copied()
        .unwrap_or(1_000_000);
    println!();
    println!(
        "scale curve, up to {max} queued tasks (release binaries; ratios to the first size; \
         RSS through a helper that reports {:.1} MB for `true`):",
        rss::helper_floor_kb()? as f64 / 1024.0
    );
    let points = scale::curve(&addr, max, smoke).await?;
    scale::summary(&points);
    if let Some(row) = sqs_rows
        .iter()
        .find(|r| r.report.completed as usize != r.size)
    {
        eprintln!(
            "\n!!! BROKEN BENCH: the SQS drain (batch {}) of {} tasks completed {}: {:?}",
            row.batch, row.size, row.report.completed, row.report
        );
        std::process::exit(1);
    }
    if let Some(row) = rows.iter().find(|r| r.report.completed as usize != r.size) {
        eprintln!(
            "\n!!! BROKEN BENCH: the drain of {} tasks completed {}: {:?}",
            row.size, row.report.completed, row.report
        );
        std::process::exit(1);
    }
    Ok(())
}

/// Prints the SQS sink rows beside the no-op drain.
fn print_sqs(sqs_rows: &[SqsRow], moto: &str, size: usize, concurrency: usize, noop: f64) {
    println!();
    println!("sqs sink on moto ({moto}), {size} tasks, drain concurrency {concurrency}:");
    println!(
        "{:<14}  {:>8}  {:>10}  {:>16}  {:>11}  {:>8}",
        "handler", "drain/s", "/ no-op", "SendMessageBatch", "msgs/batch", "SendMessage"
    );
    println!(
        "{:<14}  {:>8.0}  {:>10.2}  {:>16}  {:>11}  {:>8}",
        "no-op", noop, 1.0, "-", "-", "-"
    );
    for row in sqs_rows {
        let rate = row.size as f64 / row.drain.as_secs_f64();
        let per_batch = if row.stats.batches == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.1}",
                row.stats.batched_messages as f64 / row.stats.batches as f64
            )
        };
        println!(
            "{:<14}  {:>8.0}  {:>10.2}  {:>16}  {:>11}  {:>8}",
            if row.batch {
                "sqs batched"
            } else {
                "sqs unbatched"
            },
            rate,
            rate / noop,
            row.stats.batches,
            per_batch,
            row.stats.single_sends
        );
    }
}

/// Measures and prints the worker's publish → handler latency.
async fn worker_section(addr: &str, smoke: bool) -> Result<()> {
    let samples = if smoke { 20 } else { 500 };
    let latency = worker_latency(addr, samples).await?;
    println!(
        "worker: publish -> handler latency over {} tasks published one at a time: \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (target p50 < 10 ms)",
        latency.len(),
        percentile(&latency, 0.50),
        percentile(&latency, 0.99),
        percentile(&latency, 1.0)
    );
    Ok(())
}

/// Starts a worker, publishes `samples` tasks one at a time (each after the previous one
/// ran), and returns each task's time from before its create to its handler, in ms, sorted.
async fn worker_latency(addr: &str, samples: usize) -> Result<Vec<f64>> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let (seen, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let handler = FnHandler(move |_task: Task| {
        let _ = seen.send(Instant::now());
        async { Ok(()) }
    });
    let worker = Worker::new(config.clone(), handler, 4);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(async move { worker.run(stopped).await });
    let producer_client = event_bridge::session::connect(&config).await?;
    let producer = Queue::new(producer_client.clone(), &config, "bench-producer");
    producer.ensure_paths().await?;
    tokio::time::sleep(Duration::from_millis(300)).await; // let the worker arm its watch
    let mut latency = Vec::with_capacity(samples);
    for i in 0..samples {
        let sent = Instant::now();
        producer.publish(&envelope(i)).await?;
        let ran = tokio::time::timeout(Duration::from_secs(10), arrivals.recv())
            .await
            .map_err(|_| "the worker did not run a task within 10 s")?
            .ok_or("worker gone")?;
        latency.push(ran.duration_since(sent).as_secs_f64() * 1000.0);
    }
    stop.send(true)?;
    running.await??;
    drop(producer);
    close(producer_client).await;
    delete_tree(&admin, &chroot).await?;
    latency.sort_by(f64::total_cmp);
    Ok(latency)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Measures one size in a chroot of its own, and removes it.
async fn bench_size(addr: &str, size: usize, concurrency: usize) -> Result<Row> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;

    let client = event_bridge::session::connect(&config).await?;
    let producer = Queue::new(client.clone(), &config, "bench-producer");
    producer.ensure_paths().await?;
    client.create("/raw", b"", &PERSISTENT).await?;
    let body = envelope(0).to_bytes()?;
    let started = Instant::now();
    for start in (0..size).step_by(WINDOW) {
        let window = start..size.min(start + WINDOW);
        let creates: Vec<_> = window
            .map(|_| client.create("/raw/n-", &body, &SEQUENTIAL))
            .collect();
        for created in futures::future::join_all(creates).await {
            created?;
        }
    }
    let raw = started.elapsed();
    let started = Instant::now();
    delete_tree(&client, "/raw").await?;
    let raw_delete = started.elapsed();

    let envelopes: Vec<Envelope> = (0..size).map(envelope).collect();
    let started = Instant::now();
    producer.publish_many(&envelopes).await?;
    let publish = started.elapsed();
    drop(producer);
    close(client).await;
    close(admin).await;

    // Only the drain's session is open between the two readings.
    let client = event_bridge::session::connect(&config).await?;
    let consumer = Queue::new(client.clone(), &config, Queue::new_consumer_id("bench"));
    let options = RunOptions {
        max_tasks: size as u32,
        concurrency,
        deadline: tokio::time::Instant::now() + Duration::from_secs(3_600),
        margin: config.deadline_margin,
    };
    let before = Mntr::read(addr)?;
    let started = Instant::now();
    let report = process::run(&consumer, &Builtin(HandlerKind::Noop), &options).await?;
    let drain = started.elapsed();
    let after = Mntr::read(addr)?;
    drop(consumer);
    close(client).await;
    // The second reading's own packet is in its count.
    let requests = after.packets_received - before.packets_received - 1;
    let others = before.connections.max(after.connections).saturating_sub(2);

    let admin = admin_client(addr).await?;
    let started = Instant::now();
    delete_tree(&admin, &chroot).await?;
    let cleanup = started.elapsed();
    let _ = admin.delete(BENCH_ROOT, None).await; // fails while another run's chroot is there
    close(admin).await;

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "size {size}: raw creates {:.0} ms (deleted in {:.0} ms), publish {:.0} ms, drain {:.0} ms \
         ({requests} requests; claimed {}, completed {}, conflicts {}), cleanup {:.0} ms",
        ms(raw),
        ms(raw_delete),
        ms(publish),
        ms(drain),
        report.claimed,
        report.completed,
        report.lease_conflicts,
        ms(cleanup)
    );
    if others > 0 {
        println!(
            "  warning: {others} other connection(s) to ZooKeeper during the drain: requests/task overstated"
        );
    }
    Ok(Row {
        size,
        raw,
        publish,
        drain,
        requests,
        report,
    })
}

/// One drain through the SQS sink.
struct SqsRow {
    size: usize,
    batch: bool,
    drain: Duration,
    stats: SqsStats,
    report: ProcessReport,
}

/// Publishes `size` tasks in a chroot of its own and drains them through an SQS sink into a
/// fresh standard queue on moto; removes the chroot and the queue.
async fn bench_sqs(
    addr: &str,
    size: usize,
    concurrency: usize,
    endpoint: &str,
    batch: bool,
) -> Result<SqsRow> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let client = event_bridge::session::connect(&config).await?;
    let producer = Queue::new(client.clone(), &config, "bench-producer");
    producer.ensure_paths().await?;
    let envelopes: Vec<Envelope> = (0..size).map(envelope).collect();
    producer.publish_many(&envelopes).await?;
    drop(producer);
    close(client).await;

    let sqs_client = sqs::local_client(endpoint).await;
    let queue_url = sqs_client
        .create_queue()
        .queue_name(format!("eb-bench-{:016x}", fastrand::u64(..)))
        .send()
        .await
        .map_err(|e| format!("create a queue on moto at {endpoint}: {e:?}"))?
        .queue_url()
        .ok_or("moto returned no queue URL")?
        .to_string();
    let sink = SqsSink::new(
        sqs_client.clone(),
        SqsSpec {
            queue_url: queue_url.clone(),
            default_group: None,
            batch,
        },
    );
    let handler = {
        let sink = sink.clone();
        FnHandler(move |task: Task| {
            let sink = sink.clone();
            async move { sink.deliver(&task).await.map_err(Into::into) }
        })
    };

    let client = event_bridge::session::connect(&config).await?;
    let consumer = Queue::new(client.clone(), &config, Queue::new_consumer_id("bench"));
    let options = RunOptions {
        max_tasks: size as u32,
        concurrency,
        deadline: tokio::time::Instant::now() + Duration::from_secs(3_600),
        margin: config.deadline_margin,
    };
    let started = Instant::now();
    let report = process::run(&consumer, &handler, &options).await?;
    let drain = started.elapsed();
    drop(consumer);
    close(client).await;
    let stats = sink.stats();
    println!(
        "sqs (batch {batch}) {size}: drain {:.0} ms (claimed {}, completed {}, retried {}, dead {}); {stats:?}",
        drain.as_secs_f64() * 1e3,
        report.claimed,
        report.completed,
        report.retried,
        report.dead_lettered
    );

    let _ = sqs_client.delete_queue().queue_url(&queue_url).send().await;
    delete_tree(&admin, &chroot).await?;
    let _ = admin.delete(BENCH_ROOT, None).await;
    close(admin).await;
    Ok(SqsRow {
        size,
        batch,
        drain,
        stats,
        report,
    })
}

/// A typical small task: about 150 bytes of envelope.
fn envelope(i: usize) -> Envelope {
    Envelope::new("bench", json!({ "user": i }))
}

/// A comma-separated list of numbers from the environment, or `default`.
fn env_list(name: &str, default: &str) -> Result<Vec<usize>> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.into());
    let numbers = raw.split(',').map(str::trim).filter(|s| !s.is_empty());
    numbers
        .map(|n| n.parse().map_err(|e| format!("{name}={raw:?}: {e}").into()))
        .collect()
}
