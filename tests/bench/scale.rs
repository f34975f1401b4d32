//! The scale curve: what one command costs as the backlog grows from 10^3 to 10^6 queued
//! tasks, run as users run it (the `event-bridge` binary, a process per command).
//!
//! One chroot holds a growing backlog; at each size (`10^3`, `10^4`, `10^5`, `10^6`, up to
//! `BENCH_MAX`) it measures, each as a ratio to the figure at the first size:
//!
//! - `publish -f` of the lines that grow the backlog to this size: rate and max RSS;
//! - one scheduled `process` (one task), one `reap`, one `stats --json`: wall time, bytes the
//!   server sent (its `zk_response_bytes` counter across the command) and max RSS, the median
//!   of five runs of each (the largest RSS). RSS is each command's own peak, measured through a
//!   small helper process (see `rss.rs`: spawned from the bench, a command would report the
//!   bench's peak);
//! - the drain rate of one `process --drain` and of four at once (each as an operator runs one,
//!   allowed up to `DRAIN` tasks, so four take up to four times that, or the whole backlog when
//!   smaller): the tasks they completed over the wall time until the last ends. The four are
//!   compared with the raw pipelined create rate of `publish -f` putting as many back right
//!   after (a process, as each drain is): each try is such a pair, and its ratio is the
//!   pair's. Below `DRAIN` tasks a drain is over in a tenth of a second, as long as a hiccup
//!   of a shared machine, so each figure is the median of five tries (the one drain's too).
//!   The create rate of one session inside the bench (no process to start) is printed beside
//!   it.
//!
//! Before the first size, the server is warmed up by untimed rounds of four drains on a chroot
//! of their own (see [`warm_up`]); their times are printed. The backlog's head is written by
//! one run before the first size (a queue without a
//! head is listed once to find it): it is not what later runs cost.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use event_bridge::{Config, Envelope, Queue};
use serde_json::json;

use crate::server::{Mntr, delete_tree, fresh_chroot};
use crate::{Result, WINDOW, rss};

/// Tasks a drain measurement takes, at most.
const DRAIN: usize = 20_000;

/// What one command cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub wall: Duration,
    /// Bytes the server sent across the command.
    pub bytes: u64,
    /// The process's maximum resident set, in KiB.
    pub max_rss_kb: u64,
}

/// One size's figures.
pub struct Point {
    pub size: usize,
    pub publish: Cost,
    pub published: usize,
    pub process: Cost,
    pub reap: Cost,
    pub stats: Cost,
    pub drain_one: f64,
    pub drain_four: f64,
    /// Pipelined creates by `publish -f` (a process, as the drains are), per second.
    pub raw: f64,
    /// Pipelined creates from one session inside the bench, per second.
    pub session: f64,
    /// Each try of four drains: their wall time and that of `publish -f` putting as many back.
    pub tries: Vec<(Duration, Duration)>,
}

impl Point {
    /// Four drains' rate over `publish -f`'s: the median of the tries' ratios. A try is a
    /// pair, four drains and then `publish -f` of as many tasks, measured a moment apart on
    /// the same machine: its ratio is the two wall times'.
    pub fn four_over_raw(&self) -> f64 {
        let pairs = self.tries.iter();
        median(
            pairs
                .map(|(four, raw)| raw.as_secs_f64() / four.as_secs_f64())
                .collect(),
        )
    }
}

/// Measures the curve on the ZooKeeper at `addr`, up to `max` queued tasks.
pub async fn curve(addr: &str, max: usize, smoke: bool) -> Result<Vec<Point>> {
    let sizes: Vec<usize> = if smoke {
        vec![100, 1_000]
    } else {
        [1_000, 10_000, 100_000, 1_000_000]
            .into_iter()
            .filter(|s| *s <= max)
            .collect()
    };
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let bin = harness::binary("event-bridge");
    let dir = std::env::temp_dir().join(format!("eb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut points = Vec::new();
    let mut queued = 0;
    let rounds = if smoke {
        (2, 100)
    } else {
        (WARM_UP_ROUNDS, 1_000)
    };
    let warm = warm_up(addr, &bin, rounds.0, rounds.1).await?;
    let ms: Vec<String> = warm.iter().map(|w| w.as_millis().to_string()).collect();
    println!(
        "warm-up: {} untimed rounds of four drains of {} tasks on a chroot of their own, ms: {}",
        rounds.0,
        rounds.1,
        ms.join(" ")
    );
    let producer = producer(&config).await?;
    run(&bin, &config, &["process"], addr)?; // writes the head
    for &size in &sizes {
        let lines = dir.join(format!("grow-{size}.jsonl"));
        write_lines(&lines, size - queued)?;
        let arg = lines.to_string_lossy().to_string();
        let publish = run(&bin, &config, &["publish", "-f", &arg], addr)?;
        std::fs::remove_file(&lines)?;
        let published = size - queued;
        queued = size;
        let setup = Setup {
            bin: &bin,
            config: &config,
            addr,
            producer: &producer,
            dir: &dir,
        };
        let point = measure(&setup, size, publish, published).await?;
        print(&point, points.first());
        points.push(point);
    }
    std::fs::remove_dir_all(&dir)?;
    delete_tree(&admin, &chroot).await?;
    Ok(points)
}

/// Untimed rounds of four drains before the first size.
const WARM_UP_ROUNDS: usize = 30;

/// Warms the server up for the drains: `rounds` of four drains of `tasks` tasks on a chroot
/// of their own, untimed. A ZooKeeper just started takes tens of such rounds to reach its
/// steady speed (its JVM compiling and sizing its heap as it goes: four drains of 1 000 tasks
/// took 290 to 360 ms in the first round, 90 to 150 ms after fifty; 100 000 tasks drained by
/// one process before did not make up for them), and the first size would measure that
/// instead of the drains. Returns each round's wall time, printed so the cold figures show.
async fn warm_up(addr: &str, bin: &Path, rounds: usize, tasks: usize) -> Result<Vec<Duration>> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let producer = producer(&config).await?;
    let mut walls = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        refill(&producer, tasks).await?;
        walls.push(drain_rate(bin, &config, tasks, 4)?.0);
    }
    drop(producer);
    delete_tree(&admin, &chroot).await?;
    Ok(walls)
}

/// What every measurement runs against.
#[derive(Clone, Copy)]
struct Setup<'a> {
    bin: &'a Path,
    config: &'a Config,
    addr: &'a str,
    producer: &'a Queue,
    dir: &'a Path,
}

async fn measure(setup: &Setup<'_>, size: usize, publish: Cost, published: usize) -> Result<Point> {
    let Setup {
        bin,
        config,
        addr,
        producer,
        dir,
    } = *setup;
    // A command is over in tens of milliseconds, as long as a hiccup of a shared machine: the
    // median of five (the largest RSS).
    let (mut process, mut reap, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        process.push(run(bin, config, &["process"], addr)?);
        refill(producer, 1).await?;
        reap.push(run(bin, config, &["reap"], addr)?);
        stats.push(run(bin, config, &["stats", "--json"], addr)?);
    }
    let (process, reap, stats) = (typical(process), typical(reap), typical(stats));
    let drain = DRAIN.min(size);
    // A short drain is over in a tenth of a second, as long as a hiccup of a shared machine:
    // below the full drain size, the median of five of each.
    let tries = if drain < DRAIN { 5 } else { 1 };
    let (mut ones, mut sessions) = (Vec::new(), Vec::new());
    for _ in 0..tries {
        let (took, completed) = drain_rate(bin, config, drain, 1)?;
        ones.push(completed as f64 / took.as_secs_f64());
        sessions.push(completed as f64 / refill(producer, completed).await?.as_secs_f64());
    }
    let (mut fours, mut raws, mut walls) = (Vec::new(), Vec::new(), Vec::new());
    let lines = dir.join("drained.jsonl");
    for _ in 0..tries {
        let (took, completed) = drain_rate(bin, config, drain, 4)?;
        write_lines(&lines, completed)?;
        let arg = lines.to_string_lossy().to_string();
        let put_back = run(bin, config, &["publish", "-f", &arg], addr)?;
        fours.push(completed as f64 / took.as_secs_f64());
        raws.push(completed as f64 / put_back.wall.as_secs_f64());
        walls.push((took, put_back.wall));
    }
    std::fs::remove_file(&lines)?;
    Ok(Point {
        size,
        publish,
        published,
        process,
        reap,
        stats,
        drain_one: median(ones),
        drain_four: median(fours),
        raw: median(raws),
        session: median(sessions),
        tries: walls,
    })
}

/// Runs of each one-shot command per size.
const REPEATS: usize = 5;

/// The median wall time and bytes of `costs`, and the largest RSS.
fn typical(costs: Vec<Cost>) -> Cost {
    let mut walls: Vec<Duration> = costs.iter().map(|c| c.wall).collect();
    let mut bytes: Vec<u64> = costs.iter().map(|c| c.bytes).collect();
    walls.sort();
    bytes.sort();
    Cost {
        wall: walls[walls.len() / 2],
        bytes: bytes[bytes.len() / 2],
        max_rss_kb: costs.iter().map(|c| c.max_rss_kb).max().unwrap_or(0),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `processes` drains at once, each as an operator runs one (`process --drain`), allowed
/// up to `cap` tasks: the wall time until the last ends, and the tasks they completed.
pub(crate) fn drain_rate(
    bin: &Path,
    config: &Config,
    cap: usize,
    processes: usize,
) -> Result<(Duration, usize)> {
    let cap = cap.to_string();
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..processes {
        let mut drain = command(bin, config, &["process", "--drain", "--max-tasks", &cap]);
        let mut child = drain.stdout(std::process::Stdio::piped()).spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        children.push((child, stdout));
    }
    let mut outputs = Vec::new();
    for (child, stdout) in children {
        let (code, _) = rss::wait(child)?;
        if code != 0 {
            return Err("a drain failed".into());
        }
        outputs.push(stdout);
    }
    let took = started.elapsed();
    let mut completed = 0;
    for mut stdout in outputs {
        let mut report = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut report)?;
        let report: serde_json::Value = serde_json::from_str(&report)?;
        completed += report["completed"]
            .as_u64()
            .ok_or("a drain reported no count")? as usize;
    }
    Ok((took, completed))
}

/// Puts `n` tasks back (the raw pipelined create rate: one session, windows of creates).
pub(crate) async fn refill(producer: &Queue, n: usize) -> Result<Duration> {
    let started = Instant::now();
    for start in (0..n).step_by(WINDOW) {
        let window: Vec<Envelope> = (start..n.min(start + WINDOW)).map(envelope).collect();
        producer.publish_many(&window).await?;
    }
    Ok(started.elapsed())
}

pub(crate) async fn producer(config: &Config) -> Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    let queue = Queue::new(client, config, "bench-producer");
    queue.ensure_paths().await?;
    Ok(queue)
}

fn envelope(i: usize) -> Envelope {
    Envelope::new("bench", json!({ "user": i }))
}

/// `n` JSON lines of typical tasks.
pub(crate) fn write_lines(path: &Path, n: usize) -> Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for i in 0..n {
        writeln!(
            file,
            "{}",
            json!({ "type": "bench", "payload": { "user": i } })
        )?;
    }
    file.flush()?;
    Ok(())
}

/// Runs the binary to its end (through the RSS helper): wall time, bytes the server sent
/// meanwhile, its own max RSS. The wall time includes the helper's start, about a
/// millisecond, at every size alike.
fn run(bin: &Path, config: &Config, args: &[&str], addr: &str) -> Result<Cost> {
    let before = Mntr::read(addr)?.response_bytes;
    let file = rss::file();
    let mut command = rss::command(bin, &file)?;
    with_env(&mut command, config, args);
    let started = Instant::now();
    let (code, _) = rss::wait(command.spawn()?)?;
    let wall = started.elapsed();
    let bytes = Mntr::read(addr)?.response_bytes.saturating_sub(before);
    if code != 0 {
        return Err(format!("event-bridge {args:?} failed").into());
    }
    Ok(Cost {
        wall,
        bytes,
        max_rss_kb: rss::read(&file)?,
    })
}

pub(crate) fn command(bin: &Path, config: &Config, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(bin);
    with_env(&mut command, config, args);
    command
}

/// `args`, and the environment of a command of the bench.
fn with_env(command: &mut std::process::Command, config: &Config, args: &[&str]) {
    command
        .args(args)
        .env("ZOOKEEPER_CONNECTION_STRING", &config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &config.root)
        .env("EVENT_BRIDGE_HANDLER", "noop")
        .env("TIME_BUDGET_MS", "600000")
        .env_remove("ROUTES")
        .env_remove("ROUTES_FILE")
        .stdout(std::process::Stdio::null());
}

/// Prints one size, with ratios to the first.
fn print(p: &Point, first: Option<&Point>) {
    let first = first.unwrap_or(p);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mb = |kb: u64| kb as f64 / 1024.0;
    let cmd = |name: &str, c: &Cost, f: &Cost| {
        println!(
            "  {name:<8} {:>8.1} ms ({:>5.2}x)  {:>10} B read ({:>5.2}x)  {:>6.1} MB RSS",
            c.wall.as_secs_f64() * 1000.0,
            ratio(c.wall.as_secs_f64(), f.wall.as_secs_f64()),
            c.bytes,
            ratio(c.bytes as f64, f.bytes as f64),
            mb(c.max_rss_kb)
        );
    };
    println!("backlog {}:", p.size);
    println!(
        "  publish  {:>8.0} tasks/s over {} lines  {:>6.1} MB RSS",
        p.published as f64 / p.publish.wall.as_secs_f64(),
        p.published,
        mb(p.publish.max_rss_kb)
    );
    cmd("process", &p.process, &first.process);
    cmd("reap", &p.reap, &first.reap);
    cmd("stats", &p.stats, &first.stats);
    println!(
        "  drain    {:>8.0} tasks/s one ({:.2}x of the first size), {:>8.0} four at once; raw creates {:.0}/s (publish -f; {:.0}/s from one session in the bench); four/raw {:.2}",
        p.drain_one,
        ratio(p.drain_one, first.drain_one),
        p.drain_four,
        p.raw,
        p.session,
        p.four_over_raw()
    );
    if p.tries.len() > 1 {
        let tries: Vec<String> = p
            .tries
            .iter()
            .map(|(four, raw)| format!("{} / {}", four.as_millis(), raw.as_millis()))
            .collect();
        println!(
            "  four drains / publish -f, ms, each try: {}",
            tries.join(", ")
        );
    }
}

/// The targets of the curve, checked on the figures: flat from the first size to the last.
pub fn summary(points: &[Point]) {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return;
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mb = |kb: u64| kb as f64 / 1024.0;
    let max_rss = |f: fn(&Point) -> u64| points.iter().map(f).max().unwrap_or(0);
    println!(
        "from {} to {} queued: process {:.2}x time, {:.2}x bytes; reap {:.2}x time; stats {:.2}x time; drain {:.2}x (targets: <= 1.5x, drain >= 0.9x)",
        first.size,
        last.size,
        ratio(
            last.process.wall.as_secs_f64(),
            first.process.wall.as_secs_f64()
        ),
        ratio(last.process.bytes as f64, first.process.bytes as f64),
        ratio(last.reap.wall.as_secs_f64(), first.reap.wall.as_secs_f64()),
        ratio(
            last.stats.wall.as_secs_f64(),
            first.stats.wall.as_secs_f64()
        ),
        ratio(last.drain_one, first.drain_one),
    );
    println!(
        "max RSS: process {:.1} MB, reap {:.1} MB, stats {:.1} MB (target <= 32), publish {:.1} MB (target <= 64); four drains / raw creates: min {:.2} (target >= 0.6)",
        mb(max_rss(|p| p.process.max_rss_kb)),
        mb(max_rss(|p| p.reap.max_rss_kb)),
        mb(max_rss(|p| p.stats.max_rss_kb)),
        mb(max_rss(|p| p.publish.max_rss_kb)),
        points
            .iter()
            .map(Point::four_over_raw)
            .fold(f64::INFINITY, f64::min),
    );
}
