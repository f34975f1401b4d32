//! The worker's schedule firer: it takes due slots, then sleeps until the next slot of any
//! schedule (by ZooKeeper's clock), or [`LOOK_EVERY`] at most, so a schedule added meanwhile
//! is seen within that. It runs beside the drains, so a busy worker still fires on time.

use std::time::Duration;

use tokio::sync::watch;

use crate::error::Result;
use crate::session::Session;

/// The longest a worker goes without looking at the schedules.
pub const LOOK_EVERY: Duration = Duration::from_secs(30);

/// After a failed look (a lost session, which the drains renew), look again after this.
const AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A slot is looked for this long after its time, so a look never comes just before it.
const AFTER_SLOT: Duration = Duration::from_millis(20);

/// Fires due slots until `stop` turns true.
pub async fn fire_until_stopped(session: &Session, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let wait = match fire_once(session).await {
            Ok(wait) => wait,
            Err(e) => {
                tracing::warn!(consumer = %session.consumer_id(), error = %e, "schedule look failed; again soon");
                AFTER_FAILURE
            }
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Takes due slots; how long until the next.
async fn fire_once(session: &Session) -> Result<Duration> {
    let queue = session.queue();
    let now = queue.server_time().await?.now_ms();
    let report = super::fire_due(&queue, now).await?;
    let wait = match report.next_due_ms {
        Some(next) => Duration::from_millis(next.saturating_sub(now).max(0) as u64) + AFTER_SLOT,
        None => LOOK_EVERY,
    };
    Ok(wait.min(LOOK_EVERY))
}
