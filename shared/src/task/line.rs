//! One task as a producer without a ZooKeeper client sends it (a JSON line of `event-bridge
//! publish -f`, an item of an HTTP publish): an object with `payload` names its own `type`,
//! `id`, `group`, `idempotency_key`, `concurrency_key`, `batch`, `after`, `on_parent_dead`, `priority`, `delay`, `debounce_key` (`debounce`, `debounce_max`),
//! `on_dead` and `traceparent`; any other value is the payload itself, of
//! the default type when there is one. An item a publish would refuse (an empty id, a key too
//! long for a znode name: [`Envelope::check_publishable`]) is an error here already.

use serde_json::Value;

use super::{Envelope, OnDead};

impl Envelope {
    /// The id `item` gives its task, if it gives one: a string `id` beside a `payload` (without
    /// a payload the whole value is the payload, and an `id` in it is data). A task without one
    /// gets a fresh id, which no other task has.
    pub fn id_given_in(item: &Value) -> Option<&str> {
        item.get("payload")?;
        item.get("id")?.as_str()
    }
}

/// The envelope `value` asks for. Without `default_type`, a `type` and a `payload` are
/// required; a field of the wrong kind, an empty id or a key too long is an error naming it.
pub fn envelope_from_value(
    mut value: Value,
    default_type: Option<&str>,
) -> Result<Envelope, String> {
    let payload = value.as_object_mut().and_then(|o| o.remove("payload"));
    let Some(payload) = payload else {
        return match default_type {
            Some(default_type) => Ok(Envelope::new(default_type, value)),
            None => Err("must be an object with \"type\" and \"payload\"".into()),
        };
    };
    let text = |key: &str| match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("\"{key}\" must be a string")),
    };
    let event_type = match (text("type")?, default_type) {
        (Some(t), _) => t,
        (None, Some(d)) => d.to_string(),
        (None, None) => return Err("\"type\" is missing".into()),
    };
    if event_type.is_empty() {
        return Err("\"type\" is empty".into());
    }
    let mut envelope = Envelope::new(event_type, payload);
    if let Some(id) = text("id")? {
        envelope.id = id;
    }
    envelope.group = text("group")?;
    envelope.idempotency_key = text("idempotency_key")?;
    envelope.concurrency_key = text("concurrency_key")?;
    envelope.batch = text("batch")?;
    envelope.after = after(value.get("after"))?;
    envelope.on_parent_dead = (text("on_parent_dead")?)
        .map(|t| super::OnParentDead::parse(&t))
        .transpose()?;
    if let Some(priority) = text("priority")? {
        envelope.priority = super::Priority::parse(&priority)?;
    }
    envelope.debounce = debounce(&text)?;
    envelope.delay_ms = text("delay")?
        .map(|d| parse_delay("delay", &d))
        .transpose()?;
    envelope.traceparent = match text("traceparent")? {
        Some(t) if !super::is_traceparent(&t) => {
            return Err(format!(
                "\"traceparent\" {t:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"
            ));
        }
        other => other,
    };
    envelope.on_dead = match text("on_dead")?.as_deref() {
        None => None,
        Some("pause") => Some(OnDead::Pause),
        Some("continue") => Some(OnDead::Continue),
        Some(other) => {
            return Err(format!(
                "\"on_dead\" must be pause or continue, not {other:?}"
            ));
        }
    };
    envelope.check_publishable()?;
    Ok(envelope)
}

/// A line's `after`: an array of task names or ids, or one string of them separated by commas.
fn after(value: Option<&Value>) -> Result<Vec<String>, String> {
    let names: Vec<String> = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => s.split(',').map(|n| n.trim().to_string()).collect(),
        Some(Value::Array(items)) => (items.iter())
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("\"after\" must be task names or ids (strings)")?,
        Some(_) => return Err("\"after\" must be a string or an array of strings".into()),
    };
    Ok(names)
}

/// The longest delay a publish takes: a year.
const MAX_DELAY_MS: u64 = 365 * 24 * 3_600_000;

/// A delay in ms, as a line's `delay` (and the command's `--delay`) takes it: a whole number and
/// `ms`, `s`, `m`, `h` or `d`, at most a year; the problem names `field`.
pub fn parse_delay(field: &str, text: &str) -> Result<u64, String> {
    let ms = super::parse_span(field, text)?;
    if ms > MAX_DELAY_MS {
        return Err(format!(
            "\"{field}\" must be at most {MAX_DELAY_MS} ms (a year)"
        ));
    }
    Ok(ms)
}

/// The debounce a line asks for: `debounce_key` with `debounce` (and `debounce_max`), or
/// neither.
fn debounce(
    text: &impl Fn(&str) -> Result<Option<String>, String>,
) -> Result<Option<super::Debounce>, String> {
    let (key, period, max) = (
        text("debounce_key")?,
        text("debounce")?,
        text("debounce_max")?,
    );
    let Some(key) = key else {
        if period.is_some() || max.is_some() {
            return Err("\"debounce\" needs a \"debounce_key\"".into());
        }
        return Ok(None);
    };
    let Some(period) = period else {
        return Err("\"debounce_key\" needs a \"debounce\" period, such as \"30s\"".into());
    };
    Ok(Some(super::Debounce {
        key,
        period_ms: super::parse_span("debounce", &period)?,
        max_ms: max
            .map(|m| super::parse_span("debounce_max", &m))
            .transpose()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_item_names_its_fields_or_is_a_payload_of_the_default_type() {
        let full = json!({"type": "a.b", "payload": {"n": 1}, "id": "x", "group": "g",
            "idempotency_key": "k", "on_dead": "pause", "concurrency_key": "tenant-1",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
        let e = envelope_from_value(full, None).unwrap();
        assert_eq!(
            (
                e.event_type.as_str(),
                e.id.as_str(),
                e.group.as_deref(),
                e.on_dead
            ),
            ("a.b", "x", Some("g"), Some(OnDead::Pause))
        );
        assert!(e.traceparent.is_some());
        assert_eq!(e.concurrency_key.as_deref(), Some("tenant-1"));
        let bare = envelope_from_value(json!({"n": 2}), Some("event")).unwrap();
        assert_eq!(
            (bare.event_type.as_str(), bare.payload.clone()),
            ("event", json!({"n": 2}))
        );
    }

    #[test]
    fn without_a_default_type_and_payload_are_required() {
        assert!(
            envelope_from_value(json!({"n": 2}), None)
                .unwrap_err()
                .contains("payload")
        );
        let untyped = envelope_from_value(json!({"payload": {}}), None);
        assert!(untyped.unwrap_err().contains("\"type\" is missing"));
        let wrong = envelope_from_value(json!({"type": 5, "payload": {}}), None);
        assert!(wrong.unwrap_err().contains("\"type\" must be a string"));
        let dead =
            envelope_from_value(json!({"type": "t", "payload": {}, "on_dead": "stop"}), None);
        assert!(dead.unwrap_err().contains("on_dead"));
        let trace = json!({"type": "t", "payload": {}, "traceparent": "01-x"});
        let trace = envelope_from_value(trace, None);
        assert!(trace.unwrap_err().contains("traceparent"));
        let empty = envelope_from_value(json!({"type": "t", "payload": {}, "id": ""}), None);
        assert!(empty.unwrap_err().contains("\"id\" is empty"));
        let key = json!({"type": "t", "payload": {}, "idempotency_key": "é".repeat(5_000)});
        let key = envelope_from_value(key, None);
        assert!(
            key.unwrap_err()
                .contains("\"idempotency_key\" is 10000 bytes")
        );
        let number = json!({"type": "t", "payload": {}, "concurrency_key": 7});
        let number = envelope_from_value(number, None);
        assert!(
            number
                .unwrap_err()
                .contains("\"concurrency_key\" must be a string")
        );
        let empty = json!({"type": "t", "payload": {}, "concurrency_key": ""});
        let empty = envelope_from_value(empty, None);
        assert!(empty.unwrap_err().contains("\"concurrency_key\" is empty"));
        let lane = json!({"type": "t", "payload": {}, "priority": "urgent"});
        let lane = envelope_from_value(lane, None).unwrap_err();
        assert!(
            lane.contains("\"priority\" must be high, normal or low"),
            "{lane}"
        );
        let lane = json!({"type": "t", "payload": {}, "priority": 1});
        let lane = envelope_from_value(lane, None).unwrap_err();
        assert!(lane.contains("\"priority\" must be a string"), "{lane}");
        let later = json!({"type": "t", "payload": {}, "delay": "2s"});
        assert_eq!(
            envelope_from_value(later, None).unwrap().delay_ms,
            Some(2_000)
        );
        let never = json!({"type": "t", "payload": {}, "delay": "soon"});
        assert!(
            envelope_from_value(never, None)
                .unwrap_err()
                .contains("\"delay\"")
        );
        let high = json!({"type": "t", "payload": {}, "priority": "high"});
        assert_eq!(
            envelope_from_value(high, None).unwrap().priority,
            super::super::Priority::High
        );
    }

    #[test]
    fn an_id_is_given_only_beside_a_payload() {
        let given = json!({"type": "t", "payload": {}, "id": "order-7"});
        assert_eq!(Envelope::id_given_in(&given), Some("order-7"));
        assert_eq!(Envelope::id_given_in(&json!({"id": "data"})), None);
        assert_eq!(Envelope::id_given_in(&json!({"payload": 1})), None);
    }
}
