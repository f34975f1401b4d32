//! `process_events` on Vercel, served at `/api/process_events_vercel`. Vercel's Rust builder
//! builds the binary named after this file; the handler is `process_events::vercel`.

use std::sync::Arc;

use process_events::{App, vercel};
use vercel_runtime::service_fn;

// One thread: concurrent requests all wait on ZooKeeper and the sinks, not on the CPU.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), vercel_runtime::Error> {
    let app = Arc::new(platform::cold_start(|config| App::open(config, "vercel")).await?);
    platform::announce_access(app.session.config());
    vercel_runtime::run(service_fn(move |req| {
        platform::flushed(vercel::handle(app.clone(), req))
    }))
    .await
}
