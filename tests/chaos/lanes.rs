//! Priority lanes under mixed traffic: a high task is not left behind the low lane. For each
//! high task whose first delivery was its first claim, the low tasks first delivered between
//! its publish and its own first delivery are counted; each consumer may start at most a
//! window of the low lane it had probed, and what it had in flight, before it meets the high
//! task: the sum over the consumers bounds the count.

use std::collections::HashMap;

use tokio::time::Instant;

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
    let lows = first_arrivals(by_id, LOW_TYPE);
    for sent in input.published.sent.iter().filter(|s| s.kind == Kind::High) {
        let Some(first) = by_id.get(sent.id.as_str()).and_then(|l| l.first()) else {
            continue;
        };
        f.high += 1;
        if first.attempt != 1 || first.event_type != HIGH_TYPE {
            continue;
        }
        f.judged += 1;
        let before = arrived_between(&lows, sent.at, first.arrived);
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

/// When the tasks of `event_type` whose first delivery came on their first claim arrived, in
/// order.
pub fn first_arrivals(by_id: &HashMap<&str, Vec<&Delivery>>, event_type: &str) -> Vec<Instant> {
    let mut arrivals: Vec<Instant> = (by_id.values())
        .filter_map(|list| list.first())
        .filter(|d| d.event_type == event_type && d.attempt == 1)
        .map(|d| d.arrived)
        .collect();
    arrivals.sort();
    arrivals
}

/// How many of `arrivals` (in order) came after `published` and before `first`.
pub fn arrived_between(arrivals: &[Instant], published: Instant, first: Instant) -> usize {
    let from = arrivals.partition_point(|at| *at <= published);
    let to = arrivals.partition_point(|at| *at < first);
    to.saturating_sub(from)
}
