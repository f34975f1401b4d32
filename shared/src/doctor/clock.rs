//! This machine's clock against ZooKeeper's.
//!
//! Our consumers judge leases, backoffs and due times by ZooKeeper's clock ([`crate::clock`]),
//! so their own clocks do not decide when a lease expires. A consumer's clock still stamps what
//! others judge: the `timestamp` of its leases (a 000-design reaper frees a lease by its age on
//! its own clock), and the `webhook-timestamp` of Standard Webhooks signatures (receivers refuse
//! one more than five minutes off). ZooKeeper's time is read as every consumer reads it
//! ([`Queue::server_time`]: a write of `ROOT/clock`, its `mtime`), between two readings of this
//! machine's clock; the skew is known to within half that round trip.

use std::time::Duration;

use super::Check;
use crate::clock::ZkTime;
use crate::config::Config;
use crate::queue::Queue;

/// A skew up to this is nothing to look at.
const FINE: Duration = Duration::from_secs(1);

/// Receivers of Standard Webhooks refuse a timestamp further off than this.
const WEBHOOK_TOLERANCE: Duration = Duration::from_secs(300);

/// The skew, and ZooKeeper's time for the checks after it (`None` when it could not be read).
pub(super) async fn check(queue: &Queue, config: &Config) -> (Check, Option<ZkTime>) {
    let before = chrono::Utc::now().timestamp_millis();
    let now = match queue.server_time().await {
        Ok(now) => now,
        Err(e) => {
            let fix = format!(
                "let these credentials write {} (see the acl line), or run `event-bridge init`",
                queue.layout().clock()
            );
            return (
                Check::fail("clock", format!("ZooKeeper's time: {e}"), fix),
                None,
            );
        }
    };
    let after = chrono::Utc::now().timestamp_millis();
    let round_trip = after - before;
    // ZooKeeper stamped the write somewhere within the round trip: take its middle.
    let skew = after - round_trip / 2 - now.now_ms();
    (judge(skew, round_trip / 2, config), Some(now))
}

/// Passes a skew within [`FINE`]; fails one past a fifth of the lease timeout (the margin a
/// lease leaves for skew) or past the webhook tolerance, whichever is less; warns between.
fn judge(skew_ms: i64, within_ms: i64, config: &Config) -> Check {
    let way = if skew_ms >= 0 { "ahead of" } else { "behind" };
    let detail = format!(
        "this machine's clock is {} ms {way} ZooKeeper's (± {within_ms} ms)",
        skew_ms.abs()
    );
    let limit = (config.lease_timeout / 5).min(WEBHOOK_TOLERANCE);
    let fix = "sync this machine's clock, and the consumers', with NTP (chrony, systemd-timesyncd)";
    match skew_ms
        .unsigned_abs()
        .saturating_sub(within_ms.unsigned_abs())
    {
        off if off <= FINE.as_millis() as u64 => Check::pass("clock", detail),
        off if off <= limit.as_millis() as u64 => Check::warn("clock", detail, fix),
        _ => Check::fail(
            "clock",
            format!(
                "{detail}: over {} ms, lease timestamps and webhook signatures go wrong",
                limit.as_millis()
            ),
            fix,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    #[test]
    fn a_skew_is_judged_against_the_lease_timeout_and_the_webhook_tolerance() {
        let config = Config::default(); // a 300 s lease: the limit is 60 s
        for (skew, within, want) in [
            (0, 2, Status::Pass),
            (-1_000, 0, Status::Pass),
            (1_500, 1_000, Status::Pass),
            (5_000, 10, Status::Warn),
            (-59_000, 0, Status::Warn),
            (61_000, 10, Status::Fail),
            (-3_600_000, 10, Status::Fail),
        ] {
            assert_eq!(
                judge(skew, within, &config).status,
                want,
                "{skew} ± {within}"
            );
        }
        let long = Config {
            lease_timeout: Duration::from_secs(3_600),
            ..Config::default()
        };
        assert_eq!(judge(301_000, 0, &long).status, Status::Fail, "webhooks");
        assert!(judge(-5_000, 3, &config).detail.contains("5000 ms behind"));
    }
}
