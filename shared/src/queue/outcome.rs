//! What came of one task in a run, from its claim to its end: the one answer a claim gives
//! ([`Queue::claim_many`](super::Queue::claim_many)), a run reports
//! (`process::report`) and a pass accounts for.

use super::held::{Lease, Settled};

/// What came of one task in a run: claimed, not claimed and why, or how its run ended. A claim
/// answers [`TaskOutcome::Claimed`] or one of the answers before [`TaskOutcome::Completed`];
/// a run ends each task it claimed with one of the rest. The lease is boxed: every other
/// outcome is a few words, and outcomes travel in the run's queues of events.
#[derive(Debug)]
#[non_exhaustive]
pub enum TaskOutcome {
    /// The task is ours until we settle it or the lease expires.
    Claimed(Box<Lease>),
    /// Another consumer holds (or just took) the task.
    Taken,
    /// The task was completed or removed before we got to it.
    Gone,
    /// The task waits out a retry backoff until this ZooKeeper time (a run moves it to wait
    /// under `delayed/`).
    Backoff {
        /// When the backoff ends (ZooKeeper ms).
        until_ms: i64,
    },
    /// Not ready, in its group's turn: a place whose task waits for parents or a debounce, or
    /// a grouped task not due yet. It stays where it is and holds back its group (see
    /// `place`): moving it would let the rest of its group pass it.
    InPlace,
    /// The task's event type (or the whole queue) is paused: it is left as it is.
    Paused,
    /// The task was cancelled (while another consumer held it, or while we did): it went to
    /// the dead letters.
    Cancelled,
    /// Another task of its group holds the group (its id), or the group is paused (`None`).
    GroupBusy {
        /// The id of the task that holds the group; `None` when the group is paused.
        owner: Option<String>,
    },
    /// Its route is at its limit (`max_in_flight` or `rate`): left as it is, no attempt
    /// counted; worth another try in `retry_in_ms`.
    Limited {
        /// How long until the route may admit it, in ms.
        retry_in_ms: i64,
    },
    /// The task went to the dead letters: it could never run (a poison body, its attempts
    /// used up) or its handler gave up on it.
    DeadLettered {
        /// Why, as the dead-letter record says.
        reason: String,
    },
    /// Its handler succeeded and the task was completed.
    Completed,
    /// Released to wait out its backoff under `delayed/`.
    Retried,
    /// Released with no backoff: it stays where it was in its lane.
    RetriedInPlace,
    /// The claim got no answer: not claimed, as far as we know.
    ClaimFailed,
    /// Its lease was lost (expired, taken over) before the run settled it.
    LeaseLost,
    /// The handler was stopped: its lease could no longer be vouched for.
    Abandoned,
    /// The settling write got no answer before the deadline.
    Unsettled,
    /// Not readable by us.
    Unreadable,
    /// Released at the run's deadline, its handler unfinished.
    Deadline,
    /// Its resumable handler suspended: released with its record to resume at once, after a
    /// sleep, or when a signal it waits for comes (or its timeout).
    Suspended,
}

impl TaskOutcome {
    /// What a settling write's answer means (`done`: the outcome when it took effect): a write
    /// sent again that finds its work done has landed the first time.
    pub fn settled_as(settled: Settled, resent: bool, done: TaskOutcome, name: &str) -> Self {
        match (settled, resent) {
            (Settled::Done, _) => done,
            (Settled::Gone, true) => {
                tracing::info!(task = %name, "the first try had landed; its reply was lost");
                done
            }
            (Settled::Cancelled, _) => TaskOutcome::Cancelled,
            (Settled::Gone | Settled::LeaseLost | Settled::Moved | Settled::Raced, _) => {
                tracing::warn!(task = %name, "lease lost before settling; nothing changed");
                TaskOutcome::LeaseLost
            }
        }
    }

    /// Whether the task left its lane (completed, buried, moved to wait, or found gone): its
    /// number is gone for good.
    pub fn left_lane(&self) -> bool {
        matches!(
            self,
            TaskOutcome::Completed
                | TaskOutcome::DeadLettered { .. }
                | TaskOutcome::Retried
                | TaskOutcome::Backoff { .. }
                | TaskOutcome::Cancelled
                | TaskOutcome::Gone
        )
    }
}
