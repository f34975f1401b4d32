//! `reap_leases` on Vercel, served at `/api/reap_leases_vercel`. Vercel's Rust builder builds
//! the binary named after this file; the handler is `reap_leases::vercel`.

use std::sync::Arc;

use reap_leases::vercel;
use vercel_runtime::service_fn;

// One thread: concurrent requests all wait on ZooKeeper, not on the CPU.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), vercel_runtime::Error> {
    let session =
        Arc::new(platform::cold_start(|config| reap_leases::open(config, "vercel")).await?);
    platform::announce_access(session.config());
    vercel_runtime::run(service_fn(move |req| {
        platform::flushed(vercel::handle(session.clone(), req))
    }))
    .await
}
