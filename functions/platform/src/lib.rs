//! What both functions share at the platform edge, so that each stays a few lines of wiring:
//!
//! - [`trigger`]: what an invocation asks for, read from a Lambda event or an HTTP query; the
//!   time it may take; the `CRON_SECRET` check. Pure functions.
//! - [`intake`]: what an HTTP request asks for (a run, a publish, a status), and a publish's
//!   body read into envelopes. Pure functions.
//! - [`metrics`]: CloudWatch Embedded Metric Format lines, one per invocation. Pure.
//! - [`reply`]: the labels errors are reported under, and JSON replies for HTTP.
//! - `fixes` (tests only): every error answer names its fix, the one list of them.
//! - [`cold_start`]: opening a function's state from the environment, logging why not.
//! - `lambda` (feature `lambda`): Lambda's error type, and Function URL replies.
//! - `vercel` (feature `vercel`): reading a Vercel request, and writing its response.
//!
//! A Lambda binary builds this crate with `lambda` only and a Vercel binary with `vercel` only
//! (`required-features` on each binary), so neither links the other platform's runtime.

pub mod intake;
pub mod metrics;
pub mod reply;
pub mod trigger;

#[cfg(test)]
mod fixes;

#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "vercel")]
pub mod vercel;

use std::future::Future;

use event_bridge::{Config, Error};

pub use reply::{HttpReply, error_type};

/// A function's cold start: reads the configuration from the environment and hands it to
/// `open`; logs a failure (naming the variable or the address) and returns it as text for
/// `main` to exit with.
pub async fn cold_start<T, F, Fut>(open: F) -> Result<T, Box<dyn std::error::Error + Send + Sync>>
where
    F: FnOnce(Config) -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    event_bridge::logs::init();
    let opened = match Config::from_env() {
        Ok(config) => open(config).await,
        Err(e) => Err(e.into()),
    };
    opened.map_err(|e| {
        tracing::error!(error_type = error_type(&e), error = %e, "cold start failed");
        // As text, so `main`'s exit message reads like the log line.
        format!("{}: {e}", error_type(&e)).into()
    })
}

/// Whether an HTTP request with this `Authorization` header may run: it must carry
/// `Bearer $CRON_SECRET`; with no `CRON_SECRET`, every request is refused unless
/// `ALLOW_UNAUTHENTICATED` is set. The refusal says which of the two it is.
pub fn admit(config: &Config, authorization: Option<&str>) -> Result<(), HttpReply> {
    admit_by(config.cron_secret.as_ref(), config, authorization).map_err(|set| match set {
        true => HttpReply::unauthorized(),
        false => HttpReply::no_secret(),
    })
}

/// Whether a publish or status request with this `Authorization` header may be answered: it
/// must carry `Bearer $PUBLISH_SECRET`; with no `PUBLISH_SECRET`, every such request is
/// refused unless `ALLOW_UNAUTHENTICATED` is set. (On Lambda the Function URL's IAM
/// authorization stands in for it.)
pub fn admit_publish(config: &Config, authorization: Option<&str>) -> Result<(), HttpReply> {
    admit_by(config.publish_secret.as_ref(), config, authorization).map_err(|set| {
        let message = match set {
            true => "send Authorization: Bearer <PUBLISH_SECRET>",
            false => {
                "PUBLISH_SECRET is not set, so publishing over HTTP is refused: set it, or \
                 ALLOW_UNAUTHENTICATED=1 for local use"
            }
        };
        HttpReply::error(401, "Unauthorized", message)
    })
}

/// Lets a request in when its `Authorization` carries `Bearer <secret>`, or when there is no
/// secret and `ALLOW_UNAUTHENTICATED` is set; a refusal says whether a secret is set.
fn admit_by(
    secret: Option<&event_bridge::Secret>,
    config: &Config,
    authorization: Option<&str>,
) -> Result<(), bool> {
    let secret = secret.map(event_bridge::Secret::expose);
    match trigger::authorized(authorization, secret, config.allow_unauthenticated) {
        true => Ok(()),
        false => Err(secret.is_some()),
    }
}

/// Runs one invocation's handler, then sends the spans it ended (see `event_bridge::traces`)
/// before the answer goes back: a function frozen after its answer sends nothing more.
pub async fn flushed<T>(invocation: impl std::future::Future<Output = T>) -> T {
    // Boxed: a handler's future is deep, and this one's layout would hold it whole.
    let answer = Box::pin(invocation).await;
    event_bridge::traces::flush();
    answer
}

/// Logs, at an HTTP function's cold start, who its endpoint answers: holders of the
/// `CRON_SECRET`, anyone (`ALLOW_UNAUTHENTICATED`), or no one (neither is set).
pub fn announce_access(config: &Config) {
    match (&config.cron_secret, config.allow_unauthenticated) {
        (Some(_), _) => tracing::info!(access = "secret", "requests need the CRON_SECRET bearer"),
        (None, true) => tracing::warn!(
            access = "open",
            "ALLOW_UNAUTHENTICATED is set and CRON_SECRET is not: anyone may call this endpoint"
        ),
        (None, false) => tracing::error!(
            access = "closed",
            "CRON_SECRET is not set: every request is refused (ALLOW_UNAUTHENTICATED=1 opens \
             the endpoint for local use)"
        ),
    }
}
