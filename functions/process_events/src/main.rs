//! `process_events` on AWS Lambda: connect at cold start, then one run per invocation.

use lambda_runtime::service_fn;
use process_events::{App, lambda};

// One thread: an instance runs one invocation at a time, and a run waits on ZooKeeper and
// its sinks, not on the CPU (the multi-thread runtime cost a thread per core at every cold start).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let app = platform::cold_start(|config| App::open(config, "lambda")).await?;
    lambda_runtime::run(service_fn(|event| {
        platform::flushed(lambda::handle(&app, event))
    }))
    .await
}
