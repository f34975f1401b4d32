//! Logging: JSON lines through tracing-subscriber, levels by Lambda's conventions.

use tracing_subscriber::EnvFilter;

/// Installs a JSON subscriber writing to stderr. The level comes from `AWS_LAMBDA_LOG_LEVEL`,
/// then `RUST_LOG`, then INFO. On Lambda (where CloudWatch stamps each line) no timestamp is
/// added. Calling it twice is harmless.
pub fn init() {
    let filter = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .map(|level| EnvFilter::new(with_quiet_client(&level.to_lowercase())))
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(with_quiet_client("info")));
    let builder = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        builder.without_time().try_init()
    } else {
        builder.try_init()
    };
}

/// Logging for the command-line tool: JSON lines on stderr at WARN unless `RUST_LOG` says
/// otherwise, so stdout stays clean for scripts.
pub fn init_cli() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));

    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The ZooKeeper client logs every session event at INFO; keep it to warnings unless asked.
fn with_quiet_client(level: &str) -> String {
    format!("{level},zookeeper_client=warn")
}
