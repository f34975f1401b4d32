//! What a route says besides its sink: its limits (`max_in_flight`, `rate`, `per_key`) and
//! what its tasks' groups do when one goes to the dead letters (`on_dead`). Each is taken out
//! of the route's spec, so that the sink's own fields remain; an error names the field.

use serde_json::{Map, Value};

use crate::limit::{KeyLimit, Limit};
use crate::task::OnDead;

/// A route's `max_in_flight` (at least 1), `rate` (`"10/s"`) and `per_key` (the same two
/// for each `concurrency_key`), taken out of the spec so that the sink's own fields remain.
pub(super) fn take_limit(spec: &mut Value) -> Result<Limit, String> {
    let Some(fields) = spec.as_object_mut() else {
        return Ok(Limit::default());
    };
    let (max_in_flight, rate_per_ms) = take_caps(fields, "")?;
    let per_key = match fields.remove("per_key") {
        None => None,
        Some(Value::Object(mut key_fields)) => {
            let (max_in_flight, rate_per_ms) = take_caps(&mut key_fields, "per_key.")?;
            if let Some(other) = key_fields.keys().next() {
                return Err(format!(
                    "per_key.{other}: unknown field (max_in_flight and rate are known)"
                ));
            }
            if max_in_flight.is_none() && rate_per_ms.is_none() {
                return Err("per_key: give max_in_flight, rate or both".into());
            }
            Some(KeyLimit {
                max_in_flight,
                rate_per_ms,
            })
        }
        Some(other) => {
            return Err(format!(
                "per_key: {other} is not an object such as {{\"max_in_flight\": 2}}"
            ));
        }
    };
    Ok(Limit {
        max_in_flight,
        rate_per_ms,
        per_key,
    })
}

/// `max_in_flight` and `rate` taken out of `fields`; an error names the field (after
/// `prefix`).
fn take_caps(
    fields: &mut Map<String, Value>,
    prefix: &str,
) -> Result<(Option<u32>, Option<f64>), String> {
    let max_in_flight = match fields.remove("max_in_flight") {
        None => None,
        Some(value) => match value.as_u64() {
            Some(n @ 1..=100_000) => Some(n as u32),
            _ => {
                return Err(format!(
                    "{prefix}max_in_flight: {value} is not a whole number from 1 to 100000"
                ));
            }
        },
    };
    let rate_per_ms = match fields.remove("rate") {
        None => None,
        Some(Value::String(text)) => {
            Some(crate::limit::parse_rate(&text).map_err(|e| format!("{prefix}{e}"))?)
        }
        Some(other) => {
            return Err(format!(
                "{prefix}rate: {other} is not text such as \"10/s\""
            ));
        }
    };
    Ok((max_in_flight, rate_per_ms))
}

/// A route's `on_dead` (what its tasks' groups do when one goes to the dead letters), taken
/// out of the spec so that the sink's own fields remain.
pub(super) fn take_on_dead(spec: &mut Value) -> Result<Option<OnDead>, String> {
    let Some(value) = spec.as_object_mut().and_then(|o| o.remove("on_dead")) else {
        return Ok(None);
    };
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| format!("on_dead: {e} (\"continue\" or \"pause\")"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limit(spec: Value) -> Result<Limit, String> {
        take_limit(&mut spec.clone())
    }

    #[test]
    fn per_key_limits_parse_beside_the_route_s_own() {
        let got = limit(json!({"sink": "log", "max_in_flight": 8,
            "per_key": {"max_in_flight": 2, "rate": "1/s"}}))
        .unwrap();
        assert_eq!(got.max_in_flight, Some(8));
        assert_eq!(
            got.per_key,
            Some(KeyLimit {
                max_in_flight: Some(2),
                rate_per_ms: Some(0.001)
            })
        );
        let only_keys = limit(json!({"per_key": {"max_in_flight": 1}})).unwrap();
        assert!(only_keys.is_some() && !only_keys.gates_route());
        let mut spec = json!({"sink": "log", "per_key": {"rate": "5/s"}});
        take_limit(&mut spec).unwrap();
        assert_eq!(spec, json!({"sink": "log"}), "the sink's fields remain");
    }

    #[test]
    fn a_bad_per_key_limit_names_its_field() {
        for (spec, says) in [
            (json!({"per_key": 2}), "per_key: 2 is not an object"),
            (
                json!({"per_key": {}}),
                "per_key: give max_in_flight, rate or both",
            ),
            (
                json!({"per_key": {"max_in_flight": 0}}),
                "per_key.max_in_flight: 0 is not",
            ),
            (
                json!({"per_key": {"rate": "fast"}}),
                "per_key.rate \"fast\" must look like",
            ),
            (
                json!({"per_key": {"rate": 3}}),
                "per_key.rate: 3 is not text",
            ),
            (
                json!({"per_key": {"max_in_flight": 1, "burst": 2}}),
                "per_key.burst: unknown field",
            ),
            (
                json!({"max_in_flight": -1}),
                "max_in_flight: -1 is not a whole number",
            ),
        ] {
            let problem = limit(spec.clone()).unwrap_err();
            assert!(problem.starts_with(says), "{spec}: {problem}");
        }
    }
}
