//! `reap_leases`: frees leases whose holder is gone, so their tasks run again, and reports the
//! queue's state. The work is [`event_bridge::reap::reap`]; this crate wraps it for AWS Lambda
//! and for Vercel, sharing `process_events`' [`platform`] (session, error labels, replies).
//!
//! # Layout
//!
//! - [`run`]: one reaper run; the report is the reply.
//! - [`lambda`]: the Lambda handler (any event, e.g. the EventBridge schedule). The binary is
//!   `src/main.rs`.
//! - [`vercel`]: the Vercel handler (cron with `CRON_SECRET`). The binary is
//!   `api/reap_leases_vercel.rs`, where Vercel's builder looks for it.

pub mod lambda;
pub mod vercel;

use event_bridge::{Error, ReapReport, reap};
pub use process_events::platform;

use crate::platform::Session;

/// Frees expired and orphaned leases. A session found over is replaced ([`Session::run`]).
pub async fn run(session: &Session) -> Result<ReapReport, Error> {
    session
        .run(|queue| async move { reap::reap(&queue).await })
        .await
}
