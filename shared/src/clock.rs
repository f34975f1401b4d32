//! ZooKeeper's clock.
//!
//! Every write stamps the znode's `mtime` with the leader's clock. Reading that once and
//! carrying it forward with the local monotonic clock gives every consumer and reaper the same
//! time base, whatever their wall clocks say.
//!
//! A run that finds work writes the `clock` znode once and takes the returned `mtime` as the
//! time at the moment the answer came: the server stamped the write somewhere before that, so the
//! reading may run behind by a round trip (a due task claimed a little late, a lease judged
//! expired a little late), never ahead. Taken halfway through the round trip, as it once was,
//! slow round trips after leader changes made the contract checker see delayed tasks and retries
//! claimed up to 0.3 s early.
//!
//! What must not happen late (a claim of a task past its expiry) is judged by the other bound
//! ([`ZkTime::latest_ms`]): the reading carried forward from when its request was sent, which
//! may run ahead by the round trip, never behind.
//!
//! One skew remains: an `mtime` is the clock of the server that led when the write was proposed,
//! so after a leader change a lease stamped by the old leader is judged against the new leader's
//! clock, longer or shorter by their skew. That is why `LEASE_TIMEOUT_MS` is at least 10 s and a
//! holder stops vouching a fifth of the timeout (2 s at the minimum) before its lease could
//! expire (see `lease`).

use std::time::Instant;

/// A reading of ZooKeeper's time, carried forward locally.
#[derive(Clone, Copy, Debug)]
pub struct ZkTime {
    server_ms: i64,
    /// When it was read (its answer came); `None` for a time that stands still
    /// ([`ZkTime::at`]).
    read_at: Option<Instant>,
    /// When the request that read it was sent (the server stamped it after that), if known.
    sent_at: Option<Instant>,
}

impl ZkTime {
    /// The time of a write whose `mtime` was just returned.
    pub fn from_mtime(mtime: i64) -> Self {
        let now = Instant::now();
        ZkTime {
            server_ms: mtime,
            read_at: Some(now),
            sent_at: Some(now),
        }
    }

    /// The moment `ms` (since the epoch), standing still: for a caller that drives the clock
    /// itself, such as a test that judges leases at a moment of its choosing.
    pub fn at(ms: i64) -> Self {
        ZkTime {
            server_ms: ms,
            read_at: None,
            sent_at: None,
        }
    }

    /// The time of a write whose `mtime` its answer just brought: the server stamped it
    /// between the request and the answer, so the reading is taken as of the answer, never
    /// ahead of the server. It may run behind by the round trip: a due task is claimed a little
    /// late and a lease judged expired a little late, never early. (Taken halfway, as it once
    /// was, a slow round trip after a leader change made due tasks run up to 0.3 s early.)
    pub fn from_answer(mtime: i64) -> Self {
        ZkTime::from_mtime(mtime)
    }

    /// As [`ZkTime::from_answer`], for a request sent at `sent_at`: its [`ZkTime::latest_ms`]
    /// is then the latest the time may be, the server having stamped the write no earlier.
    pub fn from_request(mtime: i64, sent_at: Instant) -> Self {
        ZkTime {
            sent_at: Some(sent_at),
            ..ZkTime::from_mtime(mtime)
        }
    }

    /// ZooKeeper's time now, ms since the epoch: the earliest it may be (a round trip behind
    /// at most), so what is due by it is due.
    pub fn now_ms(&self) -> i64 {
        let elapsed = self.read_at.map_or(0, |read| millis(read.elapsed()));
        self.server_ms.saturating_add(elapsed)
    }

    /// The latest ZooKeeper's time may be now, ms since the epoch: [`ZkTime::now_ms`] and the
    /// round trip of the reading's request, so what has passed by [`ZkTime::now_ms`] has
    /// passed, and what may have passed by this has to be taken as passed where running late
    /// would break a promise (an expiry).
    pub fn latest_ms(&self) -> i64 {
        let elapsed = self.sent_at.map_or(0, |sent| millis(sent.elapsed()));
        self.server_ms.saturating_add(elapsed)
    }
}

/// A span of time written with its unit (`1500ms`, `90s`, `30m`, `1h`, `7d`) in ms; `None` for
/// anything else (no unit, another unit, a number that does not fit).
pub fn span_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(scale)
}

/// A time in ms since the epoch as `explain`'s lines say it: `2026-11-29 17:59:50 UTC`.
pub fn shown(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// `duration` in milliseconds, saturating at `i64::MAX` instead of wrapping.
pub fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_reading_starts_from_the_answer() {
        // The server stamped the write at 1 000, perhaps just before answering: the reading
        // carries it forward from the answer on, whatever the round trip took.
        let time = ZkTime::from_answer(1_000);
        assert!((1_000..1_100).contains(&time.now_ms()), "{}", time.now_ms());
    }

    #[test]
    fn a_moment_given_stands_still() {
        let time = ZkTime::at(5_000);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(time.now_ms(), 5_000);
    }
}
