//! A pass at the tail. A worker's waits for the refill notification (new tasks) to go on past
//! the old tail, and once its walk is [`WALK_AGAIN_AFTER`] old it walks again from the head, so
//! that what it passed over meanwhile (a task the reaper freed, a group whose turn came, a type
//! unpaused) is looked at while tasks are still in flight. Any pass that met tasks over a limit
//! (a route's, a concurrency key's) while others still run walks again from the head once they
//! may be tried: a key at its cap must not hold back, until its handlers end, the tasks of
//! other keys a claim batch left out.

use tokio::time::Instant;

use super::{Event, Pass};
use crate::handler::Handler;
use crate::queue::Walk;

/// A worker's pass that has reached the tail walks again from the head once its walk is this
/// old, so that what the walk passed over meanwhile (a task the reaper freed, a group whose
/// turn came, a type unpaused) is looked at again while tasks are still in flight.
pub(super) const WALK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl<H: Handler> Pass<'_, '_, H> {
    /// Starts a job that waits for the worker's refill notification, unless one waits already
    /// or the run was not asked for refills.
    pub(super) fn wait_for_refill(&mut self) {
        let Some(notify) = self.run.refill.filter(|_| !self.flight.refilling) else {
            return;
        };
        let run = self.run;
        self.flight.refilling = true;
        let walk_again = self.walk_started + WALK_AGAIN_AFTER;
        self.jobs.push(Box::pin(async move {
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep_until(walk_again) => {}
            }
            // New tasks came; what is paused may have changed too.
            let restraints =
                crate::process::read_restraints(&run.queue(), run.on_dead(), run.limits()).await;
            Event::Refilled(restraints.map(|restraints| run.set_restraints(restraints)))
        }));
    }

    /// After a refill notification (or its timer): walks again from the head when the walk
    /// is old and nothing waits to be claimed, else goes on past the old tail.
    pub(super) fn refilled(&mut self) {
        let old = self.walk_started.elapsed() >= WALK_AGAIN_AFTER;
        let Some(mut walk) = self.walk.take() else {
            return;
        };
        if !old || !self.ready.is_empty() {
            walk.reopen();
            self.walk = Some(walk);
            return;
        }
        self.walk_again(*walk);
    }

    /// Starts a job that waits until the tasks this walk found over a limit may be tried
    /// again, when tasks are still running (with none, the run waits between passes) and no
    /// such job waits already.
    pub(super) fn wait_for_limits(&mut self) {
        if self.flight.limit_waiting || self.flight.running == 0 {
            return;
        }
        let Some(retry_in_ms) = self.limited_retry.take() else {
            return;
        };
        self.flight.limit_waiting = true;
        let options = self.run.options;
        let wake = Instant::now() + std::time::Duration::from_millis(retry_in_ms.max(1) as u64);
        let wake = wake.min(options.deadline - options.margin);
        self.jobs.push(Box::pin(async move {
            tokio::time::sleep_until(wake).await;
            Event::LimitsDue
        }));
    }

    /// The tasks over a limit may be tried again: a walk at its tail starts again from the
    /// head (one still going will meet them when the next pass does).
    pub(super) fn limits_due(&mut self) {
        match self.walk.take() {
            Some(walk) if walk.ended() && self.ready.is_empty() => self.walk_again(*walk),
            other => self.walk = other,
        }
    }

    /// Saves what `walk` knows to the head and starts a new walk from it.
    fn walk_again(&mut self, mut walk: Walk) {
        let run = self.run;
        // No batch waits for a new walk as for a window (see `tops_up`).
        self.topped_up = false;
        self.jobs.push(Box::pin(async move {
            let queue = run.queue();
            let again = async {
                walk.save_head(&queue).await?;
                let walk = Walk::from_lanes(queue.probes().read_lanes().await?);
                Ok(Box::new(walk.weighted(queue.settings().lane_weights)))
            };
            Event::Rewalked(again.await)
        }));
    }

    /// A new walk from the head: what the old one passed over is looked at again. Groups
    /// left to a later pass are open again, and the tasks waiting behind a running one are
    /// found again in order; tasks found paused or unreadable are tried (and counted) again.
    pub(super) fn rewalked(&mut self, mut walk: Box<Walk>) {
        for name in self.gone_meanwhile.drain(..) {
            walk.mark_gone(&name);
        }
        self.walk = Some(walk);
        self.walk_started = Instant::now();
        self.steady = self.groups.gapped();
        self.groups.rewalk();
        self.passed_over.clear();
    }
}
