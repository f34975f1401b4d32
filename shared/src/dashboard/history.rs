//! The dashboard's memory: the queue's figures sampled while it runs, the last hour of them,
//! and throughput from the change of `tasks/`' removals between two samples.

use std::collections::VecDeque;

/// The figures of one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// When it was taken (this machine's clock, ms since the epoch: it only places points).
    pub at_ms: i64,
    pub depth: usize,
    pub leased: usize,
    pub dead: usize,
    /// Tasks removed from `tasks/` since it was made (see [`crate::stats::Counters`]).
    pub removed: u64,
}

/// Samples no older than `span_ms` before the newest.
#[derive(Clone, Debug)]
pub struct History {
    span_ms: i64,
    samples: VecDeque<Sample>,
}

impl History {
    pub fn new(span_ms: i64) -> Self {
        History {
            span_ms,
            samples: VecDeque::new(),
        }
    }

    pub fn span_ms(&self) -> i64 {
        self.span_ms
    }

    /// Adds a sample and forgets those that fell out of the span.
    pub fn push(&mut self, sample: Sample) {
        self.samples.push_back(sample);
        while self
            .samples
            .front()
            .is_some_and(|first| sample.at_ms - first.at_ms > self.span_ms)
        {
            self.samples.pop_front();
        }
    }

    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter()
    }

    /// Tasks leaving `tasks/` per minute between each sample and the one before it, placed at
    /// the later one. A count that went down (the root was made anew) gives no point.
    pub fn throughput(&self) -> Vec<(i64, f64)> {
        let pairs = self.samples.iter().zip(self.samples.iter().skip(1));
        pairs
            .filter(|(a, b)| b.at_ms > a.at_ms && b.removed >= a.removed)
            .map(|(a, b)| {
                let minutes = (b.at_ms - a.at_ms) as f64 / 60_000.0;
                (b.at_ms, (b.removed - a.removed) as f64 / minutes)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_ms: i64, depth: usize, removed: u64) -> Sample {
        Sample {
            at_ms,
            depth,
            removed,
            ..Sample::default()
        }
    }

    #[test]
    fn samples_older_than_the_span_are_forgotten() {
        let mut history = History::new(60_000);
        for i in 0..10 {
            history.push(at(i * 10_000, i as usize, 0));
        }
        let kept: Vec<i64> = history.samples().map(|s| s.at_ms).collect();
        assert_eq!(
            kept,
            vec![30_000, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000]
        );
    }

    #[test]
    fn throughput_is_removals_per_minute_between_samples() {
        let mut history = History::new(3_600_000);
        history.push(at(0, 100, 1_000));
        history.push(at(30_000, 80, 1_020));
        history.push(at(90_000, 80, 1_020));
        history.push(at(120_000, 80, 5)); // the root was made anew: no point
        assert_eq!(history.throughput(), vec![(30_000, 40.0), (90_000, 0.0)]);
    }
}
