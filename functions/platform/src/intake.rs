//! What an HTTP request to `process_events` asks for (a run, a publish, a task's status), and a
//! publish's body read into envelopes. Pure functions: the Lambda Function URL and Vercel
//! handlers share them.

use std::collections::HashMap;

use event_bridge::Envelope;
use event_bridge::feature::Features;
use event_bridge::task::{MAX_BODY_BYTES, shown};
use serde_json::Value;

use crate::HttpReply;
use crate::trigger::{self, Trigger};

/// Tasks one publish may carry, at most.
pub const MAX_BATCH: usize = 1_000;

/// The methods the endpoint answers (the `Allow` of a 405). Not `HEAD`: answering it as `GET`
/// would run what the `GET` runs (a drain), and a `HEAD` must change nothing.
pub const ALLOWED_METHODS: &str = "GET, POST";

/// `Ok` for `GET` and `POST`, the methods an entry that only runs (the reaper's) answers; 405
/// with `Allow` for any other, `HEAD` included.
pub fn run_method(method: &str) -> Result<(), HttpReply> {
    match method {
        "GET" | "POST" => Ok(()),
        other => Err(not_allowed(other, "GET and POST run")),
    }
}

fn not_allowed(method: &str, what: &str) -> HttpReply {
    let problem = format!("method {method} is not allowed: {what}; send one of {ALLOWED_METHODS}");
    HttpReply::method_not_allowed(&problem, ALLOWED_METHODS)
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `GET` (a cron request, `?drain=1`): a run.
    Run(Trigger),
    /// `POST`: publish the body's tasks.
    Publish,
    /// `GET ?status=<task>`: where that task is.
    Status(String),
    /// `GET ?batch=<name>`: a batch's counts.
    Batch(String),
}

/// Reads the method, query string and whether there is a body. A `POST` with a body
/// publishes, unless its query asks for a run (`drain=`, `max_tasks=`); a `POST` without a
/// body is a run, as Lambda Function URL drains have always been sent.
///
/// # Notable errors
/// - 405 (with `Allow`) for any method but `GET` and `POST`, `HEAD` included;
/// - 400 for an empty `status=` or a `max_tasks` that is not a positive whole number.
pub fn ask(method: &str, query: &str, has_body: bool) -> Result<Ask, HttpReply> {
    let runs = query
        .split('&')
        .any(|pair| pair.starts_with("drain=") || pair.starts_with("max_tasks="));
    let asked = match method {
        "POST" if has_body && !runs => Ok(Ask::Publish),
        "POST" => trigger::from_query(query).map(Ask::Run),
        "GET" => match (status_of(query, "status="), status_of(query, "batch=")) {
            (Some(task), _) if task.is_empty() => {
                Err("status= is empty: give it a task name or id".into())
            }
            (Some(task), _) => Ok(Ask::Status(task)),
            (None, Some(name)) if name.is_empty() => {
                Err("batch= is empty: give it a batch name".into())
            }
            (None, Some(name)) => Ok(Ask::Batch(name)),
            (None, None) => trigger::from_query(query).map(Ask::Run),
        },
        other => {
            return Err(not_allowed(
                other,
                "GET runs or asks for a status, POST publishes or runs",
            ));
        }
    };
    asked.map_err(|problem: String| HttpReply::bad_request(&problem))
}

fn status_of(query: &str, field: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(field))
        .map(percent_decode)
}

/// A `POST` body that sends a signal rather than publishing: one JSON object with `signal` (the
/// key) and no `type`, and an optional `payload`. `None` for any other body; the problem with
/// a signal body that is malformed.
pub fn read_signal(body: &[u8]) -> Option<Result<(String, serde_json::Value), String>> {
    let Ok(serde_json::Value::Object(mut signal)) = serde_json::from_slice(body) else {
        return None;
    };
    if !signal.contains_key("signal") || signal.contains_key("type") {
        return None;
    }
    let key = match signal.remove("signal") {
        Some(serde_json::Value::String(key)) => key,
        _ => {
            let problem = "\"signal\" must be the key, a string: send {\"signal\": \"<key>\"}";
            return Some(Err(problem.into()));
        }
    };
    if let Some(other) = signal.keys().find(|field| *field != "payload") {
        return Some(Err(format!(
            "a signal has \"signal\" and \"payload\" only: remove {other:?}"
        )));
    }
    let payload = signal.remove("payload").unwrap_or_default();
    Some(Ok((key, payload)))
}

/// Why a publish's body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over `PUBLISH_MAX_BYTES`, or an item over ZooKeeper's limit: 413.
    TooLarge(String),
    /// Not what a publish takes: 400.
    Bad(String),
}

/// A publish's tasks, with the line each came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub envelopes: Vec<Envelope>,
    /// `lines[i]` is the line of `envelopes[i]` (1 for a body that is one object).
    pub lines: Vec<usize>,
}

/// The envelopes of a publish's body: one JSON object, or JSON lines (one object per line),
/// each with `type` and `payload` (and optionally `id`, `group`, `idempotency_key`,
/// `on_dead`). Any bad item refuses the whole body, naming its line: one that is not a task,
/// an empty id, an id an earlier line has, a key too long for a znode name, a task over
/// ZooKeeper's znode limit.
pub fn read_batch(body: &[u8], limit: usize, features: &Features) -> Result<Batch, Refused> {
    if body.len() > limit {
        return Err(Refused::TooLarge(format!(
            "the body is {} bytes, over PUBLISH_MAX_BYTES ({limit}): split it into smaller \
             publishes, or raise PUBLISH_MAX_BYTES",
            body.len()
        )));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| Refused::Bad("the body is not UTF-8: send JSON in UTF-8".into()))?;
    let items: Vec<(usize, Value)> = match serde_json::from_str::<Value>(text) {
        Ok(one @ Value::Object(_)) => vec![(1, one)],
        Ok(_) => {
            return Err(Refused::Bad(
                "the body must be a JSON object or JSON lines: send a task object, or one per \
                 line"
                    .into(),
            ));
        }
        Err(_) => lines(text)?,
    };
    if items.is_empty() {
        return Err(Refused::Bad(
            "the body holds no task: send a task object, or one per line".into(),
        ));
    }
    if items.len() > MAX_BATCH {
        return Err(Refused::TooLarge(format!(
            "{} tasks, over the {MAX_BATCH} one publish may carry: split it into smaller publishes",
            items.len()
        )));
    }
    let mut batch = Batch {
        envelopes: Vec::with_capacity(items.len()),
        lines: Vec::with_capacity(items.len()),
    };
    let mut first_with: HashMap<String, usize> = HashMap::new();
    let mut debounced: HashMap<String, usize> = HashMap::new();
    for (line, value) in items {
        let envelope = item(line, value, features)?;
        if let Some(first) = first_with.insert(envelope.id.clone(), line) {
            return Err(Refused::Bad(format!(
                "line {line}: id {} is also line {first}'s: ids must be unique within a \
                 publish (status and cancel by id would find only one task): give each line its \
                 own id",
                shown(&envelope.id)
            )));
        }
        let key = envelope.debounce.as_ref().map(|d| d.key.clone());
        if let Some(first) = key.and_then(|key| debounced.insert(key, line)) {
            return Err(Refused::Bad(format!(
                "line {line}: debounce_key {} is also line {first}'s: one a publish (send \
                 the last)",
                shown(&envelope.debounce.map(|d| d.key).unwrap_or_default())
            )));
        }
        batch.envelopes.push(envelope);
        batch.lines.push(line);
    }
    Ok(batch)
}

/// The envelope on line `line` (with the fields `features` read), refused when it is not one
/// or is over the znode limit.
fn item(line: usize, value: Value, features: &Features) -> Result<Envelope, Refused> {
    let envelope = (features.envelope_from_item(value, None))
        .map_err(|problem| Refused::Bad(format!("line {line}: {problem}")))?;
    let size = envelope.to_bytes().map(|b| b.len()).unwrap_or(usize::MAX);
    if size > MAX_BODY_BYTES {
        return Err(Refused::TooLarge(format!(
            "line {line}: the task is over ZooKeeper's {MAX_BODY_BYTES}-byte limit: keep large \
             data elsewhere and publish a reference to it"
        )));
    }
    Ok(envelope)
}

/// Every non-blank line, parsed; the first that is not JSON refuses the body.
fn lines(text: &str) -> Result<Vec<(usize, Value)>, Refused> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line)
                .map(|value| (i + 1, value))
                .map_err(|e| {
                    Refused::Bad(format!("line {}: not JSON: {e}; correct that line", i + 1))
                })
        })
        .collect()
}

/// `+` and `%XX` escapes of a query value, decoded (bytes that do not decode stay as they are).
fn percent_decode(raw: &str) -> String {
    event_bridge::layout::decode_segment(&raw.replace('+', " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_queries_say_what_is_asked() {
        assert_eq!(ask("POST", "", true), Ok(Ask::Publish));
        let signal = br#"{"signal": "order-7", "payload": {"ok": true}}"#;
        let want = ("order-7".to_string(), serde_json::json!({"ok": true}));
        assert_eq!(read_signal(signal), Some(Ok(want)));
        assert_eq!(
            read_signal(br#"{"type": "a", "signal": "x"}"#),
            None,
            "a task"
        );
        let bad = read_signal(br#"{"signal": 7}"#).unwrap().unwrap_err();
        assert!(bad.contains("must be the key"), "{bad}");
        let extra = read_signal(br#"{"signal": "k", "delay": 1}"#)
            .unwrap()
            .unwrap_err();
        assert!(extra.contains("remove \"delay\""), "{extra}");
        assert_eq!(ask("POST", "", false), Ok(Ask::Run(Trigger::Scheduled)));
        assert_eq!(
            ask("POST", "drain=1&max_tasks=5", true),
            Ok(Ask::Run(Trigger::Drain { max_tasks: Some(5) }))
        );
        let status = ask("GET", "status=task-0000000042", false);
        assert_eq!(status, Ok(Ask::Status("task-0000000042".into())));
        let escaped = ask("GET", "status=order%2F7", false);
        assert_eq!(escaped, Ok(Ask::Status("order/7".into())));
        assert_eq!(ask("GET", "", false), Ok(Ask::Run(Trigger::Scheduled)));
        assert_eq!(ask("GET", "status=", false).unwrap_err().status, 400);
        assert_eq!(
            ask("GET", "batch=import%2F7", false),
            Ok(Ask::Batch("import/7".into()))
        );
        assert_eq!(ask("GET", "batch=", false).unwrap_err().status, 400);
        assert_eq!(ask("GET", "max_tasks=0", false).unwrap_err().status, 400);
        for method in ["DELETE", "PUT", "HEAD", "OPTIONS"] {
            let refused = ask(method, "drain=1", false).unwrap_err();
            assert_eq!(refused.status, 405, "{method}");
            assert!(refused.body["message"].as_str().unwrap().contains(method));
            assert_eq!(refused.headers, [("allow", ALLOWED_METHODS.to_string())]);
        }
    }

    #[test]
    fn a_body_is_one_object_or_json_lines_and_any_bad_line_refuses_it() {
        let one = read_batch(
            br#"{"type": "a", "payload": {"n": 1}}"#,
            1000,
            &Features::default(),
        )
        .unwrap();
        assert_eq!((one.envelopes.len(), one.lines), (1, vec![1]));
        let many = b"{\"type\": \"a\", \"payload\": 1}\n\n{\"type\": \"b\", \"payload\": 2}\n";
        assert_eq!(
            read_batch(many, 1000, &Features::default()).unwrap().lines,
            [1, 3]
        );
        let bad = b"{\"type\": \"a\", \"payload\": 1}\nnot json\n";
        assert!(
            matches!(read_batch(bad, 1000, &Features::default()), Err(Refused::Bad(m)) if m.starts_with("line 2: not JSON"))
        );
        let untyped = br#"{"payload": 1}"#;
        assert!(
            matches!(read_batch(untyped, 1000, &Features::default()), Err(Refused::Bad(m)) if m.contains("type"))
        );
        assert!(matches!(
            read_batch(b"[1, 2]", 1000, &Features::default()),
            Err(Refused::Bad(_))
        ));
        assert!(matches!(
            read_batch(b"  ", 1000, &Features::default()),
            Err(Refused::Bad(_))
        ));
        assert!(matches!(
            read_batch(&[b'x'; 2000], 1000, &Features::default()),
            Err(Refused::TooLarge(_))
        ));
    }

    #[test]
    fn an_empty_or_repeated_id_refuses_the_body_naming_the_line() {
        let empty = b"{\"type\": \"a\", \"payload\": 1, \"id\": \"\"}";
        let refused = read_batch(empty, 1000, &Features::default());
        assert!(
            matches!(&refused, Err(Refused::Bad(m)) if m.starts_with("line 1: \"id\" is empty")),
            "{refused:?}"
        );
        let twice = b"{\"type\": \"a\", \"payload\": 1, \"id\": \"x\"}\n{\"type\": \"a\", \"payload\": 2, \"id\": \"x\"}";
        let refused = read_batch(twice, 1000, &Features::default());
        assert!(
            matches!(&refused, Err(Refused::Bad(m)) if m.starts_with("line 2: id \"x\" is also line 1's")),
            "{refused:?}"
        );
    }
}
