//! Before and after: the drain rate of ungrouped tasks with the current `event-bridge` binary
//! against one built from an earlier commit (`make bench` builds it from `BASELINE_REV`, the
//! commit before ordered groups, and passes its path in `BENCH_BASELINE_BIN`), in the same run
//! on the same server. Rounds alternate which binary goes first; the figures are medians.

use std::path::Path;

use event_bridge::Queue;

use crate::Result;
use crate::scale::{drain_rate, producer, refill};
use crate::server::{delete_tree, fresh_chroot};

/// Tasks each drain takes: long enough (about a second) that a process start is noise.
const TASKS: usize = 10_000;
/// Drains of each binary (`BENCH_BASELINE_ROUNDS`, default 7).
fn rounds() -> usize {
    std::env::var("BENCH_BASELINE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7)
}

/// Measures and prints the comparison when `BENCH_BASELINE_BIN` names a binary.
pub async fn section(addr: &str) -> Result<()> {
    let Ok(baseline) = std::env::var("BENCH_BASELINE_BIN") else {
        println!("\nbefore/after: skipped (BENCH_BASELINE_BIN unset; `make bench` sets it)");
        return Ok(());
    };
    let (baseline, current) = (Path::new(&baseline), harness::binary("event-bridge"));
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let queue = producer(&config).await?;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let rounds = rounds();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [baseline, current.as_path()]
        } else {
            [current.as_path(), baseline]
        };
        for bin in order {
            let rate = drain(&queue, bin, &config).await?;
            if bin == baseline {
                before.push(rate);
            } else {
                after.push(rate);
            }
        }
    }
    delete_tree(&admin, &chroot).await?;
    let (before, after) = (median(before), median(after));
    println!();
    println!(
        "before/after, ungrouped drain of {TASKS} tasks by one `process --drain` (median of {rounds} each, alternating):"
    );
    println!(
        "  {}: {before:>8.0}/s; current: {after:>8.0}/s ({:.2}x; target >= 0.95)",
        std::env::var("BASELINE_REV").unwrap_or_else(|_| "baseline".into()),
        after / before
    );
    Ok(())
}

/// Fills the queue with `TASKS` tasks and drains them with `bin`; tasks per second.
async fn drain(queue: &Queue, bin: &Path, config: &event_bridge::Config) -> Result<f64> {
    refill(queue, TASKS).await?;
    let (took, completed) = drain_rate(bin, config, TASKS, 1)?;
    if completed != TASKS {
        return Err(format!("{} completed {completed} of {TASKS}", bin.display()).into());
    }
    Ok(TASKS as f64 / took.as_secs_f64())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
