//! The request that starts a drain: a POST to process_events' authenticated HTTP trigger.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::secret::Secret;

/// process_events' HTTP trigger, as a publisher calls it.
#[derive(Debug)]
pub struct Trigger {
    /// `EVENT_BRIDGE_KICK_URL`.
    url: String,
    /// `CRON_SECRET`, sent as `Authorization: Bearer …`.
    secret: Option<Secret>,
    /// `KICK_WAIT_MS`: how long the publisher waits for the answer. The answer comes when the
    /// drain ends; past this the publisher goes on, and the request goes on without it.
    wait: Duration,
    /// `KICK_STALE_MS` (`KICK_WAIT_MS` when longer): how long the request goes on, connecting,
    /// sending, then waiting for the answer. Past it the kick is taken as lost anyway: the
    /// next publisher takes the kick node over and kicks again.
    lasts: Duration,
    #[cfg(feature = "http")]
    client: reqwest::Client,
}

impl Trigger {
    /// A trigger at `url`; a publisher waits `wait` for its answer, the request goes on for
    /// `stale_after` (or `wait`, when longer).
    pub fn new(url: &str, secret: Option<Secret>, wait: Duration, stale_after: Duration) -> Self {
        Trigger {
            url: url.to_string(),
            secret,
            wait,
            lasts: stale_after.max(wait),
            #[cfg(feature = "http")]
            client: reqwest::Client::new(),
        }
    }

    /// POSTs the trigger. An answer within `KICK_WAIT_MS` must be a success; no answer by then
    /// means the drain is running, or the request is still on its way: it is not given up
    /// with the wait (a connect slower than `KICK_WAIT_MS` would lose the kick, the node
    /// standing with no drain to clear it), but goes on in a task of its own, which logs a
    /// failure the publisher no longer waits for.
    ///
    /// # Notable errors
    /// - [`Error::Kick`] when the request could not be sent, or was answered with a failure,
    ///   within `KICK_WAIT_MS`.
    #[cfg(feature = "http")]
    pub async fn send(&self) -> Result<()> {
        let mut request = self.client.post(&self.url).timeout(self.lasts);
        if let Some(secret) = &self.secret {
            request = request.bearer_auth(secret.expose());
        }
        let url = self.url.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let outcome = outcome(&url, request.send().await);
            // The publisher has stopped waiting: the outcome is told here.
            match answer.send(outcome) {
                Ok(()) | Err(Ok(())) => {}
                Err(Err(error)) => tracing::warn!(
                    %error,
                    "kick failed after the publish returned; the kick node stands until stale"
                ),
            }
        });
        match tokio::time::timeout(self.wait, answered).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(failed(
                &self.url,
                "the request ended without an outcome".into(),
            )),
            Err(_) => {
                tracing::debug!(url = %self.url, "kick sent or on its way; not waiting for its drain");
                Ok(())
            }
        }
    }

    /// Without the `http` feature nothing can be sent.
    ///
    /// # Notable errors
    /// - [`Error::Kick`] always.
    #[cfg(not(feature = "http"))]
    pub async fn send(&self) -> Result<()> {
        let _ = (&self.secret, self.wait, self.lasts);
        Err(failed(
            &self.url,
            "event-bridge was built without its `http` feature".into(),
        ))
    }
}

/// What came of the request to `url`.
#[cfg(feature = "http")]
fn outcome(url: &str, sent: reqwest::Result<reqwest::Response>) -> Result<()> {
    match sent {
        Ok(answer) if answer.status().is_success() => Ok(()),
        Ok(answer) => Err(failed(url, format!("answered {}", answer.status()))),
        // Sent long ago, and the drain it started is still running.
        Err(e) if e.is_timeout() && !e.is_connect() => {
            tracing::debug!(url, "kick sent; its drain is still running");
            Ok(())
        }
        Err(e) => Err(failed(url, format!("{e:#}"))),
    }
}

fn failed(url: &str, problem: String) -> Error {
    Error::Kick {
        target: url.to_string(),
        problem,
    }
}
