//! A webhook's `202` that suspends its task: what it asks for, read from its JSON body.
//!
//! ```json
//! {"checkpoint": {"cursor": 42}}                                   resume at once
//! {"checkpoint": {"cursor": 42}, "resume_in": "10s"}               resume in 10 s
//! {"checkpoint": {…}, "wait_for": ["order-7"], "timeout": "1h"}    resume on a signal, or in 1 h
//! ```
//!
//! A `202` whose body is not a JSON object with one of `checkpoint`, `resume_in` or
//! `wait_for` delivers the task, as any 2xx does. Spans are written with their unit (`1500ms`,
//! `90s`, `30m`, `1h`, `7d`).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::resume::Then;

/// What a `202` body asks for: the checkpoint (none: the last stays) and when to resume;
/// `None` when the body is not a suspension; `Some(Err)` naming what is wrong with one.
pub(super) fn suspension(body: &[u8]) -> Option<Result<(Option<Value>, Then), String>> {
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let asks = ["checkpoint", "resume_in", "wait_for"];
    if !asks.iter().any(|field| answer.contains_key(*field)) {
        return None;
    }
    let checkpoint = answer.get("checkpoint").cloned();
    Some(then(&answer).map(|then| (checkpoint, then)))
}

fn then(answer: &Map<String, Value>) -> Result<Then, String> {
    match (answer.get("resume_in"), answer.get("wait_for")) {
        (Some(_), Some(_)) => Err("a 202 answers both resume_in and wait_for".into()),
        (Some(span), None) => Ok(Then::In(span_of("resume_in", span)?)),
        (None, Some(keys)) => {
            let keys = keys
                .as_array()
                .and_then(|keys| keys.iter().map(|k| k.as_str().map(String::from)).collect())
                .ok_or("wait_for must be an array of keys (strings)")?;
            let timeout = answer
                .get("timeout")
                .ok_or("a 202 with wait_for needs a timeout (\"1h\")")?;
            let timeout = span_of("timeout", timeout)?;
            Ok(Then::WaitFor { keys, timeout })
        }
        (None, None) => Ok(Then::Now),
    }
}

fn span_of(field: &str, value: &Value) -> Result<Duration, String> {
    value
        .as_str()
        .and_then(crate::clock::span_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| {
            format!("{field} {value} is not a span with its unit (1500ms, 90s, 30m, 1h, 7d)")
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(body: Value) -> Option<Result<(Option<Value>, Then), String>> {
        suspension(body.to_string().as_bytes())
    }

    #[test]
    fn a_checkpoint_answer_says_when_to_resume() {
        let cursor = Some(json!({"cursor": 42}));
        assert_eq!(
            read(json!({"checkpoint": {"cursor": 42}})),
            Some(Ok((cursor.clone(), Then::Now)))
        );
        assert_eq!(
            read(json!({"checkpoint": {"cursor": 42}, "resume_in": "10s"})),
            Some(Ok((cursor, Then::In(Duration::from_secs(10)))))
        );
        let waits = read(json!({"wait_for": ["a", "b"], "timeout": "1h"}));
        let keys = vec!["a".to_string(), "b".to_string()];
        let timeout = Duration::from_secs(3600);
        assert_eq!(waits, Some(Ok((None, Then::WaitFor { keys, timeout }))));
    }

    #[test]
    fn any_other_202_delivers() {
        assert_eq!(read(json!({"accepted": true})), None);
        assert_eq!(read(json!([1])), None);
        assert_eq!(suspension(b"queued"), None);
        assert_eq!(suspension(b""), None);
    }

    #[test]
    fn a_malformed_suspension_names_its_problem() {
        for (body, problem) in [
            (json!({"resume_in": "10"}), "resume_in \"10\" is not a span"),
            (
                json!({"resume_in": "1s", "wait_for": ["a"]}),
                "both resume_in and wait_for",
            ),
            (json!({"wait_for": ["a"]}), "needs a timeout"),
            (
                json!({"wait_for": "a", "timeout": "1h"}),
                "must be an array of keys",
            ),
        ] {
            match read(body.clone()) {
                Some(Err(e)) => assert!(e.contains(problem), "{body}: {e}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
