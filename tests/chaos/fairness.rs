//! Fairness across concurrency keys under mixed traffic: a key publishing a task a tick is not
//! left behind another key's burst. For each trickle task whose first delivery was its first
//! claim (and that no fault's victim held), the flood tasks first delivered between its
//! publish and its own first delivery are counted. Each consumer takes the key lanes in turn,
//! a window each: before it meets the trickle's lane it may start what was left of the window
//! it had probed, one more window of the flood, and what it had in flight (claimed or
//! running, at most its concurrency); the sum over the consumers bounds the count. Without
//! turns, a trickle task waits behind the whole burst (the receiver answers the flood at
//! once, so that the burst drains quickly and loads the run only briefly).

use std::collections::{HashMap, HashSet};

use event_bridge::queue::WINDOW;

use crate::checks::Inputs;
use crate::consumers::{DRAIN_CONCURRENCY, MAX_TASKS_PER_RUN, WORKER_CONCURRENCY};
use crate::producer::{FLOOD_TYPE, Kind, TRICKLE_TYPE};
use crate::receiver::Delivery;

#[derive(Default)]
pub struct FairFigures {
    /// Flood tasks published, trickle tasks delivered, and of them those judged.
    pub flood: usize,
    pub trickle: usize,
    pub judged: usize,
    /// The most flood tasks that went first, and the bound.
    pub worst: usize,
    pub bound: usize,
    /// Trickle tasks with more flood tasks first than the bound.
    pub violations: Vec<String>,
}

/// The bound: per consumer, two windows and its concurrency; two workers, two drain loops and
/// the scheduled runs.
pub fn bound() -> usize {
    let place = |concurrency: &str| 2 * WINDOW + concurrency.parse::<usize>().expect("a number");
    2 * place(WORKER_CONCURRENCY) + 2 * place(DRAIN_CONCURRENCY) + place(MAX_TASKS_PER_RUN)
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> FairFigures {
    let mut f = FairFigures {
        bound: bound(),
        flood: input.published.count(Kind::Flood),
        ..FairFigures::default()
    };
    let held: HashSet<&str> = (input.faults.iter())
        .flat_map(|fault| fault.victim_held.iter().map(|(_, id)| id.as_str()))
        .collect();
    let floods = crate::lanes::first_arrivals(by_id, FLOOD_TYPE);
    for sent in input
        .published
        .sent
        .iter()
        .filter(|s| s.kind == Kind::Trickle)
    {
        let Some(first) = by_id.get(sent.id.as_str()).and_then(|l| l.first()) else {
            continue;
        };
        f.trickle += 1;
        if first.attempt != 1 || first.event_type != TRICKLE_TYPE || held.contains(&*sent.id) {
            continue;
        }
        f.judged += 1;
        let before = crate::lanes::arrived_between(&floods, sent.at, first.arrived);
        f.worst = f.worst.max(before);
        if before > f.bound {
            f.violations.push(format!(
                "{} ({}): {before} flood tasks first delivered after its publish and before it",
                sent.id, first.task
            ));
        }
    }
    f
}
