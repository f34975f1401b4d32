//! Debounce under mixed traffic: every debounced task is published three times with its key;
//! the publishes' answers say which envelope replaced which. A replaced envelope is never
//! delivered, and the one left of each key is (the lost check counts it).

use std::collections::HashMap;

use crate::checks::Inputs;
use crate::producer::Kind;
use crate::receiver::Delivery;

#[derive(Default)]
pub struct DebounceFigures {
    /// Debounced publishes, and those another replaced.
    pub publishes: usize,
    pub replaced: usize,
    /// Replaced envelopes delivered all the same (a violation), and debounced envelopes sent
    /// again after a failed publish (not judged: their answers are the retry's).
    pub delivered_replaced: Vec<String>,
    pub uncertain: usize,
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> DebounceFigures {
    let published = input.published;
    let mut f = DebounceFigures::default();
    for sent in published.sent.iter().filter(|s| s.kind == Kind::Debounced) {
        f.publishes += 1;
        if published.uncertain.contains(&sent.id) {
            f.uncertain += 1;
            continue;
        }
        if !published.replaced.contains(&sent.id) {
            continue;
        }
        f.replaced += 1;
        if let Some(first) = by_id.get(sent.id.as_str()).and_then(|l| l.first()) {
            f.delivered_replaced.push(format!(
                "{} ({}) was replaced, yet delivered at {}",
                sent.id,
                first.task,
                crate::receiver::clock(first.arrived_ms)
            ));
        }
    }
    f
}
