//! Priority lanes under mixed traffic: a high task is not left behind the low lane. For each
//! high task whose first delivery was its first claim, the low tasks first delivered between
//! its publish and its own first delivery are counted; each consumer may start at most a
//! window of the low lane it had probed, and what it had in flight, before it meets the high
//! task: the sum over the consumers bounds the count.

use std::collections::HashMap;

use event_bridge::queue::WINDOW;

use crate::checks::Inputs;
use crate::consumers::{DRAIN_CONCURRENCY, MAX_TASKS_PER_RUN, WORKER_CONCURRENCY};
use crate::producer::{HIGH_TYPE, Kind, LOW_TYPE};
use crate::receiver::Delivery;

#[derive(Default)]
pub struct LaneFigures {
    /// High tasks delivered, and of them those judged (first delivered on their first claim).
    pub high: usize,
    pub judged: usize,
    /// The most low tasks that went first, and the bound.
    pub worst: usize,
    pub bound: usize,
    /// High tasks with more low ones first than the bound.
    pub violations: Vec<String>,
}

/// The bound: per consumer, a window and twice its concurrency (tasks in flight, and a claim
/// batch on its way); two workers, two drain loops and the scheduled runs.
pub fn bound() -> usize {
    let place = |concurrency: &str| WINDOW + 2 * concurrency.parse::<usize>().expect("a number");
    2 * place(WORKER_CONCURRENCY) + 2 * place(DRAIN_CONCURRENCY) + place(MAX_TASKS_PER_RUN)
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> LaneFigures {
    let mut f = LaneFigures {
        bound: bound(),
        ..LaneFigures::default()
    };
    // The first delivery of each low task that came on its first claim, in arrival order.
    let mut lows: Vec<_> = (by_id.values())
        .filter_map(|list| list.first())
        .filter(|d| d.event_type == LOW_TYPE && d.attempt == 1)
        .map(|d| d.arrived)
        .collect();
    lows.sort();
    for sent in input.published.sent.iter().filter(|s| s.kind == Kind::High) {
        let Some(first) = by_id.get(sent.id.as_str()).and_then(|l| l.first()) else {
            continue;
        };
        f.high += 1;
        if first.attempt != 1 || first.event_type != HIGH_TYPE {
            continue;
        }
        f.judged += 1;
        let from = lows.partition_point(|at| *at <= sent.at);
        let to = lows.partition_point(|at| *at < first.arrived);
        let before = to.saturating_sub(from);
        f.worst = f.worst.max(before);
        if before > f.bound {
            f.violations.push(format!(
                "{} ({}): {before} low tasks first delivered after its publish and before it",
                sent.id, first.task
            ));
        }
    }
    f
}
