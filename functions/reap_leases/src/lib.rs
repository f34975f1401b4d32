//! `reap_leases`: frees leases whose holder is gone, so their tasks run again, and reports the
//! queue's state. The work is [`event_bridge::reap::reap`]; this crate wraps it for AWS Lambda
//! and for Vercel with the shared [`platform`] glue. It builds no sinks: a route table that
//! `process_events` would refuse (an unset `secret_env`, say) does not stop the reaper.
//!
//! # Layout
//!
//! - [`open`] and [`run`]: the session at cold start, and one reaper run; the report is the
//!   reply.
//! - `lambda` (feature `lambda`): the Lambda handler (any event, e.g. the EventBridge
//!   schedule). The binary is `src/main.rs`.
//! - `vercel` (feature `vercel`): the Vercel handler (cron with `CRON_SECRET`). The binary is
//!   `api/reap_leases_vercel.rs`, where Vercel's builder looks for it.

#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "vercel")]
pub mod vercel;

use event_bridge::{Config, Error, ReapReport, Session, reap};

/// The reaper's session: connects (failing fast, naming the address) and creates the base
/// paths. `platform` starts the consumer id.
pub async fn open(config: Config, platform: &str) -> Result<Session, Error> {
    Session::open(config, platform, None).await
}

/// Frees expired and orphaned leases. A session found over is replaced ([`Session::run`]).
pub async fn run(session: &Session) -> Result<ReapReport, Error> {
    session
        .run(|queue| async move { reap::reap(&queue).await })
        .await
}
