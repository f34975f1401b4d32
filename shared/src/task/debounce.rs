//! A debounced publish: tasks published with one debounce key within its period make one task,
//! with the last payload (trailing edge), due a period after the last publish and no later than
//! the maximum wait after the first.

use serde::{Deserialize, Serialize};

/// The longest a debounce key may be as a znode name (`debounce/<key>`).
pub const MAX_DEBOUNCE_KEY_NAME_BYTES: usize = 1_024;

/// The longest period and maximum wait: a week.
pub const MAX_DEBOUNCE_MS: u64 = 7 * 24 * 3_600_000;

/// What an envelope asks of a debounced publish.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Debounce {
    /// Publishes with the same key within the period make one task.
    pub key: String,
    /// The task is due this long after the last publish of its key.
    pub period_ms: u64,
    /// ...and no later than this long after the first (none: a key published more often than
    /// its period never fires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<u64>,
}

impl Debounce {
    /// What a publish refuses: an empty key, one too long for a znode name, a period or a
    /// maximum of nothing or over a week, a maximum shorter than the period. The problem
    /// names the field.
    pub fn check(&self) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("\"debounce_key\" is empty: give one of at least one character".into());
        }
        crate::segment::fits_as_name("debounce_key", &self.key, MAX_DEBOUNCE_KEY_NAME_BYTES)?;
        if !(1..=MAX_DEBOUNCE_MS).contains(&self.period_ms) {
            return Err(format!(
                "\"debounce\" must be at least 1 ms and at most {MAX_DEBOUNCE_MS} ms"
            ));
        }
        match self.max_ms {
            Some(max) if max < self.period_ms || max > MAX_DEBOUNCE_MS => Err(format!(
                "\"debounce_max\" must be at least the period ({} ms) and at most \
                 {MAX_DEBOUNCE_MS} ms",
                self.period_ms
            )),
            _ => Ok(()),
        }
    }

    /// When its task is due, by ZooKeeper's clock, for a debounce znode first written at
    /// `ctime` and last at `mtime`.
    pub fn due_ms(&self, ctime: i64, mtime: i64) -> i64 {
        let trailing = mtime + self.period_ms as i64;
        match self.max_ms {
            Some(max) => trailing.min(ctime + max as i64),
            None => trailing,
        }
    }

    /// Whether a publish asking for this, over one pending that asked for `pending`, may make
    /// its key due sooner than it was: a shorter period, or a maximum wait shorter or new.
    /// (Otherwise a rewrite only moves the due time later, as the last write moves on.)
    pub fn may_fall_due_sooner_than(&self, pending: &Debounce) -> bool {
        let shorter_max = match (self.max_ms, pending.max_ms) {
            (Some(mine), Some(theirs)) => mine < theirs,
            (Some(_), None) => true,
            (None, _) => false,
        };
        self.period_ms < pending.period_ms || shorter_max
    }
}

/// A duration as publishers write it: a whole number and `ms`, `s`, `m`, `h` or `d` (`30s`,
/// `5m`); the problem names `field`.
pub fn parse_span(field: &str, text: &str) -> Result<u64, String> {
    crate::clock::span_ms(text).ok_or_else(|| {
        format!(
            "\"{field}\" must be a number with a unit (ms, s, m, h or d), not {}",
            super::shown(text)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(period_ms: u64, max_ms: Option<u64>) -> Debounce {
        Debounce {
            key: "k".into(),
            period_ms,
            max_ms,
        }
    }

    #[test]
    fn due_is_a_period_after_the_last_publish_and_no_later_than_the_maximum() {
        assert_eq!(spec(1_000, None).due_ms(0, 5_000), 6_000);
        assert_eq!(spec(1_000, Some(3_000)).due_ms(0, 500), 1_500);
        assert_eq!(spec(1_000, Some(3_000)).due_ms(0, 2_900), 3_000);
    }

    #[test]
    fn only_a_shorter_period_or_maximum_may_make_a_key_due_sooner() {
        let pending = spec(1_000, Some(5_000));
        assert!(!spec(1_000, Some(5_000)).may_fall_due_sooner_than(&pending));
        assert!(!spec(2_000, None).may_fall_due_sooner_than(&pending));
        assert!(spec(999, Some(5_000)).may_fall_due_sooner_than(&pending));
        assert!(spec(1_000, Some(4_000)).may_fall_due_sooner_than(&pending));
        assert!(spec(1_000, Some(9_000)).may_fall_due_sooner_than(&spec(1_000, None)));
    }

    #[test]
    fn a_bad_debounce_names_its_field() {
        assert!(spec(1_000, Some(5_000)).check().is_ok());
        let empty = Debounce {
            key: String::new(),
            ..spec(1_000, None)
        };
        assert!(
            empty
                .check()
                .unwrap_err()
                .contains("\"debounce_key\" is empty")
        );
        assert!(spec(0, None).check().unwrap_err().contains("\"debounce\""));
        let short = spec(1_000, Some(10)).check().unwrap_err();
        assert!(short.contains("\"debounce_max\""), "{short}");
        assert_eq!(parse_span("debounce", "30s"), Ok(30_000));
        assert_eq!(parse_span("debounce", "5m"), Ok(300_000));
        let bad = parse_span("debounce_max", "5 minutes").unwrap_err();
        assert!(bad.contains("\"debounce_max\""), "{bad}");
    }
}
