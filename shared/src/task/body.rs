//! Reading a task body: an envelope, a plain body, or poison with the reason.

use serde_json::Value;

use super::envelope::{Envelope, FORMAT};
use super::place::Place;

/// A task body, read. (It lives for one `match`; boxing the envelope would buy nothing.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// A task in our envelope format.
    Envelope(Envelope),
    /// A place that keeps a grouped task's turn in its lane while the task waits elsewhere
    /// (see [`Place`]): never run itself.
    Place(Place),
    /// Any other JSON, written by a producer that does not know the envelope.
    Plain(Value),
    /// Not a task we can run; the reason says why.
    Poison(String),
}

/// Reads a task body.
pub fn parse(bytes: &[u8]) -> Body {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return Body::Poison(format!("body is not UTF-8: {e}")),
    };
    let value: Value = match super::json::parse(text) {
        Ok(value) => value,
        Err(e) => return Body::Poison(format!("body is not JSON: {e}")),
    };
    if value.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Body::Plain(value);
    }
    let envelope: Envelope = match serde_json::from_value(value) {
        Ok(envelope) => envelope,
        Err(e) => return Body::Poison(format!("malformed {FORMAT} envelope: {e}")),
    };
    // A name no claim could carry (another producer's): run, it would fail every claim.
    if let Err(problem) = super::publishable::check_runnable(&envelope) {
        return Body::Poison(format!("malformed {FORMAT} envelope: {problem}"));
    }
    match Place::from_envelope(&envelope) {
        None => Body::Envelope(envelope),
        Some(Ok(place)) => Body::Place(place),
        Some(Err(problem)) => Body::Poison(format!("malformed {FORMAT} place: {problem}")),
    }
}

/// The group and id of a task body that is an envelope with a group, or a place. A body without the word
/// `"group"` is not parsed at all, so ungrouped tasks cost a scan of their bytes.
pub fn group_of(body: &[u8]) -> Option<(String, String)> {
    const FIELD: &[u8] = b"\"group\"";
    if !body.windows(FIELD.len()).any(|w| w == FIELD) {
        return None;
    }
    match parse(body) {
        Body::Envelope(envelope) => envelope.group.map(|group| (group, envelope.id)),
        Body::Place(place) => Some((place.group, place.id)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{OnDead, OnParentDead, PLACE_DUE_MS, StandsFor};
    use serde_json::json;

    #[test]
    fn other_json_is_a_plain_body() {
        let body = br#"{"user_id":123,"action":"export_report"}"#;
        assert_eq!(
            parse(body),
            Body::Plain(json!({"user_id": 123, "action": "export_report"}))
        );
    }

    #[test]
    fn an_envelope_with_a_name_no_claim_could_carry_is_poison() {
        let mut envelope = Envelope::new("a", json!({}));
        envelope.group = Some("g".repeat(600_000));
        let body = serde_json::to_vec(&envelope).unwrap();
        match parse(&body) {
            Body::Poison(reason) => assert!(
                reason.starts_with("malformed event-bridge/1 envelope: \"group\" is 600000"),
                "{reason:.200}"
            ),
            other => panic!("{other:.200?}"),
        }
        assert_eq!(group_of(&body), None, "no group to lock");
    }

    #[test]
    fn poison_says_why() {
        let cases: [(&[u8], &str); 4] = [
            (b"\xff\xfe", "not UTF-8"),
            (b"{not json", "not JSON"),
            (b"", "not JSON"),
            (br#"{"format":"event-bridge/1","id":1}"#, "malformed"),
        ];
        for (bytes, why) in cases {
            match parse(bytes) {
                Body::Poison(reason) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{bytes:?} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn an_envelope_round_trips() {
        let mut e = Envelope::new("user.signup", json!({"user_id": 7}));
        e.extra.insert("trace".into(), json!("abc"));
        assert_eq!(parse(&e.to_bytes().unwrap()), Body::Envelope(e));
    }

    #[test]
    fn the_published_json_schema_matches_the_envelope() {
        let schema: Value =
            serde_json::from_str(include_str!("../../../docs/envelope.schema.json")).unwrap();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, ["format", "id", "type", "time", "payload"]);
        let mut full = Envelope::new("a.b", json!({}));
        full.group = Some("g".into());
        full.idempotency_key = Some("k".into());
        full.concurrency_key = Some("c".into());
        full.batch = Some("b".into());
        full.after = vec!["p".into()];
        full.on_parent_dead = Some(OnParentDead::Run);
        full.waiting_on = vec!["p".into()];
        full.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        full.last_error = Some("e".into());
        full.retry_at = Some(1);
        full.interruptions = 2;
        full.moved_from = vec!["task-0000000001".into()];
        let written = serde_json::to_value(&full).unwrap();
        for key in written.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(key).is_some(),
                "{key} is not in the schema"
            );
        }
        for key in required {
            let mut missing = written.clone();
            missing.as_object_mut().unwrap().remove(key);
            let parsed = parse(&serde_json::to_vec(&missing).unwrap());
            let expect_poison = key != "format"; // without `format` it is a plain body
            assert_eq!(
                matches!(parsed, Body::Poison(_)),
                expect_poison,
                "without {key}: {parsed:?}"
            );
        }
    }

    #[test]
    fn a_place_reads_back_as_a_place_and_an_old_reader_sees_a_grouped_task_not_due() {
        let mut task = Envelope::new("report.mail", serde_json::json!({"n": 1}));
        task.group = Some("customer-9".into());
        task.on_dead = Some(OnDead::Pause);
        let place = Place::of(&task, "customer-9", &task.id, StandsFor::Parents);
        let bytes = place.to_bytes();
        assert_eq!(parse(&bytes), Body::Place(place.clone()));

        // What a reader that knows no places takes it for.
        let old: Envelope = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(old.group.as_deref(), Some("customer-9"));
        assert_eq!(old.retry_at, Some(PLACE_DUE_MS));
        assert_eq!(old.payload, Value::Null);

        let debounce = StandsFor::Debounce {
            key: "doc-7".into(),
        };
        let place = Place::of(&task, "customer-9", "first", debounce);
        assert_eq!(parse(&place.to_bytes()), Body::Place(place));
    }

    #[test]
    fn a_place_this_version_cannot_read_is_poison() {
        let mut body: Value = serde_json::from_slice(
            &Place::of(
                &Envelope::new("a", Value::Null),
                "g",
                "i",
                StandsFor::Parents,
            )
            .to_bytes(),
        )
        .unwrap();
        body["place"] = serde_json::json!({"signal": "k"});
        let bytes = serde_json::to_vec(&body).unwrap();
        match parse(&bytes) {
            Body::Poison(reason) => assert!(reason.contains("place"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
