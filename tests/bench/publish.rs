//! Publishing before and after packing creates into multi-ops: `publish -f` of a file of
//! typical task lines by the current `event-bridge` binary and by one built from an earlier
//! commit (`BENCH_BASELINE_BIN`, from `BASELINE_REV`; `make bench BASELINE_REV=cde2c05
//! BENCH_ONLY=publish` measures these rows alone), in the same run on the same server:
//!
//! - publish/s: `publish -f` of `BENCH_PUBLISH_TASKS` (20 000) lines into an empty chroot;
//! - publish+drain/s: `publish -f` of 20 000 lines, then one `process --drain` of them, by the
//!   same binary, timed together.
//!
//! Each figure is the median of `BENCH_PUBLISH_ROUNDS` (5) runs, alternating which binary goes
//! first, each run in a fresh chroot (deleted after). Before them, the server's own rate of raw
//! sequential creates in multi-ops of several sizes, one session pipelined, says which multi-op
//! size publishing should pack to (`PACKED_RUN` in `shared/src/queue/bulk.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use event_bridge::Config;
use zookeeper_client as zk;

use crate::Result;
use crate::scale::{command, drain_rate, write_lines};
use crate::server::{delete_tree, fresh_chroot};

/// The drain's tasks, as the issue asks (publish plus drain of 20 000 tasks).
const DRAIN_TASKS: usize = 20_000;
/// Raw creates per multi-op size, and the sizes tried.
const RAW_CREATES: usize = 32_768;
const RAW_SIZES: [usize; 6] = [1, 4, 8, 16, 32, 64];
/// Multi-ops kept in flight by the raw sweep (about as many creates as a publish window).
const RAW_IN_FLIGHT: usize = 1_024;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Measures and prints the rows (with the baseline when `BENCH_BASELINE_BIN` names a binary).
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let tasks = if smoke {
        200
    } else {
        env_usize("BENCH_PUBLISH_TASKS", 20_000)
    };
    let drain_tasks = if smoke { 200 } else { DRAIN_TASKS };
    let rounds = if smoke {
        1
    } else {
        env_usize("BENCH_PUBLISH_ROUNDS", 5)
    };
    raw_sweep(addr, if smoke { 256 } else { RAW_CREATES }).await?;
    let current = harness::binary("event-bridge");
    let baseline = std::env::var("BENCH_BASELINE_BIN").ok();
    let mut bins: Vec<(&str, &Path)> = vec![("current", current.as_path())];
    let rev = std::env::var("BASELINE_REV").unwrap_or_else(|_| "baseline".into());
    if let Some(baseline) = &baseline {
        bins.push((rev.as_str(), Path::new(baseline)));
    } else {
        println!("\npublish before/after: baseline skipped (BENCH_BASELINE_BIN unset)");
    }
    let lines = std::env::temp_dir().join(format!("eb-bench-publish-{}.jsonl", std::process::id()));
    write_lines(&lines, tasks.max(drain_tasks))?;
    let drain_lines = std::env::temp_dir().join(format!(
        "eb-bench-publish-drain-{}.jsonl",
        std::process::id()
    ));
    write_lines(&drain_lines, drain_tasks)?;
    let (publish, lines) = (tasks, lines_of(&lines, tasks)?);
    let mut rates: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); bins.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..bins.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for &b in &order {
            let bin = bins[b].1;
            rates[b]
                .0
                .push(publish_rate(addr, bin, &lines, publish).await?);
            rates[b]
                .1
                .push(publish_drain_rate(addr, bin, &drain_lines, drain_tasks).await?);
        }
    }
    std::fs::remove_file(&lines)?;
    std::fs::remove_file(&drain_lines)?;
    println!();
    println!(
        "publish before/after, one `publish -f` (median of {rounds} each, alternating, fresh chroot each):"
    );
    println!(
        "  {:<10} {:>18} {:>28}",
        "binary",
        format!("publish {publish}/s"),
        format!("publish+drain {drain_tasks}/s")
    );
    let medians: Vec<(f64, f64)> = (rates.into_iter())
        .map(|(p, d)| (median(p), median(d)))
        .collect();
    for ((name, _), (p, d)) in bins.iter().zip(&medians) {
        println!("  {name:<10} {p:>18.0} {d:>28.0}");
    }
    if medians.len() == 2 {
        let ((p, d), (bp, bd)) = (medians[0], medians[1]);
        println!(
            "  current/{rev}: publish {:.2}x (target >= 1.5), publish+drain {:.2}x (target >= 1.3)",
            p / bp,
            d / bd
        );
    }
    Ok(())
}

/// The file `path` as it is: its first `n` lines are what a publish of `n` reads.
fn lines_of(path: &Path, n: usize) -> Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(path)?;
    let first: String = text.lines().take(n).map(|l| format!("{l}\n")).collect();
    let out = path.with_extension(format!("{n}.jsonl"));
    std::fs::write(&out, first)?;
    Ok(out)
}

/// `publish -f lines` (`n` of them) by `bin` into a fresh chroot: tasks per second.
async fn publish_rate(addr: &str, bin: &Path, lines: &Path, n: usize) -> Result<f64> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let took = publish_file(bin, &config, lines)?;
    let landed = count_tasks(&admin, &chroot, &config).await?;
    delete_tree(&admin, &chroot).await?;
    if landed != n {
        return Err(format!("{} published {landed} of {n}", bin.display()).into());
    }
    Ok(n as f64 / took.as_secs_f64())
}

/// `publish -f lines` (`n` of them) then one `process --drain` by `bin`, in a fresh chroot:
/// tasks per second over both.
async fn publish_drain_rate(addr: &str, bin: &Path, lines: &Path, n: usize) -> Result<f64> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let published = publish_file(bin, &config, lines)?;
    let (drained, completed) = drain_rate(bin, &config, n, 1)?;
    delete_tree(&admin, &chroot).await?;
    if completed != n {
        return Err(format!("{} completed {completed} of {n}", bin.display()).into());
    }
    Ok(n as f64 / (published + drained).as_secs_f64())
}

/// Runs `bin publish -f lines` to its end: its wall time.
fn publish_file(bin: &Path, config: &Config, lines: &Path) -> Result<Duration> {
    let path = lines.to_str().ok_or("a temporary path that is UTF-8")?;
    let started = Instant::now();
    let status = command(bin, config, &["publish", "-f", path]).status()?;
    let took = started.elapsed();
    if !status.success() {
        return Err(format!("{} publish -f failed: {status}", bin.display()).into());
    }
    Ok(took)
}

/// The tasks in the chroot's normal lane.
async fn count_tasks(admin: &zk::Client, chroot: &str, config: &Config) -> Result<usize> {
    let tasks = format!("{chroot}{}/tasks", config.root);
    let stat = admin.check_stat(&tasks).await?;
    Ok(stat.map_or(0, |s| s.num_children as usize))
}

/// The server's rate of raw sequential creates in multi-ops of each of [`RAW_SIZES`], one
/// session pipelined ([`RAW_IN_FLIGHT`] multi-ops' worth of creates in flight), printed.
async fn raw_sweep(addr: &str, creates: usize) -> Result<()> {
    let (admin, chroot, _) = fresh_chroot(addr).await?;
    let client = crate::server::admin_client(addr).await?;
    let body = vec![b'x'; crate::envelope(0).to_bytes()?.len()];
    println!();
    println!(
        "raw sequential creates of a {}-byte body in multi-ops, one session:",
        body.len()
    );
    for size in RAW_SIZES {
        let dir = format!("{chroot}/raw-{size}");
        client.create(&dir, &[], &crate::PERSISTENT).await?;
        let prefix = format!("{dir}/t-");
        let started = Instant::now();
        let window = (RAW_IN_FLIGHT / size).max(1);
        let multis = creates / size;
        for first in (0..multis).step_by(window) {
            let batch = (first..multis.min(first + window)).map(|_| {
                let mut writer = client.new_multi_writer();
                for _ in 0..size {
                    writer
                        .add_create(&prefix, &body, &crate::SEQUENTIAL)
                        .expect("a create");
                }
                writer.commit()
            });
            for done in futures::future::join_all(batch).await {
                done?;
            }
        }
        let rate = (multis * size) as f64 / started.elapsed().as_secs_f64();
        println!("  {size:>3} a multi-op: {rate:>8.0} creates/s");
    }
    delete_tree(&admin, &chroot).await?;
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
