//! ZooKeeper's clock.
//!
//! Every write stamps the znode's `mtime` with the leader's clock. Reading that once and
//! carrying it forward with the local monotonic clock gives every consumer and reaper the same
//! time base, whatever their wall clocks say.

use std::time::Instant;

/// A reading of ZooKeeper's time, carried forward locally.
#[derive(Clone, Copy, Debug)]
pub struct ZkTime {
    server_ms: i64,
    read_at: Instant,
}

impl ZkTime {
    /// The time of a write whose `mtime` was just returned.
    pub fn from_mtime(mtime: i64) -> Self {
        ZkTime {
            server_ms: mtime,
            read_at: Instant::now(),
        }
    }

    /// ZooKeeper's time now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.server_ms
            .saturating_add(crate::lease::millis(self.read_at.elapsed()))
    }
}
