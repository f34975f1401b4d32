//! Traces: OpenTelemetry spans of a task's life, by the messaging conventions.
//!
//! - A PRODUCER span per publish call (`publish <root>`); each envelope published without a
//!   `traceparent` carries this span's.
//! - A CONSUMER span per attempt (`process <root>`): the first attempt a child of the
//!   envelope's `traceparent` (the publish, or whoever set it), each later attempt the root of
//!   a trace of its own with a link to it. Attributes: `messaging.system`,
//!   `messaging.destination.name`, `messaging.message.id`, `messaging.operation.type`,
//!   `event_bridge.attempt`, `event_bridge.fencing_token`, `event_bridge.task`.
//! - A CLIENT span per webhook request (`POST`), whose context is the request's `traceparent`.
//!
//! A failed attempt or request has status ERROR, a description (the error, short) and
//! `error.type` ([`failed`]): for a request answered 4xx or 5xx (or 3xx, which the sink does not
//! follow) the status code; for one with no answer `timeout`, `connect_error` or `_OTHER`; for
//! a `202` whose body could not be taken `response_too_large`; for an attempt, how its handler
//! classed the error (`retryable`, `permanent`), `lease_lost`, `abandoned`, or `dead_lettered`
//! (run out of interruptions). A success, a suspension and a release at the deadline leave
//! the status unset.
//!
//! Built with feature `otel`, and switched on by the standard environment:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) names the OTLP/HTTP
//! receiver, `OTEL_SERVICE_NAME` the service; the exporter reads the rest of the `OTEL_*`
//! variables itself (headers, timeout, batch sizes, sampler). Otherwise every span here is
//! [`Span::none`], which costs nothing, and a webhook request carries the envelope's
//! `traceparent` as it did. Spans are exported in batches by the SDK's own thread; a function
//! calls [`flush`] before its invocation returns, since a frozen function sends nothing.

use std::borrow::Cow;

use tracing::Span;

use crate::task::{Envelope, Task};

/// The PRODUCER span of one publish call of `count` envelopes under `root`, a child of the
/// `traceparent` the first of them carries, if any.
pub fn publish_span(root: &str, envelopes: &[Envelope]) -> Span {
    if !active() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "publish",
        otel.name = %format!("publish {root}"),
        otel.kind = "producer",
        messaging.system = "zookeeper",
        messaging.destination.name = %root,
        messaging.operation.type = "send",
        messaging.batch.message_count = envelopes.len() as i64,
    );
    if let Some(parent) = envelopes.first().and_then(|e| e.traceparent.as_deref()) {
        otel::set_parent(&span, parent);
    }
    span
}

/// `envelopes`, each without a `traceparent` given that of `span` (unchanged when `span`
/// exports nothing).
pub fn stamped<'a>(envelopes: &'a [Envelope], span: &Span) -> Cow<'a, [Envelope]> {
    let Some(traceparent) = traceparent(span) else {
        return Cow::Borrowed(envelopes);
    };
    if envelopes.iter().all(|e| e.traceparent.is_some()) {
        return Cow::Borrowed(envelopes);
    }
    let mut owned = envelopes.to_vec();
    for envelope in owned.iter_mut().filter(|e| e.traceparent.is_none()) {
        envelope.traceparent = Some(traceparent.clone());
    }
    Cow::Owned(owned)
}

/// The CONSUMER span of one attempt at `task` (claimed under `root`).
pub fn attempt_span(root: &str, task: &Task) -> Span {
    if !active() {
        return Span::none();
    }
    let attempt = task.attempt();
    let span = tracing::info_span!(
        parent: None,
        "process",
        otel.name = %format!("process {root}"),
        otel.kind = "consumer",
        messaging.system = "zookeeper",
        messaging.destination.name = %root,
        messaging.message.id = %task.envelope.id,
        messaging.operation.type = "process",
        event_bridge.task = %task.name,
        event_bridge.attempt = i64::from(attempt),
        event_bridge.fencing_token = task.fencing_token,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    if let Some(publish) = task.envelope.traceparent.as_deref() {
        match attempt {
            0 | 1 => otel::set_parent(&span, publish),
            _ => otel::add_link(&span, publish),
        }
    }
    span
}

/// The CLIENT span of one webhook request to `url` (shown without its secrets), with an
/// `http.response.status_code` to record.
pub fn request_span(url: &str) -> Span {
    if !active() {
        return Span::none();
    }
    tracing::info_span!(
        "POST",
        otel.kind = "client",
        http.request.method = "POST",
        url.full = %url,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}

/// Marks a request's span failed as `cancelled` when dropped before [`Unanswered::answered`]:
/// a request whose attempt gave up on it (the run's deadline, a lease lost or no longer
/// vouched for) ends without an answer, and its span says so rather than ending unset.
pub struct Unanswered<'a> {
    span: &'a Span,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    /// Watches `span` until its request has an outcome.
    pub fn new(span: &'a Span) -> Self {
        Unanswered {
            span,
            answered: false,
        }
    }

    /// The request has its outcome (an answer, or a failure its span already says).
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            failed(
                self.span,
                "cancelled",
                "the attempt ended before the request had an answer",
            );
        }
    }
}

/// The most of an error a span's status description keeps.
const DESCRIPTION_BYTES: usize = 200;

/// Marks `span` (an attempt's or a request's) failed, as the conventions ask: status ERROR with
/// `description` (on one line, at most about 200 bytes) and `error.type`, a low-cardinality
/// class: an HTTP status code (`"503"`), `timeout`, `retryable`, `_OTHER`. Nothing when `span`
/// exports nothing.
pub fn failed(span: &Span, error_type: &str, description: &str) {
    if span.is_none() {
        return;
    }
    span.record("error.type", error_type);
    span.record("otel.status_code", "ERROR");
    let description = crate::quoted::one_line(description, DESCRIPTION_BYTES);
    span.record("otel.status_description", description.as_str());
}

/// The W3C `traceparent` of `span`, when it is exported.
pub fn traceparent(span: &Span) -> Option<String> {
    otel::traceparent(span)
}

/// Whether spans are exported (feature `otel`, an endpoint set, the layer installed).
pub fn active() -> bool {
    otel::active()
}

/// Sends the spans ended so far, waiting for the receiver's answer (at most the exporter's
/// timeout); nothing without an exporter. Called before a function's invocation returns and
/// before a command exits.
pub fn flush() {
    otel::flush();
}

#[cfg(feature = "otel")]
pub(crate) use otel::layer;

#[cfg(feature = "otel")]
mod otel {
    use std::collections::HashMap;
    use std::sync::OnceLock;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// The provider, once [`layer`] installed one.
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

    /// The variables that switch export on.
    const ENDPOINTS: [&str; 2] = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ];

    /// The layer that exports this module's spans, when an endpoint is set; `None` (and a
    /// line on stderr) when the exporter cannot be built from the environment.
    pub(crate) fn layer<S>() -> Option<impl tracing_subscriber::Layer<S>>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        use tracing_subscriber::Layer as _;
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        if !ENDPOINTS.iter().any(|name| set(name)) {
            return None;
        }
        let exporter = match opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => exporter,
            Err(e) => {
                eprintln!("event-bridge: OpenTelemetry export is off: {e}");
                return None;
            }
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("event-bridge");
        PROVIDER.set(provider).ok()?;
        let only_ours = tracing_subscriber::filter::Targets::new().with_target(
            module_path!().trim_end_matches("::otel"),
            tracing::Level::INFO,
        );
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                .with_filter(only_ours),
        )
    }

    pub(super) fn active() -> bool {
        PROVIDER.get().is_some()
    }

    pub(super) fn flush() {
        if let Some(provider) = PROVIDER.get()
            && let Err(e) = provider.force_flush()
        {
            eprintln!("event-bridge: spans not sent: {e}");
        }
    }

    /// The context `traceparent` stands for.
    fn extract(traceparent: &str) -> opentelemetry::Context {
        let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
        TraceContextPropagator::new().extract(&carrier)
    }

    pub(super) fn set_parent(span: &Span, traceparent: &str) {
        // No layer (a span another subscriber made): nothing to parent.
        let _ = span.set_parent(extract(traceparent));
    }

    pub(super) fn add_link(span: &Span, traceparent: &str) {
        let context = extract(traceparent);
        span.add_link(context.span().span_context().clone());
    }

    pub(super) fn traceparent(span: &Span) -> Option<String> {
        if !active() || span.is_none() {
            return None;
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
        carrier.remove("traceparent")
    }
}

#[cfg(not(feature = "otel"))]
mod otel {
    use tracing::Span;

    pub(super) fn active() -> bool {
        false
    }

    pub(super) fn flush() {}

    pub(super) fn set_parent(_: &Span, _: &str) {}

    pub(super) fn add_link(_: &Span, _: &str) {}

    pub(super) fn traceparent(_: &Span) -> Option<String> {
        None
    }
}
