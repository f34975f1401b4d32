//! Per-route limits (`max_in_flight`, `rate` in the route table), and the arithmetic of
//! admitting tasks under them. Pure: the queue keeps each limited route's gate in ZooKeeper
//! (`queue::gate`), and this module says how many of the tasks wanting in may go.
//!
//! - `max_in_flight`: at most that many of the route's tasks run at once, across every
//!   consumer: each running task holds an ephemeral slot under the route's gate.
//! - `rate` (`"10/s"`, `"600/min"`, `"5000/h"`): a token bucket kept in the gate's data, its
//!   clock ZooKeeper's, holding at most a tenth of a second's worth of tokens (at least one): in
//!   any window of `T` at most `rate × T` tasks start, plus that burst.
//! - `per_key` (`{"max_in_flight": 2, "rate": "1/s"}`): the same two limits for each value of
//!   a task's `concurrency_key`, counted within the route: each key has a gate of its own
//!   (`concurrency/<route>/<key>`) with its own slots and bucket. A task without a key is
//!   held only by the route's own limits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The limits of one route.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limit {
    /// At most this many of the route's tasks held at once.
    pub max_in_flight: Option<u32>,
    /// Tasks per millisecond.
    pub rate_per_ms: Option<f64>,
    /// The limits of each value of `concurrency_key` among the route's tasks.
    pub per_key: Option<KeyLimit>,
}

/// The limits of one value of `concurrency_key` within a route: the same two as a route's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyLimit {
    /// At most this many tasks of one key held at once.
    pub max_in_flight: Option<u32>,
    /// Tasks per millisecond.
    pub rate_per_ms: Option<f64>,
}

impl From<KeyLimit> for Limit {
    fn from(key: KeyLimit) -> Self {
        Limit {
            max_in_flight: key.max_in_flight,
            rate_per_ms: key.rate_per_ms,
            per_key: None,
        }
    }
}

impl Limit {
    /// Whether the route is limited at all (itself, or per key).
    pub fn is_some(&self) -> bool {
        self.gates_route() || self.per_key.is_some()
    }

    /// Whether the route as a whole has a gate: a cap on tasks in flight, or a rate.
    pub fn gates_route(&self) -> bool {
        self.max_in_flight.is_some() || self.rate_per_ms.is_some()
    }

    /// The most tokens the bucket holds.
    pub fn burst(&self) -> f64 {
        self.rate_per_ms.map_or(0.0, |r| (r * 100.0).max(1.0))
    }
}

/// Parses a rate such as `10/s`, `600/min` or `5000/h` into tasks per millisecond.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let bad = || format!("rate {text:?} must look like 10/s, 600/min or 5000/h");
    let (count, unit) = text.trim().split_once('/').ok_or_else(bad)?;
    let count: f64 = count.trim().parse().map_err(|_| bad())?;
    let per_ms = match unit.trim() {
        "s" | "sec" => 1_000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(bad()),
    };
    if !(count.is_finite() && count > 0.0) {
        return Err(bad());
    }
    Ok(count / per_ms)
}

/// The limits of every route: by event type (every type with a route of its own is listed,
/// limited or not), and for the default route.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouteLimits {
    /// Each event type with a route of its own, and its limit.
    pub types: BTreeMap<String, Limit>,
    /// The default route's limit.
    pub default: Limit,
}

impl RouteLimits {
    /// The gate (a znode name under `limits/`: the encoded type, or `@default`) and the limit
    /// of an event type's route, when that route is limited.
    pub fn for_type(&self, event_type: &str) -> Option<(String, Limit)> {
        match self.types.get(event_type) {
            Some(limit) if limit.is_some() => {
                Some((crate::layout::encode_segment(event_type), *limit))
            }
            Some(_) => None,
            None => self
                .default
                .is_some()
                .then(|| ("@default".to_string(), self.default)),
        }
    }

    /// Whether no route (nor the default) is limited.
    pub fn is_empty(&self) -> bool {
        self.types.values().all(|l| !l.is_some()) && !self.default.is_some()
    }

    /// Whether any route (or the default) limits concurrency keys.
    pub fn limits_keys(&self) -> bool {
        self.default.per_key.is_some() || self.types.values().any(|l| l.per_key.is_some())
    }

    /// The routes (znode names under `concurrency/`) that limit concurrency keys.
    pub fn key_routes(&self) -> Vec<String> {
        let types = (self.types.iter())
            .filter(|(_, limit)| limit.per_key.is_some())
            .map(|(event_type, _)| crate::layout::encode_segment(event_type));
        let default = self.default.per_key.map(|_| "@default".to_string());
        types.chain(default).collect()
    }
}

/// A gate's data: the token bucket, as of a moment of ZooKeeper's clock.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Tokens in the bucket at `at_ms` (a fraction counts toward the next).
    pub tokens: f64,
    /// The moment of ZooKeeper's clock the count is as of, in ms.
    pub at_ms: i64,
}

/// What a gate's znode holds: its bucket (with a rate) and the cap on tasks in flight it was
/// last admitted under (so that `stats` can tell a gate at its limit without the routes).
/// Empty data reads as neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateData {
    /// The token bucket, for a gate with a rate.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Bucket>,
    /// The cap on tasks in flight it was last admitted under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// When the bucket is full again (ZooKeeper ms), if nothing more is admitted: a key's gate
    /// with no slots held is worth nothing after it, and the reaper may delete it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_at_ms: Option<i64>,
    /// The rate it was last admitted under (tasks per ms), so that `explain` can tell when the
    /// next token comes without the routes (absent from gates written by earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_ms: Option<f64>,
}

impl GateData {
    /// The data a gate under `limit` holds after an admission that left `bucket`.
    pub fn after(limit: &Limit, bucket: Option<Bucket>) -> GateData {
        let full_at_ms = bucket.zip(limit.rate_per_ms).map(|(b, rate)| {
            let missing = (limit.burst() - b.tokens).max(0.0);
            b.at_ms + (missing / rate).ceil() as i64
        });
        GateData {
            bucket,
            max_in_flight: limit.max_in_flight,
            full_at_ms,
            rate_per_ms: limit.rate_per_ms,
        }
    }

    /// When its bucket next holds a whole token, if it holds none at `now_ms` (ZooKeeper ms);
    /// `None` when it has one, or has no rate (or one an earlier version did not write).
    pub fn next_token_at(&self, now_ms: i64) -> Option<i64> {
        let (bucket, rate) = (self.bucket?, self.rate_per_ms.filter(|r| *r > 0.0)?);
        let tokens = bucket.tokens + rate * (now_ms - bucket.at_ms).max(0) as f64;
        (tokens < 1.0).then(|| bucket.at_ms + ((1.0 - bucket.tokens) / rate).ceil() as i64)
    }

    /// Reads a gate's data; anything unreadable (an empty gate, an older writer's) is neither.
    pub fn read(data: &[u8]) -> GateData {
        serde_json::from_slice(data).unwrap_or_default()
    }
}

/// How many of `wanted` tasks may start now, and what the gate holds afterwards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admission {
    /// How many of the tasks asked for may start now.
    pub admitted: usize,
    /// The bucket to write (with a rate), as of now, or of its stored moment when that is
    /// later (a reading behind another consumer's).
    pub bucket: Option<Bucket>,
    /// When those left out may try again, in ms from now.
    pub retry_in_ms: Option<i64>,
}

/// How far a consumer's reading of ZooKeeper's time may run behind a bucket's moment and still
/// be taken for a reading late by its round trip (the bucket keeps its moment); further behind,
/// ZooKeeper's clock itself went back.
const CLOCK_BEHIND_MS: i64 = 10_000;

/// How long a task left out for want of a free slot waits before it looks again.
pub const SLOT_POLL_MS: i64 = 100;

/// Admits up to `wanted` tasks through a gate with `in_flight` slots held and the bucket
/// `stored` (none: full) at `now_ms`.
pub fn admit(
    limit: &Limit,
    in_flight: usize,
    stored: Option<Bucket>,
    now_ms: i64,
    wanted: usize,
) -> Admission {
    let free = limit
        .max_in_flight
        .map_or(usize::MAX, |max| (max as usize).saturating_sub(in_flight));
    let (tokens, bucket) = match limit.rate_per_ms {
        Some(rate) => {
            let burst = limit.burst();
            let tokens = match stored {
                Some(b) => (b.tokens + (now_ms - b.at_ms).max(0) as f64 * rate).min(burst),
                None => burst,
            };
            (tokens, Some(rate))
        }
        None => (f64::MAX, None),
    };
    let by_tokens = if tokens >= usize::MAX as f64 {
        usize::MAX
    } else {
        tokens.floor() as usize
    };
    let admitted = wanted.min(free).min(by_tokens);
    // A reading behind the bucket's own moment keeps that moment: moved back, the span
    // between would be refilled a second time by the next admission. Far behind, it is
    // ZooKeeper's clock that went back (a new leader's), and the bucket starts again from it
    // rather than stand still until the clock catches up.
    let at_ms = match stored {
        Some(b) if b.at_ms > now_ms && b.at_ms - now_ms <= CLOCK_BEHIND_MS => b.at_ms,
        _ => now_ms,
    };
    let retry_in_ms = (admitted < wanted).then(|| {
        if admitted == free {
            SLOT_POLL_MS
        } else {
            // Tokens come again from the bucket's moment on, not from the reading.
            let rate = bucket.unwrap_or(1.0);
            let refill = ((admitted as f64 + 1.0 - tokens).max(0.0) / rate).ceil() as i64;
            (refill + (at_ms - now_ms)).max(1)
        }
    });
    Admission {
        admitted,
        bucket: bucket.map(|_| Bucket {
            tokens: tokens - admitted as f64,
            at_ms,
        }),
        retry_in_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_per_second_minute_and_hour() {
        assert_eq!(parse_rate("10/s"), Ok(0.01));
        assert_eq!(parse_rate("600/min"), Ok(0.01));
        assert_eq!(parse_rate("36000/h"), Ok(0.01));
        for bad in ["10", "10/d", "0/s", "-1/s", "x/s"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slots_cap_what_is_admitted() {
        let limit = Limit {
            max_in_flight: Some(3),
            ..Limit::default()
        };
        let a = admit(&limit, 1, None, 0, 5);
        assert_eq!(
            (a.admitted, a.retry_in_ms, a.bucket),
            (2, Some(SLOT_POLL_MS), None)
        );
        assert_eq!(admit(&limit, 3, None, 0, 1).admitted, 0);
        assert_eq!(admit(&limit, 0, None, 0, 2).retry_in_ms, None);
    }

    #[test]
    fn a_bucket_refills_at_the_rate_up_to_its_burst() {
        let limit = Limit {
            rate_per_ms: Some(0.02),
            ..Limit::default()
        }; // 20/s, burst 2
        let fresh = admit(&limit, 0, None, 1_000, 5);
        assert_eq!(fresh.admitted, 2, "a fresh bucket is full");
        let bucket = fresh.bucket.unwrap();
        assert_eq!(bucket.tokens, 0.0);
        let soon = admit(&limit, 0, Some(bucket), 1_020, 5);
        assert_eq!((soon.admitted, soon.retry_in_ms), (0, Some(30)));
        let later = admit(&limit, 0, Some(bucket), 1_050, 5);
        assert_eq!(later.admitted, 1);
        let much_later = admit(&limit, 0, Some(bucket), 100_000, 5);
        assert_eq!(much_later.admitted, 2, "never more than the burst");
    }

    #[test]
    fn a_bucket_read_by_a_clock_behind_its_own_never_moves_back() {
        // Each consumer carries ZooKeeper's time from its own last answer, so one may read a
        // bucket written by another whose reading runs ahead. Moving the bucket's moment back
        // to the slower reading would refill the same span twice.
        let limit = Limit {
            rate_per_ms: Some(0.02),
            ..Limit::default()
        }; // 20/s, burst 2
        let ahead = admit(&limit, 0, None, 1_000, 5).bucket.unwrap();
        let behind = admit(&limit, 0, Some(ahead), 950, 5);
        assert_eq!(behind.admitted, 0);
        let bucket = behind.bucket.unwrap();
        assert_eq!(
            bucket.at_ms, 1_000,
            "the bucket's moment stays where it was"
        );
        assert_eq!(
            behind.retry_in_ms,
            Some(100),
            "its token comes 50 ms after the bucket's moment"
        );
        let next = admit(&limit, 0, Some(bucket), 1_050, 5);
        assert_eq!(next.admitted, 1, "50 ms at 20/s is one token, not two");
        let reset = admit(&limit, 0, Some(bucket), 1_000 - CLOCK_BEHIND_MS - 1, 5);
        let bucket = reset.bucket.unwrap();
        assert_eq!(
            bucket.at_ms,
            1_000 - CLOCK_BEHIND_MS - 1,
            "a clock that went back: the bucket starts again from it"
        );
        let after = admit(&limit, 0, Some(bucket), 1_000 - CLOCK_BEHIND_MS + 49, 5);
        assert_eq!(after.admitted, 1, "and refills from then on");
    }

    #[test]
    fn gate_data_keeps_its_bucket_and_cap() {
        let data = GateData {
            bucket: Some(Bucket {
                tokens: 1.5,
                at_ms: 7,
            }),
            max_in_flight: Some(2),
            full_at_ms: None,
            rate_per_ms: None,
        };
        let bytes = serde_json::to_vec(&data).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"tokens":1.5,"at_ms":7,"max_in_flight":2}"#
        );
        assert_eq!(GateData::read(&bytes), data);
        assert_eq!(GateData::read(b""), GateData::default());
        let old = GateData::read(br#"{"tokens":2.0,"at_ms":9}"#);
        assert_eq!(
            (old.bucket.map(|b| b.at_ms), old.max_in_flight),
            (Some(9), None)
        );
    }

    #[test]
    fn a_gate_says_when_its_next_token_comes() {
        let limit = Limit {
            rate_per_ms: Some(0.001), // 1/s: burst 1
            ..Limit::default()
        };
        let emptied = GateData::after(&limit, admit(&limit, 0, None, 5_000, 1).bucket);
        assert_eq!(emptied.rate_per_ms, Some(0.001));
        assert_eq!(emptied.next_token_at(5_400), Some(6_000));
        assert_eq!(emptied.next_token_at(6_000), None, "a whole token by then");
        let capped_only = GateData::after(
            &Limit {
                max_in_flight: Some(1),
                ..Limit::default()
            },
            None,
        );
        assert_eq!(
            capped_only.next_token_at(0),
            None,
            "no rate, no token to wait for"
        );
    }

    #[test]
    fn a_gate_knows_when_its_bucket_is_full_again() {
        let limit = Limit {
            rate_per_ms: Some(0.001), // 1/s: burst 1
            ..Limit::default()
        };
        let emptied = admit(&limit, 0, None, 5_000, 1).bucket;
        assert_eq!(GateData::after(&limit, emptied).full_at_ms, Some(6_000));
        let capped = Limit {
            max_in_flight: Some(2),
            ..Limit::default()
        };
        let data = GateData::after(&capped, None);
        assert_eq!((data.max_in_flight, data.full_at_ms), (Some(2), None));
    }
}
