//! The expiry's hooks: refused at publish when malformed, buried at claim once expired, and
//! its line in `explain`.

use chrono::SecondsFormat;

use super::ExpiresAt;
use crate::feature::{Asked, AtClaim, End, Feature, Said, Started};
use crate::task::{self, Envelope};

/// The dead letter's reason of a task that expired before any run started it.
pub const EXPIRED: &str = "expired";

/// Task expiry, as the core calls it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expiry;

impl Feature for Expiry {
    fn name(&self) -> &'static str {
        "expiry"
    }

    fn item_fields(&self) -> &'static [&'static str] {
        &["expires_at"]
    }

    fn check_publish(&self, envelope: &Envelope) -> Result<(), String> {
        ExpiresAt::of(envelope).map(|_| ())
    }

    /// It writes nothing at a task's end: not asked there.
    fn ends(&self) -> &'static [End] {
        &[]
    }

    fn at_claim(&self, envelope: &Envelope, now_ms: i64, _started: &Started<'_>) -> AtClaim {
        match ExpiresAt::of(envelope) {
            Ok(Some(at)) if now_ms >= at.ms() => AtClaim::Bury {
                reason: EXPIRED.to_string(),
            },
            Ok(_) => AtClaim::Take,
            // Another producer's envelope: it could never be judged, so it never runs.
            Err(problem) => AtClaim::Bury {
                reason: format!("malformed {} envelope: {problem}", task::FORMAT),
            },
        }
    }

    /// A line beside the others: an expiry holds nothing back.
    fn explain(&self, envelope: &Envelope, asked: &Asked, _started: &Started<'_>) -> Option<Said> {
        let now_ms = asked.now_ms;
        let at = ExpiresAt::of(envelope).ok()??;
        let when = at.0.to_rfc3339_opts(SecondsFormat::Millis, true);
        let line = match now_ms < at.ms() {
            true => format!(
                "expires at {when} (in {}): a claim after that sends it to the dead letters \
                 as expired instead of running it",
                span(at.ms() - now_ms)
            ),
            false => format!(
                "expired at {when} ({} ago): the next claim sends it to the dead letters as \
                 expired instead of running it",
                span(now_ms - at.ms())
            ),
        };
        Some(Said {
            line,
            holds: None,
            last: false,
        })
    }
}

/// `ms` rounded up to the largest unit it reaches: `1.5 s`, `3 min`, `2 h`, `4 d`.
fn span(ms: i64) -> String {
    let up = |unit: i64| (ms + unit - 1) / unit;
    if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else if ms < 3_600_000 {
        format!("{} min", up(60_000))
    } else if ms < 86_400_000 {
        format!("{} h", up(3_600_000))
    } else {
        format!("{} d", up(86_400_000))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::feature::Found;

    use super::*;

    /// Its line in `explain` about `envelope` at `now_ms`.
    fn said(envelope: &Envelope, now_ms: i64) -> Option<String> {
        let found = Found::default();
        let asked = Asked {
            state: crate::state::State::Pending,
            now_ms,
        };
        Expiry
            .explain(envelope, &asked, &found.of(0))
            .map(|s| s.line)
    }

    fn expiring_at(ms: i64) -> Envelope {
        let mut envelope = Envelope::new("t", json!({}));
        ExpiresAt::at_ms(ms).expect("in range").set(&mut envelope);
        envelope
    }

    #[test]
    fn a_claim_before_the_expiry_takes_the_task_and_one_at_or_after_it_buries_it() {
        let envelope = expiring_at(10_000);
        assert_eq!(
            Expiry.at_claim(&envelope, 9_999, &Found::default().of(0)),
            AtClaim::Take
        );
        let expired = AtClaim::Bury {
            reason: "expired".into(),
        };
        assert_eq!(
            Expiry.at_claim(&envelope, 10_000, &Found::default().of(0)),
            expired
        );
        assert_eq!(
            Expiry.at_claim(&envelope, 99_999, &Found::default().of(0)),
            expired
        );
        let plain = Envelope::new("t", json!({}));
        assert_eq!(
            Expiry.at_claim(&plain, i64::MAX, &Found::default().of(0)),
            AtClaim::Take
        );
    }

    #[test]
    fn a_malformed_expiry_is_refused_at_publish_and_buried_at_claim() {
        let mut envelope = Envelope::new("t", json!({}));
        envelope.extra.insert("expires_at".into(), json!("soon"));
        assert!(Expiry.check_publish(&envelope).is_err());
        let AtClaim::Bury { reason } = Expiry.at_claim(&envelope, 0, &Found::default().of(0))
        else {
            panic!("taken")
        };
        assert!(reason.starts_with("malformed event-bridge/1 envelope: \"expires_at\""));
        assert_eq!(said(&envelope, 0), None);
    }

    #[test]
    fn explain_says_when_it_expires_or_that_it_has() {
        let envelope = expiring_at(1_800_000_000_000);
        let before = said(&envelope, 1_800_000_000_000 - 90_000).unwrap();
        assert!(
            before.starts_with("expires at 2027-01-15T08:00:00.000Z (in 2 min)"),
            "{before}"
        );
        let after = said(&envelope, 1_800_000_000_000 + 1_500).unwrap();
        assert!(
            after.starts_with("expired at 2027-01-15T08:00:00.000Z (1.5 s ago)"),
            "{after}"
        );
        assert_eq!(said(&Envelope::new("t", json!({})), 0), None);
    }
}
