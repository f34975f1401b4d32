//! Logging: JSON lines through tracing-subscriber, levels by Lambda's conventions.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Installs a JSON subscriber writing to stderr. The level comes from `AWS_LAMBDA_LOG_LEVEL`,
/// then `RUST_LOG`, then INFO. On Lambda (where CloudWatch stamps each line) no timestamp is
/// added. With feature `otel` and an OTLP endpoint in the environment, it also exports the
/// spans of `traces` (whatever the log level). Calling it twice is harmless.
pub fn init() {
    let filter = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .map(|level| EnvFilter::new(with_quiet_client(&level.to_lowercase())))
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(with_quiet_client("info")));
    let lines = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(std::io::stderr);
    let lines = match std::env::var_os("AWS_LAMBDA_FUNCTION_NAME") {
        Some(_) => lines.without_time().with_filter(filter).boxed(),
        None => lines.with_filter(filter).boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(spans())
        .try_init();
}

/// Logging for the command-line tool: JSON lines on stderr at WARN unless `RUST_LOG` says
/// otherwise, so stdout stays clean for scripts; spans exported as [`init`] does.
pub fn init_cli() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let lines = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(spans())
        .try_init();
}

/// The layer exporting spans (see `traces`), when built and switched on.
#[cfg(feature = "otel")]
fn spans<S>() -> Option<impl Layer<S>>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    crate::traces::layer()
}

#[cfg(not(feature = "otel"))]
fn spans() -> Option<tracing_subscriber::layer::Identity> {
    None
}

/// The ZooKeeper client logs every session event at INFO; keep it to warnings unless asked.
fn with_quiet_client(level: &str) -> String {
    format!("{level},zookeeper_client=warn")
}
