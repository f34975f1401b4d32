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

    /// The time of a write sent at `sent` whose `mtime` was just returned: the server stamped
    /// it somewhere between, taken as halfway (the error is at most half the round trip).
    pub fn from_round_trip(mtime: i64, sent: Instant) -> Self {
        let now = Instant::now();
        ZkTime {
            server_ms: mtime,
            read_at: sent + (now - sent) / 2,
        }
    }

    /// ZooKeeper's time now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.server_ms
            .saturating_add(crate::lease::millis(self.read_at.elapsed()))
    }
}
