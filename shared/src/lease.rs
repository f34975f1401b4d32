//! Lease rules as pure functions: what a lease holds, when it has expired, how long a retry
//! waits. Times are ZooKeeper times (znode `mtime`s and [`crate::clock::ZkTime`]), so expiry
//! never depends on a consumer's and a reaper's clocks agreeing.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::progress::ProgressReport;

/// The version of event-bridge this consumer runs, as its leases record it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The data of a lease znode. The field names are the 000 design's, so its consumers can read
/// our leases and judge their age the same way; `timestamp` is refreshed by every extension.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseData {
    /// Who holds the lease.
    pub consumer_id: String,
    /// When the lease was taken or last extended, ms since the epoch, holder's clock.
    pub timestamp: i64,
    /// The version of event-bridge the holder runs ([`VERSION`]), for `event-bridge doctor`;
    /// absent in leases of 000-design consumers and of versions before it was written. Not a
    /// 000-design field: its readers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_version: Option<String>,
    /// The handler's latest progress, as of the extension that wrote it (absent until it
    /// reports one). Not a 000-design field: its readers ignore it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::progress::lenient"
    )]
    pub progress: Option<ProgressReport>,
}

impl LeaseData {
    /// The claim's fencing token is not here: it is the lease znode's `czxid` (the zxid of the
    /// claim that created it), which no later write can change.
    pub fn new(consumer_id: &str) -> Self {
        LeaseData {
            consumer_id: consumer_id.to_string(),
            timestamp: chrono::Utc::now().timestamp_millis(),
            consumer_version: Some(VERSION.to_string()),
            progress: None,
        }
    }

    /// The same, carrying the handler's latest `progress` (an extension's data).
    pub fn with_progress(self, progress: Option<ProgressReport>) -> Self {
        LeaseData { progress, ..self }
    }

    /// The lease znode's data: JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("lease data serializes")
    }
}

/// A lease last written at `mtime` has expired at `now` (both ZooKeeper ms).
pub fn expired(mtime: i64, now: i64, timeout: Duration) -> bool {
    now.saturating_sub(mtime) > millis(timeout)
}

pub use crate::clock::millis;

/// How often a holder extends its lease: a third of the timeout, so two extensions can fail
/// before the lease runs out.
pub fn extend_interval(timeout: Duration) -> Duration {
    timeout / 3
}

/// How long after an extension was sent its holder may still act on the lease: four fifths
/// of the timeout. The fifth left over covers the skew between the clocks of two ZooKeeper
/// leaders (an `mtime` is the leader's clock) and the time an answer takes.
pub fn vouch_window(timeout: Duration) -> Duration {
    timeout - timeout / 5
}

/// The wait before claim number `attempt + 1`, after `attempt` failed: `base`, doubling with
/// each attempt, at most `max`.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(32);
    base.saturating_mul(1u32 << doublings.min(31)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN5: Duration = Duration::from_secs(300);

    #[test]
    fn expiry_is_strictly_after_the_timeout() {
        for (mtime, now, want) in [
            (1_000, 1_000, false),
            (1_000, 301_000, false),
            (1_000, 301_001, true),
            (1_000, 0, false), // a clock read before the write never expires it
        ] {
            assert_eq!(expired(mtime, now, MIN5), want, "mtime {mtime} now {now}");
        }
    }

    #[test]
    fn a_timeout_beyond_i64_milliseconds_never_wraps_into_expiry() {
        let huge = Duration::from_millis(9_300_000_000_000_000_000);
        assert!(!expired(1_000, 1_800_000_000_000, huge));
        assert!(!expired(1_000, i64::MAX, Duration::MAX));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let base = Duration::from_secs(1);
        let got: Vec<u64> = (1..=6)
            .map(|a| backoff(a, base, Duration::from_secs(10)).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff(200, base, MIN5), MIN5);
        assert_eq!(backoff(0, base, MIN5), base);
    }

    #[test]
    fn lease_data_uses_the_000_field_names() {
        let json = serde_json::to_value(LeaseData::new("c1")).unwrap();
        assert!(json["consumerId"].is_string() && json["timestamp"].is_i64());
        let theirs: LeaseData =
            serde_json::from_str(r#"{"consumerId":"vercel-func-ab12","timestamp":1}"#).unwrap();
        assert_eq!(theirs.consumer_id, "vercel-func-ab12");
        // Leases written by earlier versions carried a token: still read.
        let older: LeaseData =
            serde_json::from_str(r#"{"consumerId":"c","timestamp":1,"fencingToken":3}"#).unwrap();
        assert_eq!(older.consumer_id, "c");
    }

    #[test]
    fn lease_data_records_the_consumer_version_and_reads_leases_without_it() {
        let json = serde_json::to_value(LeaseData::new("c1")).unwrap();
        assert_eq!(json["consumerVersion"], VERSION);
        let theirs: LeaseData =
            serde_json::from_str(r#"{"consumerId":"vercel-func-ab12","timestamp":1}"#).unwrap();
        assert_eq!(
            theirs.consumer_version, None,
            "a 000-design lease: unknown version"
        );
    }

    #[test]
    fn a_holder_vouches_for_its_lease_for_four_fifths_of_the_timeout() {
        assert_eq!(
            vouch_window(Duration::from_secs(10)),
            Duration::from_secs(8)
        );
        // Two extensions can fail before a holder gives its handler up.
        let timeout = Duration::from_secs(300);
        assert!(extend_interval(timeout) * 2 < vouch_window(timeout));
    }

    #[test]
    fn extensions_come_three_times_per_timeout() {
        assert_eq!(
            extend_interval(Duration::from_millis(900)),
            Duration::from_millis(300)
        );
    }
}
