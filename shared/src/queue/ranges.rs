//! Sets of sequence numbers as disjoint half-open ranges: what a walk knows gone, and what the
//! head keeps of what consumers knew gone beyond it.

use std::collections::{BTreeMap, BTreeSet};

/// Disjoint, non-adjacent half-open ranges `[start, end)`, kept merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges(BTreeMap<i64, i64>);

impl Ranges {
    pub fn new() -> Self {
        Ranges::default()
    }

    /// The ranges of `pairs` (`[start, end]` each, as the head stores them); empty or
    /// inverted pairs are ignored.
    pub fn from_pairs(pairs: &[[i64; 2]]) -> Self {
        let mut ranges = Ranges::new();
        for &[start, end] in pairs {
            ranges.insert(start, end);
        }
        ranges
    }

    /// The lowest `limit` ranges as `[start, end]` pairs.
    pub fn to_pairs(&self, limit: usize) -> Vec<[i64; 2]> {
        self.0.iter().take(limit).map(|(&s, &e)| [s, e]).collect()
    }

    /// Adds `[start, end)`, merging it with the ranges it touches.
    pub fn insert(&mut self, mut start: i64, mut end: i64) {
        if start >= end {
            return;
        }
        // A range starting before `start` that reaches it absorbs the new one.
        if let Some((&s, &e)) = self.0.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
        }
        let touched: Vec<i64> = self.0.range(start..=end).map(|(&s, _)| s).collect();
        for s in touched {
            if let Some(e) = self.0.remove(&s) {
                end = end.max(e);
            }
        }
        self.0.insert(start, end);
    }

    /// Every range of `other` added.
    pub fn union(&mut self, other: &Ranges) {
        for (&s, &e) in &other.0 {
            self.insert(s, e);
        }
    }

    /// These ranges less the numbers of `points`.
    pub fn without(&self, points: &BTreeSet<i64>) -> Ranges {
        let mut out = Ranges::new();
        for (&start, &end) in &self.0 {
            let mut from = start;
            for &p in points.range(start..end) {
                out.insert(from, p);
                from = p + 1;
            }
            out.insert(from, end);
        }
        out
    }

    /// The first number from `from` on that is not in a range: `from` itself unless a range
    /// holds it.
    pub fn reach(&self, from: i64) -> i64 {
        match self.0.range(..=from).next_back() {
            Some((_, &end)) if end > from => end,
            _ => from,
        }
    }

    /// The parts of the ranges at or above `from`.
    pub fn above(&self, from: i64) -> Ranges {
        let mut out = Ranges::new();
        for (&s, &e) in &self.0 {
            out.insert(s.max(from), e);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(r: &Ranges) -> Vec<[i64; 2]> {
        r.to_pairs(usize::MAX)
    }

    #[test]
    fn inserts_merge_overlapping_and_adjacent_ranges() {
        let mut r = Ranges::new();
        r.insert(10, 20);
        r.insert(30, 40);
        r.insert(20, 25); // adjacent to the first
        assert_eq!(pairs(&r), [[10, 25], [30, 40]]);
        r.insert(5, 35); // swallows both
        assert_eq!(pairs(&r), [[5, 40]]);
        r.insert(50, 50); // empty
        r.insert(60, 55); // inverted
        assert_eq!(pairs(&r), [[5, 40]]);
    }

    #[test]
    fn points_split_ranges() {
        let r = Ranges::from_pairs(&[[0, 10], [20, 30]]);
        let points = BTreeSet::from([0, 5, 6, 29, 40]);
        assert_eq!(pairs(&r.without(&points)), [[1, 5], [7, 10], [20, 29]]);
    }

    #[test]
    fn reach_follows_the_range_holding_a_number() {
        let r = Ranges::from_pairs(&[[10, 20], [25, 30]]);
        assert_eq!(r.reach(5), 5);
        assert_eq!(r.reach(10), 20);
        assert_eq!(r.reach(19), 20);
        assert_eq!(r.reach(20), 20);
        assert_eq!(r.reach(27), 30);
    }

    #[test]
    fn above_clips_and_drops() {
        let r = Ranges::from_pairs(&[[0, 10], [15, 20], [30, 40]]);
        assert_eq!(pairs(&r.above(17)), [[17, 20], [30, 40]]);
        assert_eq!(pairs(&r.above(50)), Vec::<[i64; 2]>::new());
    }
}
