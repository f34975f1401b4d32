//! `process_events` on AWS Lambda: connect at cold start, then one run per invocation.

use lambda_runtime::service_fn;
use process_events::{lambda, platform};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    event_bridge::telemetry::init();
    let session = platform::cold_start("lambda").await?;
    lambda_runtime::run(service_fn(|event| lambda::handle(&session, event))).await
}
