//! The HTTP webhook sink: POSTs each task's envelope to a URL.
//!
//! # What is sent
//!
//! One `POST` to the configured URL per attempt, with the task's [`Envelope`](crate::task::Envelope) as the JSON body,
//! exactly as [`serde_json::to_vec`] writes it (so it carries `attempts`, and `last_error` on a
//! retry: the body of two attempts may differ, their `Idempotency-Key` never does).
//!
//! | Header | Value |
//! |---|---|
//! | `Content-Type` | `application/json` |
//! | `Idempotency-Key` | the envelope's `idempotency_key`, or its `id` when it has none; the same on every attempt and after a redrive |
//! | `X-Event-Bridge-Task` | the task znode's name, such as `task-0000000042` |
//! | `X-Event-Bridge-Fencing-Token` | the claim's fencing token: grows with every claim of the task |
//! | `X-Event-Bridge-Attempt` | this claim's number, 1 on the first |
//! | `X-Event-Bridge-Group` | only for a grouped task: its group (tasks of a group arrive one at a time, in publish order) |
//! | `X-Event-Bridge-Timestamp` | when this attempt was sent: whole seconds since the Unix epoch, by the sender's clock |
//! | `X-Event-Bridge-Deadline` | when the webhook should have answered by: ms since the Unix epoch, by the sender's clock (the run's stop, or the attempt's timeout, whichever comes first); a long job saves a checkpoint and answers `202` before it |
//! | `X-Event-Bridge-Signature` | only with a secret: `sha256=` and the signature below, in lowercase hex |
//! | `webhook-id`, `webhook-timestamp`, `webhook-signature` | instead of `X-Event-Bridge-Signature`, with `"signature": "standard"`: Standard Webhooks (see [`super::signature`]) |
//!
//! A receiver that stores side effects keyed by `Idempotency-Key` and refuses a fencing token
//! lower than the highest it saw for that key is safe against both retries and a consumer
//! whose lease has passed on.
//!
//! # The signature
//!
//! ```text
//! signed    = timestamp + "." + body        (bytes: the header's decimal digits, a dot, the raw body)
//! signature = hex(HMAC-SHA256(key = secret as UTF-8 bytes, message = signed))
//! header    = "sha256=" + signature
//! ```
//!
//! To verify, in any language:
//!
//! 1. Read the raw request body as bytes, before any JSON parsing (re-serializing changes it).
//! 2. Take `X-Event-Bridge-Timestamp`; refuse the request when it is more than a few minutes
//!    away from your clock (5 minutes is usual): that refuses replays of an old request.
//! 3. Compute HMAC-SHA256 over `timestamp + "." + body` with the shared secret and compare its
//!    hex with the part of `X-Event-Bridge-Signature` after `sha256=`, in constant time.
//!
//! In Python:
//!
//! ```text
//! expected = hmac.new(secret.encode(), f"{ts}.".encode() + raw_body, hashlib.sha256).hexdigest()
//! ok = hmac.compare_digest("sha256=" + expected, signature_header) and abs(time.time() - int(ts)) < 300
//! ```
//!
//! The secret itself is never sent, logged, nor shown by `Debug`.
//!
//! # How a response is read
//!
//! 2xx delivers; 408, 429 and 5xx, and any request that got no response (a timeout, a refused
//! or reset connection), are worth another try, no sooner than a `Retry-After` says
//! ([`SinkError::RetryAfter`]); 3xx and every other status are permanent. Redirects are not
//! followed: a redirected POST may become a GET, and the signed request would go to a host
//! nobody configured; point the sink at the final URL. The status table is the test
//! `statuses_are_classified` below, beside `is_retryable`.
//!
//! # Resumable tasks: `202` with a checkpoint
//!
//! A webhook whose work outlasts one delivery answers `202` with a JSON object that has one of
//! `checkpoint`, `resume_in` or `wait_for` (see `resume_answer`):
//!
//! | Answer | The task |
//! |---|---|
//! | `{"checkpoint": …}` | released with the checkpoint, delivered again at once (in another run) |
//! | `{"checkpoint": …, "resume_in": "10s"}` | asleep for 10 s, holding no lease, then delivered again |
//! | `{"checkpoint": …, "wait_for": ["order-7"], "timeout": "1h"}` | waits for a signal on any one of the keys (or a signal kept for one), at most an hour, then is delivered again |
//!
//! No attempt is counted. The next delivery's envelope carries `resume`: `checkpoint` (the
//! last one answered) and `done`, the sleeps and waits so far, the last wait with its
//! `outcome`: `{"by": "signal", "key": …, "payload": …}` or `{"by": "timeout"}`. A `202`
//! with any other body delivers the task, as before; one that names a bad span, or keys no
//! signal can have, sends it to the dead letters with the problem.
//!
//! A `202`'s body is read whole, up to `CHECKPOINT_MAX_BYTES` (the cap of the task's record):
//! one over the cap (by its `Content-Length`, or as read) sends the task to the dead letters
//! naming the cap, and one whose reading failed is retried. Neither delivers: a cut body
//! would not read as the suspension it may be.
//!
//! The body of a 2xx answer is the task's result ([`TaskResult::from_answer`]): kept in the
//! completion record (`KEEP_DONE`) when it is JSON of at most 64 KiB, else as its size and
//! `Content-Type`. At most 64 KiB and one byte of it is read (of a `202`, all of it, as above);
//! the size of a longer one is its `Content-Length` (unknown without one).
//!
//! Error messages name the status and the URL without its credentials, query or fragment, and
//! quote at most 200 bytes of the response body: `HTTP 503 from https://host/path: busy`.
//! A whole attempt, connecting and reading the response included, is bounded by the spec's
//! timeout.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::answer::{BODY_EXCERPT_BYTES, cause, excerpt, is_retryable, read_up_to, retry_after};
use super::error::{InvalidSpec, SinkError};
use super::redact::shown;
use super::route::SignatureScheme;
pub use super::signature::signature;
use super::signature::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use crate::secret::Secret;
use crate::task::Task;
use crate::task_result::{MAX_RESULT_BYTES, TaskResult};
use crate::traces;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tracing::{Instrument, Span};

/// The names of the headers the sink sends, lowercase (HTTP ignores the case of names).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The task's name.
pub const TASK: &str = "x-event-bridge-task";
/// The claim's fencing token.
pub const FENCING_TOKEN: &str = "x-event-bridge-fencing-token";
/// Which attempt this is, from 1.
pub const ATTEMPT: &str = "x-event-bridge-attempt";
/// The task's ordered group, when it has one.
pub const GROUP: &str = "x-event-bridge-group";
/// W3C Trace Context, when the task carries one.
pub const TRACEPARENT: &str = "traceparent";
/// When this attempt was sent: whole seconds since the Unix epoch, by the sender's clock.
pub const TIMESTAMP: &str = "x-event-bridge-timestamp";
/// `sha256=<hex>` of the HMAC (scheme `hmac`).
pub const SIGNATURE: &str = "x-event-bridge-signature";
/// When the webhook should have answered by: ms since the Unix epoch, by the sender's clock.
pub const DEADLINE: &str = "x-event-bridge-deadline";

/// The most of a successful response's body read: the result's limit and one byte, which
/// tells a body over it.
const RESULT_READ_BYTES: usize = MAX_RESULT_BYTES + 1;

/// A webhook's successful answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The HTTP status (2xx).
    pub status: u16,
    /// Its body, as the completion record keeps it; none when it was empty.
    pub result: Option<TaskResult>,
}

/// Where and how to deliver.
#[derive(Clone, Debug)]
pub struct HttpSpec {
    /// An `http` or `https` URL; its query is sent, never quoted in errors.
    pub url: String,
    /// Signs every request when set (see the module docs), by `signature`.
    pub secret: Option<Secret>,
    /// How requests are signed, when there is a secret.
    pub signature: SignatureScheme,
    /// Bounds one attempt: connecting, sending and reading the response.
    pub timeout: Duration,
}

/// A webhook endpoint, with one HTTP client so that deliveries reuse connections.
pub struct HttpSink {
    client: reqwest::Client,
    url: Url,
    /// The URL as error messages show it: no credentials, query or fragment.
    shown: String,
    signer: Option<Signer>,
    timeout: Duration,
}

impl HttpSink {
    /// Validates the spec (URL must parse and be http/https; the error names the problem).
    pub fn new(spec: HttpSpec) -> Result<Self, InvalidSpec> {
        Self::build(spec).map_err(InvalidSpec)
    }

    fn build(spec: HttpSpec) -> Result<Self, String> {
        let url =
            Url::parse(spec.url.trim()).map_err(|e| format!("webhook URL does not parse: {e}"))?;
        let shown = shown(&url);
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "webhook URL {shown} must be http or https, not {}",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("webhook URL {shown} has no host"));
        }
        if spec.timeout.is_zero() {
            return Err(format!(
                "webhook timeout for {shown} must be more than zero"
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(spec.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("event-bridge/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build an HTTP client for {shown}: {e}"))?;
        let signer = match &spec.secret {
            Some(secret) => Some(Signer::new(spec.signature, secret)?),
            None if spec.signature == SignatureScheme::Standard => {
                return Err(format!("a standard signature for {shown} needs a secret"));
            }
            None => None,
        };
        Ok(HttpSink {
            client,
            url,
            shown,
            signer,
            timeout: spec.timeout,
        })
    }

    /// POSTs the task's envelope as JSON; the status and body of a successful answer. With
    /// traces exported, within a CLIENT span whose context the request's `traceparent` carries;
    /// dropped before its outcome (its attempt gave up on it), the span says `cancelled`.
    pub async fn deliver(&self, task: &Task) -> Result<HttpAnswer, SinkError> {
        let span = traces::request_span(&self.shown);
        let unanswered = traces::Unanswered::new(&span);
        let outcome = (self.deliver_within(task, &span))
            .instrument(span.clone())
            .await;
        unanswered.answered();
        outcome
    }

    /// [`HttpSink::deliver`] within `span`, which a failure marks failed (see
    /// [`traces::failed`]): with the status code of a request answered with a failure, the
    /// class of one that got no answer, `_OTHER` for one never sent.
    async fn deliver_within(&self, task: &Task, span: &Span) -> Result<HttpAnswer, SinkError> {
        let body = self.body(task).map_err(|e| failed(span, "_OTHER", e))?;
        let traceparent = traces::traceparent(span).or_else(|| task.envelope.traceparent.clone());
        let stamp = unix_seconds(SystemTime::now());
        let headers = (self.headers(task, stamp, &body, traceparent.as_deref()))
            .map_err(|e| failed(span, "_OTHER", e))?;
        let sent = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await;
        let response = sent.map_err(|e| failed(span, no_answer(&e), self.transport_error(e)))?;
        let status = response.status();
        span.record("http.response.status_code", i64::from(status.as_u16()));
        tracing::debug!(task = %task.name, url = %self.shown, status = status.as_u16(), "webhook answered");
        let result = self.read_answer(task, response, span).await?;
        Ok(HttpAnswer {
            status: status.as_u16(),
            result,
        })
    }

    /// The envelope as sent: a resumable task's with its record, a wait that ended without a
    /// signal marked timed out.
    fn body(&self, task: &Task) -> Result<Vec<u8>, SinkError> {
        let sent = match task.steps.delivered_record() {
            Some(record) => {
                let mut envelope = task.envelope.clone();
                envelope.resume = Some(record);
                serde_json::to_vec(&envelope)
            }
            None => serde_json::to_vec(&task.envelope),
        };
        sent.map_err(|e| SinkError::Permanent(format!("envelope is not serializable: {e}")))
    }

    /// When the webhook should have answered by: the handler's stop (the run's deadline
    /// near), or the attempt's timeout, whichever comes first.
    fn deadline_ms(&self, task: &Task) -> u64 {
        let left = task
            .steps
            .time_left()
            .map_or(self.timeout, |left| left.min(self.timeout));
        let at = SystemTime::now() + left;
        at.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    /// Every header of one attempt, the signature over `body` included.
    fn headers(
        &self,
        task: &Task,
        timestamp: u64,
        body: &[u8],
        traceparent: Option<&str>,
    ) -> Result<HeaderMap, SinkError> {
        let key = task
            .envelope
            .idempotency_key
            .as_deref()
            .unwrap_or(&task.envelope.id);
        let value = |what: &str, v: &str| {
            HeaderValue::from_str(v).map_err(|_| {
                SinkError::Permanent(format!("{what} {v:?} cannot be sent as an HTTP header"))
            })
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut put = |name: &'static str, v: HeaderValue| {
            headers.insert(HeaderName::from_static(name), v);
        };
        put(IDEMPOTENCY_KEY, value("idempotency key", key)?);
        put(TASK, value("task name", &task.name)?);
        put(FENCING_TOKEN, HeaderValue::from(task.fencing_token));
        put(ATTEMPT, HeaderValue::from(task.attempt()));
        if let Some(group) = &task.envelope.group {
            put(GROUP, value("group", group)?);
        }
        if let Some(traceparent) = traceparent {
            put(TRACEPARENT, value("traceparent", traceparent)?);
        }
        put(TIMESTAMP, HeaderValue::from(timestamp));
        put(DEADLINE, HeaderValue::from(self.deadline_ms(task)));
        if let Some(signer) = &self.signer {
            let id = &task.envelope.id;
            let mut signed = HeaderValue::from_str(&signer.sign(id, timestamp, body))
                .expect("hex and base64 are valid header values");
            signed.set_sensitive(true);
            match signer.scheme() {
                SignatureScheme::Hmac => put(SIGNATURE, signed),
                SignatureScheme::Standard => {
                    put(WEBHOOK_ID, value("envelope id", id)?);
                    put(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
                    put(WEBHOOK_SIGNATURE, signed);
                }
            }
        }
        Ok(headers)
    }

    /// Reads a response into the task's result: what a success answered, or the error.
    async fn read_answer(
        &self,
        task: &Task,
        response: reqwest::Response,
        span: &Span,
    ) -> Result<Option<TaskResult>, SinkError> {
        let status = response.status();
        if !status.is_success() {
            return Err(failed(span, status.as_str(), self.refusal(response).await));
        }
        let length = response.content_length();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let read = match status == reqwest::StatusCode::ACCEPTED {
            true => self.accepted(task, response, span).await?,
            false => read_up_to(response, RESULT_READ_BYTES).await.0,
        };
        Ok(TaskResult::from_answer(
            &read,
            length,
            content_type.as_deref(),
        ))
    }

    /// The body of a `202`, which may suspend the task (see [`super::resume_answer`]): read
    /// whole, up to the checkpoint cap (`CHECKPOINT_MAX_BYTES`). A body over the cap, or one
    /// whose reading failed, is never taken for a delivery: cut, it would not read as the
    /// suspension it may be.
    async fn accepted(
        &self,
        task: &Task,
        response: reqwest::Response,
        span: &Span,
    ) -> Result<Vec<u8>, SinkError> {
        let cap = checkpoint_cap(task);
        let over = |length: Option<u64>| {
            let size = length.map(|l| format!(" ({l} bytes)")).unwrap_or_default();
            let error = SinkError::Permanent(format!(
                "HTTP 202 from {}: its body{size} is over the {cap}-byte cap \
                 (CHECKPOINT_MAX_BYTES) a checkpoint may take: a 202 is never delivered unread",
                self.shown
            ));
            failed(span, "response_too_large", error)
        };
        let length = response.content_length();
        if length.is_some_and(|l| l > cap as u64) {
            return Err(over(length));
        }
        match read_up_to(response, cap + 1).await {
            (read, None) if read.len() > cap => Err(over(None)),
            (read, None) => {
                self.suspension(task, &read)?;
                Ok(read)
            }
            (_, Some(e)) => {
                let class = no_answer(&e);
                let error = SinkError::Retryable(format!(
                    "HTTP 202 from {}: its body could not be read: {}",
                    self.shown,
                    cause(&e.without_url())
                ));
                Err(failed(span, class, error))
            }
        }
    }

    /// The error of a response that is not a success: worth another try or not, by its
    /// status, no sooner than its `Retry-After`.
    async fn refusal(&self, response: reqwest::Response) -> SinkError {
        let status = response.status();
        let after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now()));
        let excerpt = excerpt(&read_up_to(response, BODY_EXCERPT_BYTES + 1).await.0);
        let mut error = format!("HTTP {} from {}", status.as_u16(), self.shown);
        if !excerpt.is_empty() {
            error = format!("{error}: {excerpt}");
        }
        match (is_retryable(status), after) {
            (true, Some(after)) => SinkError::RetryAfter { error, after },
            (true, None) => SinkError::Retryable(error),
            (false, _) => SinkError::Permanent(error),
        }
    }

    /// A `202` that suspends the task (see [`super::resume_answer`]): its record takes the
    /// checkpoint and when to resume, and the error says so. Any other `202` delivers.
    fn suspension(&self, task: &Task, body: &[u8]) -> Result<(), SinkError> {
        match super::resume_answer::suspension(body) {
            None => Ok(()),
            Some(Ok((checkpoint, then))) => Err(match task.steps.suspend_with(checkpoint, then) {
                crate::HandlerError::Permanent(e) => SinkError::Permanent(e),
                _ => SinkError::Suspended,
            }),
            Some(Err(problem)) => Err(SinkError::Permanent(format!(
                "HTTP 202 from {}: {problem}",
                self.shown
            ))),
        }
    }

    /// A request that got no response: worth another try, unless it could not even be built.
    fn transport_error(&self, e: reqwest::Error) -> SinkError {
        let url = &self.shown;
        let e = e.without_url();
        if e.is_builder() {
            return SinkError::Permanent(format!("cannot build a request to {url}: {}", cause(&e)));
        }
        SinkError::Retryable(if e.is_timeout() {
            format!("timed out after {:?} posting to {url}", self.timeout)
        } else if e.is_connect() {
            format!("cannot connect to {url}: {}", cause(&e))
        } else {
            format!("request to {url} failed: {}", cause(&e))
        })
    }
}

/// Shows the URL as messages do and whether requests are signed: no secret, no query.
impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSink")
            .field("url", &self.shown)
            .field("signed", &self.signer.as_ref().map(Signer::scheme))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `error`, with `span` marked failed as `error_type` says.
fn failed(span: &Span, error_type: &str, error: SinkError) -> SinkError {
    traces::failed(span, error_type, &error.to_string());
    error
}

/// The class of a request that got no (whole) answer, as a span's `error.type` says it.
fn no_answer(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect_error"
    } else {
        "_OTHER"
    }
}

/// The most a `202`'s body may be: the cap of the record of the run that holds the task
/// (`CHECKPOINT_MAX_BYTES`), or the setting's default for a task no run holds.
fn checkpoint_cap(task: &Task) -> usize {
    (task.steps.max_bytes()).unwrap_or_else(|| crate::Config::default().checkpoint_max_bytes)
}

/// Whole seconds since the Unix epoch.
fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
