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
    if let Err(problem) = super::names::check_runnable(&envelope) {
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
}
