//! The HTTP sink's pure parts: its headers and signatures, how it reads `Retry-After` and classifies
//! statuses, a bad spec's problem, and what it never shows (credentials, secrets).

use super::*;
use crate::task::Envelope;
use reqwest::StatusCode;
use serde_json::json;

/// The headers of `task`'s attempt, its own `traceparent` passed on (no span exported).
fn headers_of(sink: &HttpSink, task: &Task, timestamp: u64, body: &[u8]) -> HeaderMap {
    let traceparent = task.envelope.traceparent.as_deref();
    sink.headers(task, timestamp, body, traceparent).unwrap()
}

fn sink(url: &str, secret: Option<&str>) -> Result<HttpSink, String> {
    HttpSink::new(HttpSpec {
        url: url.into(),
        secret: secret.map(Secret::new),
        signature: SignatureScheme::Hmac,
        timeout: Duration::from_secs(5),
    })
    .map_err(|e| e.0)
}

fn task(idempotency_key: Option<&str>) -> Task {
    let mut envelope = Envelope::new("user.signup", json!({"user_id": 42}));
    envelope.idempotency_key = idempotency_key.map(Into::into);
    envelope.attempts = 2;
    Task {
        name: "task-0000000042".into(),
        envelope,
        fencing_token: 7,
        progress: Default::default(),
        steps: Default::default(),
    }
}

#[test]
fn a_standard_signature_sends_the_three_webhook_headers_and_not_ours() {
    let sink = HttpSink::new(HttpSpec {
        url: "https://example.com/hook".into(),
        secret: Some(Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")),
        signature: SignatureScheme::Standard,
        timeout: Duration::from_secs(5),
    })
    .unwrap();
    let task = task(None);
    let headers = headers_of(&sink, &task, 1_700_000_000, b"{}");
    let get = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());
    assert_eq!(
        get("webhook-id").as_deref(),
        Some(task.envelope.id.as_str())
    );
    assert_eq!(get("webhook-timestamp").as_deref(), Some("1700000000"));
    assert!(get("webhook-signature").unwrap().starts_with("v1,"));
    assert!(get(SIGNATURE).is_none());
    let unsigned = HttpSink::new(HttpSpec {
        url: "https://example.com/hook".into(),
        secret: None,
        signature: SignatureScheme::Standard,
        timeout: Duration::from_secs(5),
    });
    assert!(unsigned.unwrap_err().0.contains("needs a secret"));
}

#[test]
fn the_signature_matches_an_independent_computation() {
    // python3 -c 'import hmac,hashlib; print(hmac.new(b"whsec_test",
    //   b"1700000000.{\"id\":\"evt-1\",\"payload\":{\"n\":1}}", hashlib.sha256).hexdigest())'
    let body = br#"{"id":"evt-1","payload":{"n":1}}"#;
    assert_eq!(
        signature(&Secret::new("whsec_test"), 1_700_000_000, body),
        "sha256=8d774e2f43f40134d3f5184b646cd46cb8b32db98aef36e5e9201559a5a4f53b"
    );
}

#[test]
fn every_header_is_set_and_the_signature_covers_timestamp_and_body() {
    let sink = sink("https://example.com/hook", Some("s3cret")).unwrap();
    let task = task(Some("order-7"));
    let body = serde_json::to_vec(&task.envelope).unwrap();
    let headers = headers_of(&sink, &task, 1_700_000_000, &body);
    let get = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_string();
    assert_eq!(get("content-type"), "application/json");
    assert_eq!(get("Idempotency-Key"), "order-7");
    assert_eq!(get("X-Event-Bridge-Task"), "task-0000000042");
    assert_eq!(get("X-Event-Bridge-Fencing-Token"), "7");
    assert_eq!(get("X-Event-Bridge-Attempt"), "2");
    assert_eq!(get("X-Event-Bridge-Timestamp"), "1700000000");
    let expected = signature(&Secret::new("s3cret"), 1_700_000_000, &body);
    assert_eq!(get("X-Event-Bridge-Signature"), expected);
    assert!(headers.get(SIGNATURE).unwrap().is_sensitive());
    assert!(headers.get(GROUP).is_none(), "no group, no header");
    let mut grouped = task.clone();
    grouped.envelope.group = Some("customer-9".into());
    let headers = headers_of(&sink, &grouped, 1_700_000_000, &body);
    assert_eq!(headers.get("X-Event-Bridge-Group").unwrap(), "customer-9");
    assert!(
        headers
            .values()
            .all(|v| !v.as_bytes().windows(6).any(|w| w == b"s3cret"))
    );
}

#[test]
fn the_idempotency_key_defaults_to_the_id_and_unsigned_sinks_send_no_signature() {
    let sink = sink("http://example.com/hook", None).unwrap();
    let task = task(None);
    let headers = headers_of(&sink, &task, 1, b"{}");
    assert_eq!(headers[IDEMPOTENCY_KEY], task.envelope.id.as_str());
    assert!(headers.get(SIGNATURE).is_none());
}

#[test]
fn an_idempotency_key_that_cannot_be_a_header_is_permanent() {
    let sink = sink("http://example.com/hook", None).unwrap();
    let bad = task(Some("a\nb"));
    let err = sink.headers(&bad, 1, b"{}", None).unwrap_err();
    assert!(
        matches!(&err, SinkError::Permanent(e) if e.contains("idempotency key")),
        "{err:?}"
    );
}

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    // Wed, 21 Oct 2015 07:28:00 GMT is 1445412480 (calendar.timegm in Python).
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480 - 90);
    let cases: [(&str, Option<u64>); 12] = [
        ("120", Some(120)),
        (" 2 ", Some(2)),
        ("0", Some(0)),
        ("Wed, 21 Oct 2015 07:28:00 GMT", Some(90)),
        ("Wednesday, 21-Oct-15 07:28:00 GMT", Some(90)),
        ("Wed Oct 21 07:28:00 2015", Some(90)),
        ("Tue, 20 Oct 2015 07:28:00 GMT", Some(0)),
        ("99999999999999999999999", None),
        ("-1", None),
        ("1.5", None),
        ("", None),
        ("soon", None),
    ];
    for (value, expected) in cases {
        assert_eq!(
            retry_after(value, now),
            expected.map(Duration::from_secs),
            "Retry-After: {value:?}"
        );
    }
}

#[test]
fn statuses_are_classified() {
    for (code, retryable) in [
        (408, true),
        (429, true),
        (500, true),
        (502, true),
        (503, true),
        (599, true),
        (301, false),
        (302, false),
        (400, false),
        (401, false),
        (404, false),
        (409, false),
        (422, false),
    ] {
        let status = StatusCode::from_u16(code).unwrap();
        assert_eq!(is_retryable(status), retryable, "{code}");
    }
}

#[test]
fn a_bad_spec_names_its_problem() {
    for (url, problem) in [
        ("not a url", "does not parse"),
        ("/hooks/a", "does not parse"),
        ("ftp://example.com/x", "must be http or https, not ftp"),
        ("mailto:ops@example.com", "must be http or https"),
        ("http://", "does not parse"),
    ] {
        let err = sink(url, None).unwrap_err();
        assert!(err.contains(problem), "{url}: {err}");
    }
    let err = HttpSink::new(HttpSpec {
        url: "https://example.com/".into(),
        secret: None,
        signature: SignatureScheme::Hmac,
        timeout: Duration::ZERO,
    })
    .unwrap_err()
    .0;
    assert!(err.contains("timeout"), "{err}");
    assert!(sink(" https://example.com/hook?x=1 ", None).is_ok());
}

#[test]
fn urls_in_messages_lose_credentials_query_and_fragment() {
    let url = Url::parse("https://user:pw@example.com:8443/p/a?token=abc#frag").unwrap();
    assert_eq!(shown(&url), "https://example.com:8443/p/a");
    let err = sink("ftp://user:pw@example.com/x?token=abc", None).unwrap_err();
    assert!(!err.contains("pw") && !err.contains("abc"), "{err}");
}

#[test]
fn secrets_never_show_in_debug_output() {
    let sink = sink("https://u:pw@example.com/hook?token=t0k", Some("hunter2")).unwrap();
    let debug = format!("{sink:?}");
    assert!(debug.contains("https://example.com/hook"), "{debug}");
    for secret in ["hunter2", "pw", "t0k"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
}

#[test]
fn excerpts_are_one_short_line() {
    assert_eq!(excerpt(b"  no such\n\tuser  "), "no such user");
    assert_eq!(excerpt(b""), "");
    let long = "é".repeat(150); // 300 bytes; byte 200 falls between two characters
    let cut = excerpt(long.as_bytes());
    assert_eq!(cut, format!("{}…", "é".repeat(100)));
    let odd = format!("x{}", "é".repeat(150)); // byte 200 falls inside a character
    assert_eq!(excerpt(odd.as_bytes()), format!("x{}…", "é".repeat(99)));
}
