//! The newest answers of the features whose znodes every claim checks (a pause): what this
//! process read last, which a claim takes instead of its run's copy when newer.
//!
//! A run reads the features' znodes at its start and again when its copy is half a second old
//! (`process`'s fresh restraints). A claim whose check failed reads the znode again in
//! between; every claim of this process after it takes that read, rather than each failing
//! its check once more until its run reads again.

use std::sync::Mutex;

use crate::feature::{AtStart, Features, Found};

/// The newest answer of each feature to a read of its checked znode, by the feature's name:
/// the clones of a queue share it, and may call different lists of features
/// (`Queue::with_features`), whose indices differ.
#[derive(Default)]
pub(in crate::queue) struct LatestChecks(Mutex<Vec<(&'static str, AtStart)>>);

impl LatestChecks {
    /// Keeps `answer`, the feature at `at`'s to a read of its znode, when newer than what is
    /// kept. An answer without a check (its znode not there) forgets what was kept: a check of
    /// a znode that is gone would fail every claim.
    pub(in crate::queue) fn saw(&self, at: usize, features: &Features, answer: &AtStart) {
        let Some(name) = features.name_at(at) else {
            return;
        };
        let mut kept = self.0.lock().expect("not poisoned");
        if answer.checks.is_empty() {
            kept.retain(|(n, _)| *n != name);
            return;
        }
        match kept.iter_mut().find(|(n, _)| *n == name) {
            Some((_, older)) if newer(answer, older) => *older = answer.clone(),
            Some(_) => {}
            None => kept.push((name, answer.clone())),
        }
    }

    /// `found` (read for `features`) with every kept answer of one of them newer than its own
    /// taken in, when there is one.
    pub(in crate::queue) fn newer_than(&self, found: &Found, features: &Features) -> Option<Found> {
        let kept = self.0.lock().expect("not poisoned");
        let mut updated: Option<Found> = None;
        for (name, answer) in kept.iter() {
            let Some(at) = features.index_of(name) else {
                continue;
            };
            let copy = updated.as_ref().unwrap_or(found);
            if newer_than_copy(answer, at, copy) {
                (updated.get_or_insert_with(|| found.clone())).learn(at, answer.clone());
            }
        }
        updated
    }
}

/// Whether `answer` rests on newer reads than `older`: one of its checks of the same znode
/// read after (a higher `mzxid`).
fn newer(answer: &AtStart, older: &AtStart) -> bool {
    (answer.checks.iter()).any(|check| {
        (older.checks.iter()).any(|old| old.path == check.path && old.mzxid < check.mzxid)
    })
}

/// Whether `answer`, the feature at `at`'s, rests on newer reads than `found` says of it (or
/// `found` checks nothing of it: its znode was not there when read).
fn newer_than_copy(answer: &AtStart, at: usize, found: &Found) -> bool {
    let copy = (found.answer(at)).map_or(&[][..], |a| &a.checks[..]);
    (answer.checks.iter()).any(|check| {
        copy.is_empty()
            || (copy.iter()).any(|old| old.path == check.path && old.mzxid < check.mzxid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::ClaimCheck;

    fn at_version(version: i32, asks_at_claim: bool) -> AtStart {
        AtStart {
            asks_at_claim,
            holds_all: false,
            checks: vec![ClaimCheck {
                path: "/q/paused".into(),
                version,
                mzxid: i64::from(version) * 100,
            }],
            kept: None,
            covers_ends: None,
        }
    }

    /// A feature that is only its name.
    struct Named(&'static str);

    impl crate::feature::Feature for Named {
        fn name(&self) -> &'static str {
            self.0
        }
    }

    fn features(names: [&'static str; 3]) -> Features {
        let list: Vec<std::sync::Arc<dyn crate::feature::Feature>> = (names.into_iter())
            .map(|n| std::sync::Arc::new(Named(n)) as _)
            .collect();
        Features::new(list)
    }

    #[test]
    fn a_claim_takes_the_newer_of_its_runs_copy_and_what_a_claim_read_since() {
        let list = features(["a", "b", "pause"]);
        let latest = LatestChecks::default();
        let copy = Found::new(Vec::new(), vec![(2, at_version(3, false))]);
        assert_eq!(latest.newer_than(&copy, &list), None, "nothing read since");
        latest.saw(2, &list, &at_version(4, true));
        let newer = latest.newer_than(&copy, &list).expect("a newer read");
        assert!(!newer.empty_for(2), "the newer read asks at claim");
        assert_eq!(newer.checks()[0].1.version, 4);
        let unread = Found::new(Vec::new(), vec![(2, AtStart::default())]);
        assert!(
            latest.newer_than(&unread, &list).is_some(),
            "its znode was not there"
        );
        let as_new = Found::new(Vec::new(), vec![(2, at_version(4, true))]);
        assert_eq!(
            latest.newer_than(&as_new, &list),
            None,
            "the copy is as new"
        );
        latest.saw(2, &list, &at_version(2, false));
        let kept = latest
            .newer_than(&copy, &list)
            .expect("still the newer read");
        assert_eq!(kept.checks()[0].1.version, 4, "an older read is not kept");
        let other = features(["pause", "a", "b"]);
        let theirs = Found::new(Vec::new(), vec![(0, at_version(3, false))]);
        let moved = latest
            .newer_than(&theirs, &other)
            .expect("found by its name");
        assert_eq!(moved.checks(), [(0, at_version(4, true).checks[0].clone())]);
        let without = features(["a", "b", "c"]);
        assert_eq!(
            latest.newer_than(&copy, &without),
            None,
            "a list without it"
        );
        latest.saw(2, &list, &AtStart::default());
        assert_eq!(
            latest.newer_than(&unread, &list),
            None,
            "its znode is gone: forgotten"
        );
    }
}
