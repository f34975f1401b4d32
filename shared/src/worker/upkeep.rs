//! The worker's upkeep, on timers of its own beside the drains: it moves due tasks back from
//! `delayed/` every [`PROMOTE_EVERY`] and reaps expired leases every half lease timeout.
//!
//! A drain under steady traffic never ends (a notification of new tasks always arrives before
//! the tasks in flight are done), so nothing a worker does only between drains would happen
//! while traffic goes on: a retry would wait out its backoff and then the traffic, a dead
//! consumer's task its lease and then the traffic. A promoted task lands at the tail of
//! `tasks/`, which the watch reports, so the running drain picks it up.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::ZkTime;
use crate::error::Result;
use crate::queue::Queue;
use crate::session::Session;

/// How often the worker looks for tasks whose backoff or delay ended: one `getChildren` of
/// `delayed/` each time (and of a bucket when one is due). A retry comes back within this of
/// its due time.
pub const PROMOTE_EVERY: Duration = Duration::from_millis(500);

/// Due tasks moved back per look, at most.
const PROMOTE_PER_LOOK: usize = 256;

/// How long a reading of ZooKeeper's clock is carried forward before it is read again (a
/// write of `clock`).
const CLOCK_EVERY: Duration = Duration::from_secs(30);

/// Runs the upkeep until `stop` turns true; returns the leases it reaped.
pub(super) async fn until_stopped(
    session: &Session,
    reap_every: Duration,
    mut stop: watch::Receiver<bool>,
) -> u64 {
    let mut upkeep = Upkeep {
        clock: None,
        next_reap: Instant::now() + reap_every,
        reap_every,
        reaped: 0,
    };
    while !*stop.borrow() {
        if let Err(e) = upkeep.once(&session.queue()).await {
            upkeep.clock = None;
            tracing::warn!(consumer = %session.consumer_id(), error = %e, "upkeep failed; again soon");
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            _ = tokio::time::sleep(PROMOTE_EVERY) => {}
        }
    }
    upkeep.reaped
}

/// What the upkeep carries from one look to the next.
struct Upkeep {
    /// ZooKeeper's time as last read, and when it was read.
    clock: Option<(ZkTime, Instant)>,
    next_reap: Instant,
    reap_every: Duration,
    reaped: u64,
}

impl Upkeep {
    /// One look: promote what is due, fire debounced tasks whose period ended, and reap when
    /// it is time.
    async fn once(&mut self, queue: &Queue) -> Result<()> {
        let now = self.now(queue).await?;
        queue.delays().promote_due(&now, PROMOTE_PER_LOOK).await?;
        crate::features::debounce::fire_due(queue, now.now_ms()).await?;
        if Instant::now() >= self.next_reap {
            self.reaped += crate::reap::reap_at(queue, &now).await?.reaped as u64;
            self.next_reap = Instant::now() + self.reap_every;
        }
        Ok(())
    }

    /// ZooKeeper's time, read again when the last reading is [`CLOCK_EVERY`] old.
    async fn now(&mut self, queue: &Queue) -> Result<ZkTime> {
        match self.clock {
            Some((time, read)) if read.elapsed() < CLOCK_EVERY => Ok(time),
            _ => {
                let time = queue.server_time().await?;
                self.clock = Some((time, Instant::now()));
                Ok(time)
            }
        }
    }
}
