//! What a run's start read finds for the features: a folder listed ([`Listed`]), a znode read
//! ([`StartRead`]), a feature's answer to it ([`AtStart`], [`Idle`] when the core answers for
//! an idle one), what the feature made of it ([`Kept`]), the znodes every claim checks
//! ([`ClaimCheck`]), and all of it for the run ([`Found`]) and for one feature ([`Started`]).

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use zookeeper_client as zk;

/// What the run's start read listed for one feature ([`Feature::listed_at_start`](super::Feature::listed_at_start)): the
/// names of its folder's children.
pub type Listed = BTreeSet<String>;

/// What a read of a feature's [`Feature::read_at_start`](super::Feature::read_at_start) znode found.
#[derive(Clone, Copy, Debug)]
pub struct StartRead<'a> {
    /// The znode's path.
    pub path: &'a str,
    /// Its data and stat; `None` when it is not there.
    pub found: Option<(&'a [u8], &'a zk::Stat)>,
}

/// What a feature's start read means for the run ([`Feature::saw_at_start`](super::Feature::saw_at_start)), until the
/// next one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtStart {
    /// Whether the run asks it at claim ([`Feature::at_claim`](super::Feature::at_claim), [`Feature::stops_running`](super::Feature::stops_running)):
    /// a feature with nothing to say (nothing paused) costs the run's claims nothing.
    pub asks_at_claim: bool,
    /// Whether the run claims nothing at all (the whole queue paused): it says so in its
    /// report (`queue_paused`).
    pub holds_all: bool,
    /// The znodes, each at the version read, that every claim's multi-op checks, so that no
    /// claim decided on this read lands after they changed (a pause): when one moved, the
    /// claim reads it again, tells the feature, and leaves the tasks the feature now leaves
    /// ([`AtClaim::Leave`](super::AtClaim::Leave); a feature's other answers are not asked again in that claim).
    pub checks: Vec<ClaimCheck>,
    /// What the feature made of the read (what is paused), which its claim hooks are given
    /// with this answer ([`Started::kept`]): a claim decides on the very read its multi-op
    /// checks, whichever queue's features made it.
    pub kept: Option<Kept>,
    /// The znode, at the version read, whose check stands for the feature's part in every
    /// ending while it stays so ([`IdleCheck::Ends`]; see `feature/covered.rs`).
    pub covers_ends: Option<ClaimCheck>,
}

impl AtStart {
    /// The answer to a read of a feature's znode at `path` that found it idle
    /// ([`Feature::idle`](super::Feature::idle)): nothing to ask at claim, nothing kept, and the version read checked
    /// as `check` says: by every claim, or by every ending in place of the feature's part.
    pub fn idle(path: &str, stat: &zk::Stat, check: IdleCheck) -> Self {
        let read = ClaimCheck {
            path: path.to_string(),
            version: stat.version,
            mzxid: stat.mzxid,
        };
        match check {
            IdleCheck::Claims => AtStart {
                checks: vec![read],
                ..AtStart::default()
            },
            IdleCheck::Ends => AtStart {
                covers_ends: Some(read),
                ..AtStart::default()
            },
        }
    }
}

/// What a feature's start-read znode is while the feature has nothing to do
/// ([`Feature::idle`](super::Feature::idle)): it holds `data` and has no children.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    /// Its data while idle.
    pub data: &'static [u8],
    /// What the core checks for the feature while it is idle.
    pub check: IdleCheck,
}

/// What the core checks, at the version read, while a feature is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleCheck {
    /// Every claim's multi-op ([`AtStart::checks`]): what a change to it says (a pause) must
    /// hold for every claim decided after it.
    Claims,
    /// Every ending multi-op, in place of the feature's part ([`AtStart::covers_ends`]): while
    /// it is idle the feature writes nothing at an end (no parent has children).
    Ends,
}

/// What a feature made of its start read, carried with its answer and handed back to its
/// claim hooks; opaque to the core.
#[derive(Clone)]
pub struct Kept(pub Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept(..)")
    }
}

impl PartialEq for Kept {
    /// The same when it is the same value (one read's).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A znode at the version a feature's answers rest on, which a claim's multi-op checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimCheck {
    /// Its path.
    pub path: String,
    /// The version read.
    pub version: i32,
    /// Its `mzxid` when read: which of two reads is the newer (a version starts again when
    /// the znode is made again).
    pub mzxid: i64,
}

/// What the run's start read found for one feature, as its claim hooks are given it.
#[derive(Clone, Copy, Debug)]
pub struct Started<'a> {
    /// What it listed for it ([`Feature::listed_at_start`](super::Feature::listed_at_start)); empty when it asked for none.
    pub listed: &'a Listed,
    /// What the feature made of its read ([`AtStart::kept`]), if anything.
    kept: Option<&'a Kept>,
}

impl<'a> Started<'a> {
    /// What the feature made of its read, as the type `T` it made.
    pub fn kept<T: Any>(&self) -> Option<&'a T> {
        self.kept.and_then(|kept| kept.0.downcast_ref::<T>())
    }
}

/// What the run's start read found for the features, by their index in the list: what it
/// listed for each that asked ([`Feature::listed_at_start`](super::Feature::listed_at_start)), and what the others' reads
/// ([`Feature::read_at_start`](super::Feature::read_at_start)) told the run. Good for the queue whose features read it: the
/// indices are those of its list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    listed: Vec<(usize, Listed)>,
    read: Vec<(usize, AtStart)>,
}

impl Found {
    /// The listings `listed`, and what each read told (`read`), each with the index of the
    /// feature that asked for it.
    pub fn new(listed: Vec<(usize, Listed)>, read: Vec<(usize, AtStart)>) -> Self {
        let mut found = Found {
            listed,
            read: Vec::new(),
        };
        for (at, answer) in read {
            found.learn(at, answer);
        }
        found
    }

    /// Takes what the feature at index `at` answered to a read of its znode, in place of
    /// what it answered before.
    pub fn learn(&mut self, at: usize, answer: AtStart) {
        self.read.retain(|(i, _)| *i != at);
        self.read.push((at, answer));
    }

    /// What the feature at index `at` answered to its read, if it asked for one.
    pub fn answer(&self, at: usize) -> Option<&AtStart> {
        (self.read.iter()).find(|(i, _)| *i == at).map(|(_, a)| a)
    }

    /// Whether the feature at index `at` is not asked at claim in this run: its listing came
    /// back empty, or its read says it has nothing to say.
    pub fn empty_for(&self, at: usize) -> bool {
        self.answer(at).is_some_and(|a| !a.asks_at_claim)
            || (self.listed.iter()).any(|(i, l)| *i == at && l.is_empty())
    }

    /// What was found for the feature at index `at`, as its claim hooks are given it.
    pub fn of(&self, at: usize) -> Started<'_> {
        static NOTHING: Listed = BTreeSet::new();
        let listed = (self.listed.iter())
            .find(|(i, _)| *i == at)
            .map_or(&NOTHING, |(_, listed)| listed);
        let kept = self.answer(at).and_then(|a| a.kept.as_ref());
        Started { listed, kept }
    }

    /// Whether a feature's read says the run claims nothing (the whole queue paused).
    pub fn holds_all(&self) -> bool {
        self.read.iter().any(|(_, a)| a.holds_all)
    }

    /// What every claim's multi-op checks, each with the index of the feature it is for.
    pub fn checks(&self) -> Vec<(usize, ClaimCheck)> {
        (self.read.iter())
            .flat_map(|(at, a)| a.checks.iter().map(move |c| (*at, c.clone())))
            .collect()
    }
}

/// A znode's stat with the given version, `mzxid` and number of children, the rest zero or
/// one: what the features' unit tests hand their hooks.
#[cfg(test)]
pub(crate) fn stat_for_tests(version: i32, mzxid: i64, num_children: i32) -> zk::Stat {
    zk::Stat {
        czxid: 1,
        mzxid,
        pzxid: 1,
        ctime: 0,
        mtime: 0,
        version,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 0,
        num_children,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(asks_at_claim: bool, holds_all: bool, version: i32) -> AtStart {
        let path = "/q/paused".to_string();
        let mzxid = i64::from(version) * 10;
        AtStart {
            asks_at_claim,
            holds_all,
            checks: vec![ClaimCheck {
                path,
                version,
                mzxid,
            }],
            kept: Some(Kept(Arc::new(version))),
            covers_ends: None,
        }
    }

    #[test]
    fn a_read_answered_again_replaces_what_the_feature_said_before() {
        let mut found = Found::new(vec![(0, Listed::new())], vec![(1, answer(true, true, 3))]);
        assert!(found.empty_for(0), "its listing came back empty");
        assert!(!found.empty_for(1) && found.holds_all());
        assert_eq!(
            found.checks(),
            [(1, answer(true, true, 3).checks[0].clone())]
        );
        found.learn(1, answer(false, false, 4));
        assert!(found.empty_for(1), "nothing to say now");
        assert!(!found.holds_all(), "the run may claim again");
        assert_eq!(found.checks().len(), 1, "its check replaced, not added");
        assert_eq!(found.checks()[0].1.version, 4);
        assert_eq!(
            found.of(1).kept::<i32>(),
            Some(&4),
            "what it made of the new read"
        );
        assert_eq!(found.of(1).kept::<String>(), None, "as the type it made");
        found.learn(1, AtStart::default());
        assert!(
            found.checks().is_empty(),
            "its znode is gone: nothing to check"
        );
    }
}
