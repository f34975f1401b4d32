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
    /// When it was read; `None` for a time that stands still ([`ZkTime::at`]).
    read_at: Option<Instant>,
}

impl ZkTime {
    /// The time of a write whose `mtime` was just returned.
    pub fn from_mtime(mtime: i64) -> Self {
        ZkTime {
            server_ms: mtime,
            read_at: Some(Instant::now()),
        }
    }

    /// The moment `ms` (since the epoch), standing still: for a caller that drives the clock
    /// itself, such as a test that judges leases at a moment of its choosing.
    pub fn at(ms: i64) -> Self {
        ZkTime {
            server_ms: ms,
            read_at: None,
        }
    }

    /// The time of a write sent at `sent` whose `mtime` was just returned: the server stamped
    /// it somewhere between, taken as halfway (the error is at most half the round trip).
    pub fn from_round_trip(mtime: i64, sent: Instant) -> Self {
        let now = Instant::now();
        ZkTime {
            server_ms: mtime,
            read_at: Some(sent + (now - sent) / 2),
        }
    }

    /// ZooKeeper's time now, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        let elapsed = self
            .read_at
            .map_or(0, |read| crate::lease::millis(read.elapsed()));
        self.server_ms.saturating_add(elapsed)
    }
}
