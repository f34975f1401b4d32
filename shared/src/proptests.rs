//! Property tests of what reads bytes written by others: the body parser, the envelope, the
//! JSON depth scan and the dead-letter record. Arbitrary bytes never panic; what we write we
//! read back the same.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::dead::original_body;
use crate::queue::record::{RECORD_LIMIT, build_record};
use crate::task::{self, Body, Envelope, json as depth_json};

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Any envelope our producers and consumers may write.
fn any_envelope() -> impl Strategy<Value = Envelope> {
    (
        ("[a-z0-9-]{1,36}", "[a-z.]{1,20}", any_json()),
        (
            proptest::option::of(".{0,10}"),
            proptest::option::of(".{1,10}"),
            0u32..10,
            0u32..4,
            proptest::option::of(".{0,30}"),
            proptest::option::of(any::<i64>()),
            0i64..4_000_000_000_000,
        ),
    )
        .prop_map(
            |(
                (id, kind, payload),
                (group, key, attempts, interruptions, last_error, retry_at, ms),
            )| {
                let mut envelope = Envelope::new(kind, payload);
                envelope.id = id;
                envelope.group = group;
                envelope.idempotency_key = key;
                envelope.attempts = attempts;
                envelope.interruptions = interruptions;
                envelope.last_error = last_error;
                envelope.retry_at = retry_at;
                envelope.time = chrono::DateTime::from_timestamp_millis(ms).expect("in range");
                envelope
            },
        )
}

/// A body as any producer might write it: JSON, other text, or bytes.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        ".{0,200}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..400),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = task::parse(&bytes);
        let _ = depth_json::depth(&bytes);
        let _ = depth_json::parse(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn deep_brackets_never_panic(open in 0usize..2000, close in 0usize..2000) {
        let text = format!("{}{}", "[".repeat(open), "]".repeat(close));
        let _ = task::parse(text.as_bytes());
    }

    #[test]
    fn an_envelope_reads_back_as_written(envelope in any_envelope()) {
        let bytes = envelope.to_bytes().unwrap();
        prop_assert_eq!(task::parse(&bytes), Body::Envelope(envelope));
    }

    #[test]
    fn other_json_reads_back_as_a_plain_body(value in any_json()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        let is_envelope = value.get("format").and_then(Value::as_str) == Some(task::FORMAT);
        prop_assume!(!is_envelope);
        prop_assert_eq!(task::parse(&bytes), Body::Plain(value));
    }

    #[test]
    fn a_dead_letter_record_stays_small_and_gives_its_body_back(body in any_body()) {
        let about = json!({"task": "task-0000000001", "reason": "r", "attempts": 1});
        let (record, bytes) = build_record(about, &body);
        prop_assert!(bytes.len() <= RECORD_LIMIT);
        let read = depth_json::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
        prop_assert_eq!(&read, &record);
        let again = original_body("task-0000000001", &read).unwrap();
        match task::parse(&body) {
            // JSON comes back as the same value (serde_json may space or order it otherwise).
            Body::Plain(value) => {
                let back: Value = serde_json::from_slice(&again).unwrap();
                prop_assert_eq!(back, value);
            }
            Body::Envelope(_) => prop_assert!(matches!(task::parse(&again), Body::Envelope(_))),
            Body::Place(_) => prop_assert!(matches!(task::parse(&again), Body::Place(_))),
            Body::Poison(_) => prop_assert_eq!(again, body),
        }
    }
}
