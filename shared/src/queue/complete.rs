//! Completing held tasks: task and lease deleted together, many tasks in one multi-op, with
//! what each completion writes besides (its group's lock released, the slots it held in
//! gates, what registered features add: `Feature::at_end` and `Feature::end_part`), as
//! [`Ending`]s (see `end`). Checked like every holder's write (see `holder`).

use super::Queue;
use super::end::{Ending, To, Where};
use super::group_lock::Release;
use super::held::Lease;
use super::held::Settled;
use super::request_size::within_request;
use crate::error::Result;
use crate::feature::{End, EndWrite, Leaving};

impl Queue {
    /// Deletes task and lease together, if the lease is still ours. For tests only (feature
    /// `testing`): programs complete with [`Queue::complete_many`].
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub async fn complete(&self, lease: Lease) -> Result<Settled> {
        let mut settled = self.complete_many(vec![lease]).await?;
        Ok(settled.pop().map_or(Settled::LeaseLost, |(_, s)| s))
    }

    /// Completes several held tasks in one multi-op, each deleting task and lease together if
    /// the lease is still ours; registered features add their writes (`Feature::at_end`: a
    /// keyed task's key marked completed, its completion record, …). If one write fails, the
    /// multi-op changes nothing and names it: that lease is read again when only its version
    /// is off (and kept when it is still ours), else its task is reported lost or gone, and the
    /// rest are committed again without it; a feature's write its feature answers.
    ///
    /// Features' writes that are large (completion records with large results, a batch's
    /// counters) are split over several multi-ops, so each stays within ZooKeeper's request
    /// limit (see `request_size`).
    pub async fn complete_many(&self, leases: Vec<Lease>) -> Result<Vec<(String, Settled)>> {
        let leaving: Vec<Leaving> = leases.iter().map(leaving).collect();
        let parts_bytes = self.features().end_bytes(&leaving, End::Completed);
        drop(leaving);
        let endings = self.completions(leases).await?;
        let mut settled = Vec::with_capacity(endings.len());
        let weighed: Vec<(Ending, usize)> = endings.into_iter().zip(parts_bytes).collect();
        for part in within_request(weighed, |(ending, part)| ending.write_bytes() + part) {
            let part: Vec<Ending> = part.into_iter().map(|(ending, _)| ending).collect();
            settled.extend(self.commit_completions(part).await?);
        }
        Ok(settled)
    }

    /// One completion multi-op for `endings` (see `end`), with the features' parts in it.
    async fn commit_completions(&self, endings: Vec<Ending>) -> Result<Vec<(String, Settled)>> {
        let leases = endings.iter().filter_map(|ending| match &ending.from {
            Where::Held { lease, .. } => Some(&**lease),
            _ => None,
        });
        let leaving: Vec<Leaving> = leases.map(leaving).collect();
        let site = self.site();
        let parts = (self.features())
            .end_parts(&site, &leaving, End::Completed, &self.memory.covers)
            .await?;
        drop(leaving);
        let ended = self.end("complete", endings, parts).await?;
        Ok(ended.settled)
    }

    /// What completing each of `leases` writes besides deleting task and lease: its group's
    /// lock released, its slots, the features' writes.
    async fn completions(&self, leases: Vec<Lease>) -> Result<Vec<Ending>> {
        let leaving: Vec<Leaving> = leases.iter().map(leaving).collect();
        let site = self.site();
        let writes = (self.features())
            .at_end(&site, &leaving, End::Completed)
            .await?;
        drop(leaving);
        let each = leases.into_iter().zip(writes);
        Ok(each
            .map(|(lease, writes)| self.completion(lease, writes))
            .collect())
    }

    fn completion(&self, lease: Lease, writes: Vec<(usize, EndWrite)>) -> Ending {
        let name = lease.task.name.clone();
        // A grouped task's lock goes with it: the group's next task may run.
        let lock = (lease.group_lock.clone()).map(|held| Release::Delete {
            path: held.path,
            version: held.version,
        });
        let slots = lease.slots.clone();
        let from = Where::Held {
            task: self.layout().task(&name),
            lease_path: self.layout().lease(&name),
            lease: Box::new(lease),
        };
        let mut ending = Ending::new(name, from, To::Completed);
        ending.lock = lock;
        ending.slots = slots;
        ending.writes = writes;
        ending
    }
}

/// A held task at its completion, as the features see it.
fn leaving(lease: &Lease) -> Leaving<'_> {
    Leaving::completed(&lease.task, lease.delivered.as_ref())
}
