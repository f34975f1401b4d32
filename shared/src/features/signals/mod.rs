//! Signals in the reaper's upkeep: the sweep of signal keys. (Sending a signal, a resumable
//! task's wait on one and its wake are still the core's `queue/signals.rs`, which this sweep
//! calls.)
//!
//! # How it works
//!
//! The reaper's sweep ([`Feature::sweep`]) looks at up to [`PER_SWEEP`] signal keys, a sample
//! that moves with the clock: signals kept past `SIGNAL_KEEP_MS` unconsumed are deleted,
//! registrations of tasks that no longer wait are removed, tasks a signaller that stopped
//! half-way left waiting are woken, and empty keys older than `SIGNAL_KEEP_MS` are deleted.
//! The reap report counts the tasks it woke under `swept.signals`.
//!
//! # Costs
//!
//! In the reaper only: a listing of `signals/`, and per key looked at a listing and a read per
//! signal or note in it.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::feature::{Feature, Upkeep};
use crate::queue::Queue;

/// Signal keys the reaper looks at per run.
pub const PER_SWEEP: usize = 256;

/// The feature: the reaper's sweep of signal keys, keeping signals for `keep`
/// (`SIGNAL_KEEP_MS`).
pub struct Signals {
    keep: Duration,
}

impl Signals {
    /// Signals kept for `keep` unconsumed.
    pub fn new(keep: Duration) -> Self {
        Signals { keep }
    }
}

impl Feature for Signals {
    fn name(&self) -> &'static str {
        "signals"
    }

    fn envelope_fields(&self) -> &'static [&'static str] {
        &["resume"]
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move {
            let queue =
                (upkeep.queue::<Queue>()).expect("the core makes its upkeep from its Queue");
            let keep = crate::clock::millis(self.keep);
            let woken = (queue.signals())
                .sweep(&upkeep.now, keep, PER_SWEEP)
                .await?;
            Ok(woken as u32)
        })
    }
}
