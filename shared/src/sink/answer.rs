//! Reading a webhook's answer: which statuses may succeed later, `Retry-After`, an excerpt of
//! the body for the task's last error, the innermost cause of a transport error.

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;

/// The most of a response body an error message quotes.
pub(super) const BODY_EXCERPT_BYTES: usize = 200;

/// 408 Request Timeout, 429 Too Many Requests and 5xx may succeed later; no other status will.
pub(super) fn is_retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// How long a `Retry-After` value asks to wait, from `now`: delta-seconds or an HTTP-date (a
/// date in the past means now). `None` for anything else.
pub(super) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The start of a response body, at most `limit` bytes of it (a chunk may take it a little
/// past); a failed read ends it early, and is returned beside what was read.
pub(super) async fn read_up_to(
    mut response: reqwest::Response,
    limit: usize,
) -> (Vec<u8>, Option<reqwest::Error>) {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return (bytes, Some(e)),
        }
    }
    (bytes, None)
}

/// At most `BODY_EXCERPT_BYTES` of a body as one line of text, `…` when cut.
pub(super) fn excerpt(body: &[u8]) -> String {
    let cut = &body[..body.len().min(BODY_EXCERPT_BYTES)];
    let text = match std::str::from_utf8(cut) {
        Ok(text) => text.into(),
        // Cut in the middle of a character: drop its first bytes.
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&cut[..e.valid_up_to()]),
        Err(_) => String::from_utf8_lossy(cut),
    };
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if body.len() > BODY_EXCERPT_BYTES {
        format!("{line}…")
    } else {
        line
    }
}

/// The innermost error of a chain: "Connection refused (os error 111)" rather than "error
/// sending request".
pub(super) fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}
