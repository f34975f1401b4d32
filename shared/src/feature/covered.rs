//! Ends covered by a check: while a feature's start-read znode is idle ([`Feature::idle`] with
//! [`IdleCheck::Ends`]), the feature has nothing to write at any task's end, so the core does
//! not ask it for its part ([`Feature::end_part`]). Each ending multi-op checks the znode at
//! the version it was last seen idle instead ([`Covered`]). When the check fails, the znode is
//! read again: still idle, the check goes on at its new version; not idle, the feature is asked
//! for its part after all, and the ending is tried again with it.
//!
//! The newest idle version of each such feature is kept by feature name ([`LatestCovers`],
//! which a queue's clones share): learnt from every start read, and from every check that had
//! to read the znode again.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use zookeeper_client as zk;

use super::{AtStart, ClaimCheck, End, EndPart, EndWrite, Feature, Leaving, Site};
use crate::error::Result;

/// Rereads of a covering znode one ending makes at most, before it fails.
const REREADS: usize = 64;

/// Where one feature's ends are covered, when they are: the znode and its idle version, with
/// the `mzxid` of the read that said so.
#[derive(Default)]
pub struct Cover(Mutex<(Option<ClaimCheck>, i64)>);

impl Cover {
    fn get(&self) -> Option<ClaimCheck> {
        self.0.lock().expect("not poisoned").0.clone()
    }

    /// Takes `seen` (`None`: the znode is not idle), from a read whose znode had `mzxid`, when
    /// that read is at least as new as the one kept.
    fn learn(&self, seen: Option<ClaimCheck>, mzxid: i64) {
        let mut kept = self.0.lock().expect("not poisoned");
        if kept.1 <= mzxid {
            *kept = (seen, mzxid);
        }
    }

    /// The znode is gone: nothing covered until a read finds it again.
    fn uncover(&self) {
        self.0.lock().expect("not poisoned").0 = None;
    }
}

/// The newest cover of each feature's ends, by the feature's name.
#[derive(Default)]
pub struct LatestCovers(Mutex<Vec<(&'static str, Arc<Cover>)>>);

impl LatestCovers {
    /// Learns from `answer`, the feature `name`'s to a read of its znode that found it with
    /// `stat` (`None`: not there): its ends covered, or no longer. `covers_ends`: whether the
    /// feature's idle znode covers its ends at all (nothing is kept for one that does not).
    pub fn saw(
        &self,
        name: &'static str,
        covers_ends: bool,
        answer: &AtStart,
        stat: Option<&zk::Stat>,
    ) {
        if !covers_ends {
            return;
        }
        match stat {
            Some(stat) => (self.cover(name)).learn(answer.covers_ends.clone(), stat.mzxid),
            None => self.cover(name).uncover(),
        }
    }

    fn cover(&self, name: &'static str) -> Arc<Cover> {
        let mut kept = self.0.lock().expect("not poisoned");
        match kept.iter().find(|(n, _)| *n == name) {
            Some((_, cover)) => Arc::clone(cover),
            None => {
                let cover = Arc::new(Cover::default());
                kept.push((name, Arc::clone(&cover)));
                cover
            }
        }
    }

    /// The cover of the feature named `name` and the check it stands for now, when its ends
    /// are covered: the check as of this one look, which a part then keeps (a later read that
    /// uncovers them changes what the next ending sees, not this one's check).
    pub(super) fn of(&self, name: &str) -> Option<(Arc<Cover>, ClaimCheck)> {
        let kept = self.0.lock().expect("not poisoned");
        let (_, cover) = kept.iter().find(|(n, _)| *n == name)?;
        Some((Arc::clone(cover), cover.get()?))
    }
}

/// What a covered feature is asked about a leaving task, should its check fail: what names
/// the task, not its envelope (a feature that covers its ends reads no more).
struct Named {
    name: String,
    id: Option<String>,
    reason: Option<String>,
    within_another: bool,
}

impl Named {
    fn of(leaving: &Leaving<'_>) -> Self {
        Named {
            name: leaving.name.to_string(),
            id: leaving.id.map(str::to_string),
            reason: leaving.reason.map(str::to_string),
            within_another: leaving.within_another,
        }
    }

    fn leaving(&self) -> Leaving<'_> {
        Leaving {
            name: &self.name,
            id: self.id.as_deref(),
            envelope: None,
            held: None,
            delivered: None,
            reason: self.reason.as_deref(),
            within_another: self.within_another,
        }
    }
}

/// A covered feature's part in one ending: the check of its idle znode, or, once that failed
/// on a znode no longer idle, the feature's own part.
pub(super) struct Covered {
    feature: Arc<dyn Feature>,
    idle_data: &'static [u8],
    cover: Arc<Cover>,
    check: Option<ClaimCheck>,
    how: End,
    tasks: Vec<Named>,
    inner: Option<Box<dyn EndPart>>,
    rereads: usize,
}

impl Covered {
    /// The part of `feature` (idle when its znode holds `idle_data`) in the ending of
    /// `leaving` `how`, its ends covered by `cover` with `check`.
    pub(super) fn new(
        feature: Arc<dyn Feature>,
        idle_data: &'static [u8],
        (cover, check): (Arc<Cover>, ClaimCheck),
        leaving: &[Leaving<'_>],
        how: End,
    ) -> Self {
        Covered {
            check: Some(check),
            feature,
            idle_data,
            cover,
            how,
            tasks: leaving.iter().map(Named::of).collect(),
            inner: None,
            rereads: 0,
        }
    }

    /// The check failed: reads the znode again. Idle still, the check goes on at its new
    /// version; not idle, the feature is asked for its part.
    async fn read_again(&mut self, site: &Site<'_>, path: String) -> Result<()> {
        let read = site.read(&path).await?;
        let idle = read.as_ref().and_then(|(data, stat)| {
            (data == self.idle_data && stat.num_children == 0).then(|| ClaimCheck {
                path: path.clone(),
                version: stat.version,
                mzxid: stat.mzxid,
            })
        });
        match &read {
            Some((_, stat)) => self.cover.learn(idle.clone(), stat.mzxid),
            None => self.cover.uncover(),
        }
        self.check = idle;
        if self.check.is_none() {
            let leaving: Vec<Leaving> = self.tasks.iter().map(Named::leaving).collect();
            self.inner = self.feature.end_part(site, &leaving, self.how).await?;
        }
        Ok(())
    }
}

impl EndPart for Covered {
    fn writes(&mut self, still: &[usize]) -> Vec<EndWrite> {
        match (&mut self.inner, &self.check) {
            (Some(inner), _) => inner.writes(still),
            (None, Some(check)) => vec![EndWrite::Check {
                path: check.path.clone(),
                version: check.version,
            }],
            (None, None) => Vec::new(),
        }
    }

    fn failed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        k: usize,
        error: &'a zk::Error,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            if let Some(inner) = &mut self.inner {
                return inner.failed(site, k, error).await;
            }
            self.rereads += 1;
            match self.check.as_ref() {
                Some(check) if self.rereads <= REREADS => {
                    let path = check.path.clone();
                    self.read_again(site, path).await?;
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
    }

    fn landed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        results: Vec<&'a zk::MultiWriteResult>,
    ) -> BoxFuture<'a, ()> {
        match &mut self.inner {
            Some(inner) => inner.landed(site, results),
            None => Box::pin(async {}),
        }
    }

    fn after(&mut self) -> Option<Box<dyn crate::feature::AfterEnd>> {
        self.inner.as_mut()?.after()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covering(version: i32, mzxid: i64) -> AtStart {
        AtStart {
            covers_ends: Some(ClaimCheck {
                path: "/q/dependents".into(),
                version,
                mzxid,
            }),
            ..AtStart::default()
        }
    }

    /// A cover is kept by name, the newest read wins, a read that is not idle uncovers, and
    /// a feature whose idle znode covers claims has none.
    #[test]
    fn the_newest_read_of_a_covering_znode_decides_whether_ends_are_covered() {
        let latest = LatestCovers::default();
        assert!(latest.of("dependents").is_none(), "nothing read yet");
        let stat = |mzxid| crate::feature::stat_for_tests(0, mzxid, 0);
        let saw = |answer: &AtStart, stat: Option<&zk::Stat>| {
            latest.saw("dependents", true, answer, stat);
        };
        saw(&covering(3, 30), Some(&stat(30)));
        let (cover, check) = latest.of("dependents").expect("covered");
        assert_eq!(check.version, 3);
        saw(&covering(2, 20), Some(&stat(20)));
        assert_eq!(cover.get().map(|c| c.version), Some(3), "an older read");
        saw(&AtStart::default(), Some(&stat(40)));
        assert!(latest.of("dependents").is_none(), "children since");
        saw(&covering(5, 50), Some(&stat(50)));
        assert!(latest.of("dependents").is_some(), "idle again");
        saw(&AtStart::default(), None);
        assert!(latest.of("dependents").is_none(), "gone");
        saw(&covering(6, 60), Some(&stat(60)));
        assert!(latest.of("dependents").is_some(), "made again");
        latest.saw("paused", false, &covering(7, 70), Some(&stat(70)));
        assert!(
            latest.of("paused").is_none(),
            "its idle znode covers claims"
        );
    }
}
