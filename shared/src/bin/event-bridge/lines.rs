//! Reading input: JSON lines into envelopes, and delays such as `30s`.

use std::io::BufRead;
use std::time::Duration;

use event_bridge::Envelope;
use serde_json::Value;

/// The envelopes of a JSON-lines input (a file, or `-` for stdin), one at a time; a bad line
/// is an error naming its number. Blank lines are skipped.
pub(crate) fn envelopes(
    path: &str,
    default_type: &str,
) -> Result<impl Iterator<Item = Result<Envelope, String>>, String> {
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let (path, default_type) = (path.to_string(), default_type.to_string());
    Ok(reader.lines().enumerate().filter_map(move |(i, line)| {
        let line = match line {
            Ok(line) if line.trim().is_empty() => return None,
            Ok(line) => line,
            Err(e) => return Some(Err(format!("{path}: {e}"))),
        };
        Some(
            serde_json::from_str(&line)
                .map(|value| envelope_from_line(value, &default_type))
                .map_err(|e| format!("{path}:{}: not JSON: {e}", i + 1)),
        )
    }))
}

/// A line with a `payload` field names its own type, id, group, key and `on_dead`; any other
/// line is the payload itself.
fn envelope_from_line(mut value: Value, default_type: &str) -> Envelope {
    let Some(payload) = value.as_object_mut().and_then(|o| o.remove("payload")) else {
        return Envelope::new(default_type, value);
    };
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let mut envelope = Envelope::new(text("type").unwrap_or_else(|| default_type.into()), payload);
    if let Some(id) = text("id") {
        envelope.id = id;
    }
    envelope.group = text("group");
    envelope.idempotency_key = text("idempotency_key");
    envelope.on_dead = match text("on_dead").as_deref() {
        Some("pause") => Some(event_bridge::task::OnDead::Pause),
        Some("continue") => Some(event_bridge::task::OnDead::Continue),
        _ => None,
    };
    envelope
}

/// `1500ms`, `30s`, `5m`, `2h`, or a bare number of seconds.
pub(crate) fn parse_delay(raw: &str) -> Result<Duration, String> {
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} is not a delay such as 30s or 5m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{raw:?}: unit must be ms, s, m or h")),
    };
    const YEAR_MS: u64 = 365 * 24 * 3_600_000;
    let ms = ms
        .filter(|ms| *ms <= YEAR_MS)
        .ok_or_else(|| format!("{raw:?}: a delay is at most a year"))?;
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delays_take_a_unit() {
        assert_eq!(parse_delay("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_delay("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_delay("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_delay("5d").is_err());
        assert!(parse_delay("m").is_err());
        assert!(parse_delay("99999999999999999h").is_err());
    }

    #[test]
    fn lines_with_a_payload_field_carry_their_own_fields() {
        let e = envelope_from_line(
            json!({"type": "a.b", "payload": 1, "id": "x", "group": "g"}),
            "dflt",
        );
        assert_eq!(
            (e.event_type.as_str(), e.id.as_str(), e.group.as_deref()),
            ("a.b", "x", Some("g"))
        );
        assert_eq!(e.payload, json!(1));
        let plain = envelope_from_line(json!({"user": 1}), "dflt");
        assert_eq!(
            (plain.event_type.as_str(), plain.payload.clone()),
            ("dflt", json!({"user": 1}))
        );
    }
}
