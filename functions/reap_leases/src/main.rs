//! `reap_leases` on AWS Lambda: connect at cold start, then one reaper run per invocation.

use lambda_runtime::service_fn;
use reap_leases::lambda;

// One thread: an instance runs one invocation at a time, waiting on ZooKeeper.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let session = platform::cold_start(|config| reap_leases::open(config, "lambda")).await?;
    lambda_runtime::run(service_fn(|event| {
        platform::flushed(lambda::handle(&session, event))
    }))
    .await
}
