//! `process_events` on AWS Lambda: connect at cold start, then one run per invocation.

use std::sync::Arc;

use lambda_runtime::service_fn;
use process_events::{App, lambda};

// One thread: a run waits on ZooKeeper and its sinks, not on the CPU (the multi-thread runtime
// cost a thread per core at every cold start). On Lambda Managed Instances
// `AWS_LAMBDA_MAX_CONCURRENCY` asks for that many invocations at once: `run_concurrent` polls
// with that many tasks on this thread, all sharing the one `App` (one ZooKeeper session, one
// claim pipeline). Unset or 1, it takes one invocation at a time, as `run` does.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let app = Arc::new(platform::cold_start(|config| App::open(config, "lambda")).await?);
    lambda_runtime::run_concurrent(service_fn(move |event| {
        let app = Arc::clone(&app);
        async move { platform::flushed(lambda::handle(&app, event)).await }
    }))
    .await
}
