//! What a run did: the function's reply and its one summary log event.

use serde::Serialize;

use crate::queue::{Settled, TaskOutcome};

/// What a run did: the function's response and its one summary log event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProcessReport {
    /// The consumer id the run's leases carried.
    pub consumer_id: String,
    /// Tasks the run claimed.
    pub claimed: u32,
    /// Tasks whose handler succeeded and that were completed.
    pub completed: u32,
    /// Tasks released for another try (a retryable failure).
    pub retried: u32,
    /// Tasks that went to the dead letters.
    pub dead_lettered: u32,
    /// Claims lost to another consumer.
    pub lease_conflicts: u32,
    /// Claims that got no answer (a dropped link, a leader change); had one landed, its lease
    /// expires unextended and the task runs later.
    pub claims_failed: u32,
    /// Tasks whose lease passed on while we held them; our writes were refused.
    pub leases_lost: u32,
    /// Tasks met that were not due yet (a producer's delay): moved to wait under `delayed/`.
    /// (A retry's backoff is waited out there from its release on, and not met at all.)
    pub in_backoff: u32,
    /// Tasks released unfinished because the deadline was near.
    pub released_at_deadline: u32,
    /// Resumable tasks whose handler suspended (stopping, asleep, waiting for a signal):
    /// released with their record, no attempt counted.
    pub suspended: u32,
    /// Handlers cancelled because their lease could no longer be vouched for (no extension
    /// got through for most of the lease timeout); nothing of theirs was committed.
    pub abandoned: u32,
    /// Tasks whose settling write could not finish before the deadline (ZooKeeper out of
    /// reach); their leases expire and the reaper frees them.
    pub unsettled: u32,
    /// Tasks skipped because we may not read them (their ACL shuts us out); each counted once
    /// per run.
    pub unreadable: u32,
    /// Tasks cancelled while held, buried instead of run again (by their holder, or at a
    /// claim after their holder's lease was freed).
    pub cancelled: u32,
    /// Claims that found their group held by another of its tasks, or paused.
    pub group_busy: u32,
    /// Tasks passed over because their event type is paused; each counted once per run.
    pub paused: u32,
    /// Tasks that waited because their route was at its limit (`max_in_flight`, `rate`), no
    /// attempt counted; each counted once per run.
    pub limited: u32,
    /// The whole queue is paused: the run claimed nothing.
    pub queue_paused: bool,
    /// Tasks the run's hooks made at its start (`crate::run_hook`): the slots of recurring
    /// schedules that were due.
    pub schedules_fired: u32,
    /// Schedules whose due slot could not be fired (each logged with its name); the others
    /// fired.
    pub schedules_failed: u32,
    /// Tasks pending after the run, leased ones included (`null` when ZooKeeper did not
    /// answer in time).
    pub remaining_depth: Option<usize>,
    /// Why the run stopped early after it had claimed tasks (a ZooKeeper failure its passes
    /// could not get past): its report still counts what it ran, and it is not run again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
    /// How long the run took, by the consumer's clock.
    pub duration_ms: u64,
}

impl ProcessReport {
    /// Adds what a later run of the same invocation did (the run after a drain cleared the
    /// kick node, see `crate::kick`): counts summed, the later depth, the first early end.
    pub fn absorb(&mut self, later: ProcessReport) {
        for (mine, theirs) in [
            (&mut self.claimed, later.claimed),
            (&mut self.completed, later.completed),
            (&mut self.retried, later.retried),
            (&mut self.dead_lettered, later.dead_lettered),
            (&mut self.lease_conflicts, later.lease_conflicts),
            (&mut self.claims_failed, later.claims_failed),
            (&mut self.leases_lost, later.leases_lost),
            (&mut self.in_backoff, later.in_backoff),
            (&mut self.released_at_deadline, later.released_at_deadline),
            (&mut self.suspended, later.suspended),
            (&mut self.abandoned, later.abandoned),
            (&mut self.unsettled, later.unsettled),
            (&mut self.unreadable, later.unreadable),
            (&mut self.cancelled, later.cancelled),
            (&mut self.group_busy, later.group_busy),
            (&mut self.paused, later.paused),
            (&mut self.limited, later.limited),
            (&mut self.schedules_fired, later.schedules_fired),
            (&mut self.schedules_failed, later.schedules_failed),
        ] {
            *mine += theirs;
        }
        self.queue_paused |= later.queue_paused;
        self.remaining_depth = later.remaining_depth.or(self.remaining_depth);
        self.ended_early = self.ended_early.take().or(later.ended_early);
        self.duration_ms += later.duration_ms;
    }

    /// Counts one task's outcome.
    pub(super) fn count(&mut self, outcome: &TaskOutcome) {
        let field = match outcome {
            TaskOutcome::Completed => &mut self.completed,
            TaskOutcome::Retried | TaskOutcome::RetriedInPlace => &mut self.retried,
            TaskOutcome::DeadLettered { .. } => &mut self.dead_lettered,
            TaskOutcome::Taken => &mut self.lease_conflicts,
            TaskOutcome::ClaimFailed => &mut self.claims_failed,
            TaskOutcome::LeaseLost => &mut self.leases_lost,
            TaskOutcome::Backoff { .. } => &mut self.in_backoff,
            TaskOutcome::Deadline => &mut self.released_at_deadline,
            TaskOutcome::Suspended => &mut self.suspended,
            TaskOutcome::Unreadable => &mut self.unreadable,
            TaskOutcome::Paused => &mut self.paused,
            TaskOutcome::Cancelled => &mut self.cancelled,
            TaskOutcome::GroupBusy { .. } => &mut self.group_busy,
            TaskOutcome::InPlace => &mut self.in_backoff,
            TaskOutcome::Abandoned => &mut self.abandoned,
            TaskOutcome::Unsettled => &mut self.unsettled,
            // Counted once per task per run by the run (it may wait several times); a claim
            // is counted when its run ends.
            TaskOutcome::Gone | TaskOutcome::Limited { .. } | TaskOutcome::Claimed(_) => return,
        };
        *field += 1;
    }

    /// Counts a batch of completions; `resent` when the batch took more than one try. Returns
    /// the names of the tasks that are gone.
    pub(super) fn count_completions(
        &mut self,
        settled: Vec<(String, Settled)>,
        resent: bool,
    ) -> Vec<String> {
        let mut gone = Vec::new();
        for (name, settled) in settled {
            let outcome = TaskOutcome::settled_as(settled, resent, TaskOutcome::Completed, &name);
            self.count(&outcome);
            if outcome.left_lane() {
                gone.push(name);
            }
        }
        gone
    }

    /// The run's one summary event (a run of [`super::run_on_unlogged`] leaves it to its
    /// caller).
    pub fn log(&self) {
        tracing::info!(
            consumer = %self.consumer_id,
            claimed = self.claimed,
            completed = self.completed,
            retried = self.retried,
            dead_lettered = self.dead_lettered,
            lease_conflicts = self.lease_conflicts,
            claims_failed = self.claims_failed,
            leases_lost = self.leases_lost,
            in_backoff = self.in_backoff,
            released_at_deadline = self.released_at_deadline,
            suspended = self.suspended,
            abandoned = self.abandoned,
            unsettled = self.unsettled,
            unreadable = self.unreadable,
            cancelled = self.cancelled,
            group_busy = self.group_busy,
            paused = self.paused,
            limited = self.limited,
            queue_paused = self.queue_paused,
            schedules_fired = self.schedules_fired,
            schedules_failed = self.schedules_failed,
            remaining_depth = self.remaining_depth,
            duration_ms = self.duration_ms,
            "process_events finished"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_that_finds_its_work_done_is_the_first_try_landing() {
        let cases = [
            (Settled::Done, false, "Completed"),
            (Settled::Done, true, "Completed"),
            (Settled::Gone, true, "Completed"),
            (Settled::Gone, false, "LeaseLost"),
            (Settled::LeaseLost, false, "LeaseLost"),
            (Settled::LeaseLost, true, "LeaseLost"),
        ];
        for (settled, resent, want) in cases {
            let got = TaskOutcome::settled_as(settled, resent, TaskOutcome::Completed, "t");
            assert_eq!(format!("{got:?}"), want, "{settled:?} resent {resent}");
        }
    }

    #[test]
    fn a_later_run_adds_its_counts_and_gives_the_depth() {
        let mut first = ProcessReport {
            claimed: 3,
            completed: 2,
            retried: 1,
            remaining_depth: Some(4),
            ended_early: Some("first".into()),
            duration_ms: 10,
            ..ProcessReport::default()
        };
        let later = ProcessReport {
            claimed: 1,
            completed: 1,
            remaining_depth: Some(0),
            ended_early: Some("later".into()),
            queue_paused: true,
            duration_ms: 5,
            ..ProcessReport::default()
        };
        first.absorb(later);
        assert_eq!((first.claimed, first.completed, first.retried), (4, 3, 1));
        assert_eq!(first.remaining_depth, Some(0));
        assert_eq!(first.ended_early.as_deref(), Some("first"));
        assert!(first.queue_paused);
        assert_eq!(first.duration_ms, 15);
    }
}
