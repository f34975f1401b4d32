//! The task envelope: what our producers write into a task znode, and how a plain body from
//! another producer is wrapped into one.

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Debounce;
use super::after::OnParentDead;
use super::size::check_size;
use crate::lane::Priority;

/// The value of an envelope's `format` field, which tells it from a plain body.
pub const FORMAT: &str = "event-bridge/1";

/// A task body as our producers write it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always [`FORMAT`].
    pub format: String,
    /// Stable across retries and redrives; producers may set it to their own event id.
    pub id: String,
    /// What happened, such as `user.signup`; routes will key on it.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the event happened, by the producer's clock.
    pub time: DateTime<Utc>,
    /// The event's data, any JSON.
    pub payload: Value,
    /// Tasks of one group run one at a time, in publish order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// What the task's group does when this task goes to the dead letters: go on (the
    /// default) or stay paused until `event-bridge resume --group` (a route may also ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dead: Option<OnDead>,
    /// Publishing again with a key that is pending, held, or completed within
    /// `DEDUP_WINDOW_MS` creates nothing; sinks that deduplicate get it (the id when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Tasks with the same key share their route's `per_key` limits (`max_in_flight`, `rate`),
    /// across every consumer; a route without them ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// The batch it joined at its publish (`batches/<batch>`): its completion or burial is
    /// counted there, and the batch's callback follows the last of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// The tasks it runs after (their ids): it waits under `after/<id>` until each is
    /// completed (see [`crate::task::after`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// What it does when a parent goes to the dead letters (`fail` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_parent_dead: Option<OnParentDead>,
    /// The parents (ids) it still waits for, while it waits under `after/`; written by the
    /// queue, empty once it is in a lane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<String>,
    /// The lane the task waits in: consumers take high before normal before low. Normal is
    /// left out when written.
    #[serde(default, skip_serializing_if = "Priority::is_normal")]
    pub priority: Priority,
    /// Published debounced: publishes with the same key within the period replace this one
    /// (see [`Debounce`]); the task that runs carries the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<Debounce>,
    /// W3C Trace Context of the request the event came from (`00-<trace id>-<span id>-<flags>`):
    /// the HTTP sink sends it as the `traceparent` header, the SQS sink as a message attribute,
    /// and consumers log it with the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Set by a producer that created `keys/<idempotency_key>` with the task: consumers then
    /// mark the key completed, or delete it when the task goes to the dead letters.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keyed: bool,
    /// Claims so far. Consumers raise it when they claim; producers leave it out.
    #[serde(default)]
    pub attempts: u32,
    /// The error of the last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Times a run's deadline stopped it unfinished. Consumers raise it; producers leave it out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interruptions: u32,
    /// The task's earlier names, oldest first: a task that waited out a backoff comes back
    /// under a new name at the tail. Consumers write it; producers leave it out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved_from: Vec<String>,
    /// Not claimable before this ZooKeeper time (ms since the epoch, by the server's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<i64>,
    /// Written by the queue while a grouped task waits outside its lane (for its parents, or
    /// debounced): the id its place in the lane stands under, which keeps its turn in its
    /// group's order (see [`crate::task::Place`]). Producers leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed: Option<String>,
    /// A resumable task's record: the steps it did, the sleep or wait it is in (see
    /// [`crate::resume`]). Consumers write it; producers leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<crate::resume::Record>,
    /// Asked of a publish, never written: not claimable before this long after the publish,
    /// by ZooKeeper's clock (the publish sets `retry_at` from it).
    #[serde(skip)]
    pub delay_ms: Option<u64>,
    /// Fields a newer producer added, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a group does when one of its tasks goes to the dead letters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDead {
    /// The group's next task runs.
    #[default]
    Continue,
    /// The group stays paused until an operator unpauses it (`event-bridge resume --group`).
    Pause,
}

/// What groups do when one of their tasks goes to the dead letters, by event type (from the
/// routes), unless the task itself says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OnDeadPolicy {
    /// For types not listed.
    pub default: OnDead,
    /// What each listed event type does.
    pub types: std::collections::BTreeMap<String, OnDead>,
}

impl OnDeadPolicy {
    /// What `envelope`'s group does when it goes to the dead letters: what the task says,
    /// else what its type's route says.
    pub fn for_task(&self, envelope: &Envelope) -> OnDead {
        self.for_type(envelope.on_dead, &envelope.event_type)
    }

    /// What a task of `event_type` whose own choice is `own` makes its group do.
    pub fn for_type(&self, own: Option<OnDead>, event_type: &str) -> OnDead {
        own.unwrap_or_else(|| *self.types.get(event_type).unwrap_or(&self.default))
    }
}

/// Whether `value` is a W3C `traceparent` of version 00: `00-` 32 lower-case hex digits (not
/// all zero) `-` 16 (not all zero) `-` 2.
pub fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, span, flags]
        if *version == "00" && hex(trace, 32) && nonzero(trace) && hex(span, 16)
            && nonzero(span) && hex(flags, 2))
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Envelope {
    /// The lane it waits in (see [`crate::lane::Lane::for_task`]).
    pub fn lane(&self) -> crate::lane::Lane {
        crate::lane::Lane::for_task(
            self.priority,
            self.concurrency_key.as_deref(),
            self.group.as_deref(),
        )
    }

    /// A fresh envelope with a random id, stamped now.
    pub fn new(event_type: impl Into<String>, payload: Value) -> Self {
        Envelope {
            format: FORMAT.to_string(),
            id: uuid::Uuid::new_v4().to_string(),
            event_type: event_type.into(),
            time: Utc::now(),
            payload,
            group: None,
            on_dead: None,
            idempotency_key: None,
            concurrency_key: None,
            batch: None,
            after: Vec::new(),
            on_parent_dead: None,
            waiting_on: Vec::new(),
            priority: Priority::Normal,
            debounce: None,
            traceparent: None,
            keyed: false,
            attempts: 0,
            interruptions: 0,
            moved_from: Vec::new(),
            placed: None,
            last_error: None,
            retry_at: None,
            resume: None,
            delay_ms: None,
            extra: Map::new(),
        }
    }

    /// Wraps a plain body: its JSON is the payload, the task name its id, its `type` (or
    /// `event`) string field its type, and the znode's creation time its time.
    pub fn from_plain(task_name: &str, body: Value, created_ms: i64) -> Self {
        let event_type = ["type", "event"]
            .iter()
            .find_map(|k| body.get(k).and_then(Value::as_str))
            .unwrap_or("event")
            .to_string();
        let time = Utc
            .timestamp_millis_opt(created_ms)
            .single()
            .unwrap_or_else(Utc::now);
        Envelope {
            id: task_name.to_string(),
            time,
            ..Envelope::new(event_type, body)
        }
    }

    /// Serializes the envelope, refusing one too large for a znode.
    pub fn to_bytes(&self) -> crate::error::Result<Vec<u8>> {
        let bytes = serde_json::to_vec(self)?;
        check_size(&bytes)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_follow_the_w3c_form() {
        assert!(is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
    }

    use crate::task::size::MAX_BODY_BYTES;
    use serde_json::json;

    #[test]
    fn a_plain_body_is_wrapped_with_its_type_and_creation_time() {
        let e = Envelope::from_plain(
            "task-0000000003",
            json!({"event": "x.y"}),
            1_700_000_000_000,
        );
        assert_eq!(
            (e.id.as_str(), e.event_type.as_str()),
            ("task-0000000003", "x.y")
        );
        assert_eq!(e.time.timestamp_millis(), 1_700_000_000_000);
        assert_eq!(e.payload, json!({"event": "x.y"}));
        let untyped = Envelope::from_plain("task-0000000004", json!([1, 2]), 0);
        assert_eq!(untyped.event_type, "event");
    }

    #[test]
    fn oversize_bodies_are_refused() {
        let e = Envelope::new("big", json!("x".repeat(MAX_BODY_BYTES)));
        assert!(matches!(
            e.to_bytes(),
            Err(crate::error::Error::TooLarge { .. })
        ));
    }
}
