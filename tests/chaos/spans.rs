//! Failed spans look failed: every consumer exports its spans to an OTLP receiver
//! (`harness::otlp`), and once they all stopped, the spans of the run are judged against the
//! OpenTelemetry conventions (status ERROR and an `error.type` on what failed) and against the
//! receiver's ledger:
//!
//! - a webhook request (CLIENT span) answered 4xx or 5xx has status ERROR and an `error.type`;
//! - a request the receiver answered 500 or 503: its attempt (the CONSUMER span with its
//!   envelope id and fencing token: the tasks of one claim batch share a token) and its
//!   request have status ERROR and an `error.type`;
//! - an attempt whose request failed (a CLIENT span with status ERROR: an error answer, or none
//!   within the route's timeout) failed too: status ERROR and an `error.type`;
//! - a request its attempt gave up on (the run's deadline, a lease lost or no longer vouched
//!   for: `error.type` `cancelled`) is failed, but says nothing of its attempt, which may have
//!   been released at its deadline; nor is that attempt judged by the receiver's ledger, whose
//!   answer its consumer never read;
//! - an attempt that dead-lettered its task (`dead_lettered`) says so likewise;
//! - a span with status ERROR names its `error.type`.
//!
//! By fields only: a span a SIGKILL lost is not judged (its process never exported it).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::receiver::{Answer, Delivery};

#[derive(Debug, Default)]
pub struct SpanFigures {
    /// Spans received: attempts (CONSUMER) and requests (CLIENT).
    pub attempts: usize,
    pub requests: usize,
    /// Attempts and requests judged failed, that had to carry error status.
    pub failed_attempts: usize,
    pub failed_requests: usize,
    /// Spans that break the conventions.
    pub violations: Vec<String>,
}

impl SpanFigures {
    /// Whether the run broke the guarantee, or never put it to the test (no failed attempt's
    /// spans arrived).
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || self.failed_attempts == 0 || self.failed_requests == 0
    }
}

fn kind(span: &Value) -> &str {
    span["kind"].as_str().unwrap_or("?")
}

/// Whether `span` says it failed as the conventions ask: status ERROR and an `error.type`.
fn says_failed(span: &Value) -> bool {
    span["status"]["code"] == "ERROR"
        && span["attributes"]["error.type"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
}

/// Whether `span` is a request its attempt gave up on before it had an answer.
fn cancelled(span: &Value) -> bool {
    span["attributes"]["error.type"] == "cancelled"
}

fn show(span: &Value) -> String {
    let a = &span["attributes"];
    format!(
        "{} span of {} (token {}, status {}, error.type {}, http status {})",
        kind(span),
        a["messaging.message.id"].as_str().unwrap_or("?"),
        a["event_bridge.fencing_token"],
        span["status"]["code"],
        a["error.type"],
        a["http.response.status_code"]
    )
}

pub fn judge(spans: &[Value], deliveries: &[Delivery]) -> SpanFigures {
    let mut f = SpanFigures::default();
    // By id and token: the tasks of one claim batch share its token.
    let refused_ids: HashSet<(&str, i64)> = (deliveries.iter())
        .filter(|d| matches!(d.answer, Answer::Error | Answer::Busy))
        .map(|d| (d.id.as_str(), d.token))
        .collect();
    let mut children: HashMap<&str, Vec<&Value>> = HashMap::new();
    for span in spans.iter().filter(|s| kind(s) == "CLIENT") {
        if let Some(parent) = span["parent_span_id"].as_str() {
            children.entry(parent).or_default().push(span);
        }
    }
    let mut wrong = |span: &Value, why: &str| f.violations.push(format!("{}: {why}", show(span)));
    let (mut attempts, mut requests, mut failed_attempts, mut failed_requests) = (0, 0, 0, 0);
    for span in spans {
        if span["status"]["code"] == "ERROR" && !says_failed(span) {
            wrong(span, "status ERROR without an error.type");
        }
        match kind(span) {
            "CLIENT" => {
                requests += 1;
                let status = span["attributes"]["http.response.status_code"].as_i64();
                if status.is_some_and(|s| s >= 400) {
                    failed_requests += 1;
                    if !says_failed(span) {
                        wrong(span, "a request answered with an error, not marked failed");
                    }
                }
            }
            "CONSUMER" => {
                attempts += 1;
                let a = &span["attributes"];
                let token = a["event_bridge.fencing_token"].as_i64();
                let id = a["messaging.message.id"].as_str().unwrap_or_default();
                let own = span["span_id"].as_str().unwrap_or_default();
                let requests = children.get(own).map_or(&[][..], Vec::as_slice);
                let gave_up = requests.iter().any(|r| cancelled(r));
                let ledger_says_refused = token.is_some_and(|t| refused_ids.contains(&(id, t)));
                let refused = !gave_up && ledger_says_refused;
                let request_failed =
                    (requests.iter()).any(|r| r["status"]["code"] == "ERROR" && !cancelled(r));
                let dead = span["attributes"]["error.type"] == "dead_lettered";
                if refused || request_failed || dead {
                    failed_attempts += 1;
                    if !says_failed(span) {
                        wrong(span, "an attempt whose request failed, not marked failed");
                    }
                }
                for request in requests.iter().filter(|_| ledger_says_refused) {
                    if !says_failed(request) {
                        wrong(request, "a request the receiver refused, not marked failed");
                    }
                }
            }
            _ => {}
        }
    }
    f.attempts = attempts;
    f.requests = requests;
    f.failed_attempts = failed_attempts;
    f.failed_requests = failed_requests;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attempt(id: &str, token: i64, failed: bool) -> Value {
        let mut span = json!({
            "kind": "CONSUMER", "span_id": id, "parent_span_id": null,
            "attributes": {"messaging.message.id": "m", "event_bridge.fencing_token": token},
            "status": {"code": "UNSET", "message": ""},
        });
        if failed {
            span["status"]["code"] = json!("ERROR");
            span["attributes"]["error.type"] = json!("retryable");
        }
        span
    }

    fn request(parent: &str, status: Option<i64>, error_type: Option<&str>) -> Value {
        let mut span = json!({
            "kind": "CLIENT", "span_id": format!("{parent}-c"), "parent_span_id": parent,
            "attributes": {}, "status": {"code": "UNSET", "message": ""},
        });
        if let Some(status) = status {
            span["attributes"]["http.response.status_code"] = json!(status);
        }
        if let Some(error_type) = error_type {
            span["status"]["code"] = json!("ERROR");
            span["attributes"]["error.type"] = json!(error_type);
        }
        span
    }

    fn delivery(token: i64, answer: Answer) -> Delivery {
        let now = tokio::time::Instant::now();
        Delivery {
            id: "m".into(),
            task: "t".into(),
            event_type: "chaos.plain".into(),
            group: None,
            seq: None,
            key: None,
            slot_ms: None,
            attempt: 1,
            token,
            arrived: now,
            arrived_ms: 0,
            answer,
            answered: now,
            resume: None,
        }
    }

    /// Spans as the conventions ask: a failed request and its attempt marked failed, a
    /// success unset.
    #[test]
    fn failed_attempts_and_requests_marked_failed_pass() {
        let spans = [
            attempt("a", 1, true),
            request("a", Some(500), Some("500")),
            attempt("b", 2, false),
            request("b", Some(200), None),
            attempt("c", 3, true),
            request("c", None, Some("timeout")),
        ];
        let ledger = [delivery(1, Answer::Error), delivery(2, Answer::Ok)];
        let f = judge(&spans, &ledger);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!((f.failed_attempts, f.failed_requests), (2, 1));
        assert!(!f.failed());
    }

    /// Each way a failed attempt's spans can break the conventions is found.
    #[test]
    fn a_failed_attempt_or_request_left_unset_is_a_violation() {
        let ledger = [delivery(1, Answer::Busy)];
        // The attempt of a request the receiver answered 503, left unset.
        let unset_attempt = [attempt("a", 1, false), request("a", Some(503), Some("503"))];
        assert_eq!(judge(&unset_attempt, &ledger).violations.len(), 1);
        // The request answered 503, left unset.
        let unset_request = [attempt("a", 1, true), request("a", Some(503), None)];
        assert_eq!(judge(&unset_request, &ledger).violations.len(), 2);
        // A request that timed out (ERROR) under an attempt left unset.
        let timed_out = [attempt("b", 9, false), request("b", None, Some("timeout"))];
        assert_eq!(judge(&timed_out, &[]).violations.len(), 1);
        // ERROR without an error.type.
        let mut bare = attempt("c", 7, true);
        bare["attributes"]["error.type"] = Value::Null;
        assert_eq!(judge(&[bare], &[]).violations.len(), 1);
    }

    /// The tasks of one claim batch share its fencing token: the refused one's attempt must
    /// fail, the others' not.
    #[test]
    fn a_claim_batchs_other_tasks_are_not_taken_for_the_refused_one() {
        let mut other = attempt("b", 1, false);
        other["attributes"]["messaging.message.id"] = json!("n");
        let spans = [
            attempt("a", 1, true),
            request("a", Some(500), Some("500")),
            other,
            request("b", Some(200), None),
        ];
        let f = judge(&spans, &[delivery(1, Answer::Error)]);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    /// A request its attempt gave up on (cancelled) must say it failed, but leaves its
    /// attempt, released at its deadline, unset, even when the receiver's ledger has answered
    /// it with an error the consumer never read; left unset, the request is a violation.
    #[test]
    fn a_cancelled_request_fails_without_failing_its_attempt() {
        let ledger = [delivery(1, Answer::Error)];
        let released = [
            attempt("a", 1, false),
            request("a", None, Some("cancelled")),
        ];
        let f = judge(&released, &ledger);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!((f.failed_attempts, f.requests), (0, 1));
        let unset = [attempt("a", 1, false), request("a", None, None)];
        assert_eq!(judge(&unset, &ledger).violations.len(), 2);
    }

    /// A run whose spans hold no failed attempt did not test the guarantee.
    #[test]
    fn spans_without_a_failure_judge_nothing() {
        let spans = [attempt("b", 2, false), request("b", Some(200), None)];
        assert!(judge(&spans, &[delivery(2, Answer::Ok)]).failed());
    }
}
