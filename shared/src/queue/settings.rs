//! What a queue's operations read of the configuration, in one place.

use std::time::Duration;

use crate::config::{Config, GoneParents};
use crate::lane::LaneWeights;
use crate::lease;

/// A queue's settings, from its [`Config`].
#[derive(Clone, Debug)]
pub struct Settings {
    /// `LEASE_TIMEOUT_MS`: a lease expires this long after its last write.
    pub lease_timeout: Duration,
    /// Claims of a task, at most, before it goes to the dead letters.
    pub max_attempts: u32,
    /// Times a task may be stopped unfinished at a run's deadline.
    pub max_interruptions: u32,
    /// The first retry's backoff, doubled for each later one.
    pub backoff_base: Duration,
    /// The longest backoff.
    pub backoff_max: Duration,
    /// How long a completed task's idempotency key keeps deduplicating.
    pub dedup_window: Duration,
    /// `KEEP_DONE`: how long completion records are kept (none when unset).
    pub keep_done: Option<Duration>,
    /// `LANE_WEIGHTS`: how passes share their walks among the lanes (strict when unset).
    pub lane_weights: Option<LaneWeights>,
    /// `CHECKPOINT_MAX_BYTES`: the largest part of a resumable task's record its envelope keeps.
    pub checkpoint_max_bytes: usize,
    /// `SIGNAL_KEEP_MS`: how long a signal no task waits for is kept.
    pub signal_keep: Duration,
    /// `EVENT_BRIDGE_HANDLER_VERSION`: recorded by a resumable task when it starts.
    pub handler_version: Option<String>,
    /// `GONE_PARENTS`: whether the reaper takes a parent gone without an end as completed.
    pub gone_parents: GoneParents,
}

impl Settings {
    /// The settings `config` gives a queue.
    pub fn of(config: &Config) -> Self {
        Settings {
            lease_timeout: config.lease_timeout,
            max_attempts: config.max_attempts,
            max_interruptions: config.max_interruptions,
            backoff_base: config.backoff_base,
            backoff_max: config.backoff_max,
            dedup_window: config.dedup_window,
            keep_done: config.keep_done,
            lane_weights: config.lane_weights,
            checkpoint_max_bytes: config.checkpoint_max_bytes,
            signal_keep: config.signal_keep,
            handler_version: config.handler_version.clone(),
            gone_parents: config.gone_parents,
        }
    }

    /// The backoff before the next claim of a task that failed on `attempt`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        lease::backoff(attempt, self.backoff_base, self.backoff_max)
    }
}
