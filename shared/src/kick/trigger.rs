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
    /// `KICK_WAIT_MS`: how long to wait for the answer. The answer comes when the drain ends;
    /// past this the request was sent, and the drain goes on without the publisher.
    wait: Duration,
    #[cfg(feature = "http")]
    client: reqwest::Client,
}

impl Trigger {
    /// A trigger at `url`.
    pub fn new(url: &str, secret: Option<Secret>, wait: Duration) -> Self {
        Trigger {
            url: url.to_string(),
            secret,
            wait,
            #[cfg(feature = "http")]
            client: reqwest::Client::new(),
        }
    }

    /// POSTs the trigger. An answer within `KICK_WAIT_MS` must be a success; no answer by then
    /// means the drain is running.
    ///
    /// # Notable errors
    /// - [`Error::Kick`] when the request could not be sent, or was answered with a failure.
    #[cfg(feature = "http")]
    pub async fn send(&self) -> Result<()> {
        let mut request = self.client.post(&self.url).timeout(self.wait);
        if let Some(secret) = &self.secret {
            request = request.bearer_auth(secret.expose());
        }
        match request.send().await {
            Ok(answer) if answer.status().is_success() => Ok(()),
            Ok(answer) => Err(self.failed(format!("answered {}", answer.status()))),
            // Sent, and the drain it started is still running.
            Err(e) if e.is_timeout() && !e.is_connect() => {
                tracing::debug!(url = %self.url, "kick sent; not waiting for its drain");
                Ok(())
            }
            Err(e) => Err(self.failed(format!("{e:#}"))),
        }
    }

    /// Without the `http` feature nothing can be sent.
    ///
    /// # Notable errors
    /// - [`Error::Kick`] always.
    #[cfg(not(feature = "http"))]
    pub async fn send(&self) -> Result<()> {
        let _ = (&self.secret, self.wait);
        Err(self.failed("event-bridge was built without its `http` feature".into()))
    }

    fn failed(&self, problem: String) -> Error {
        Error::Kick {
            target: self.url.clone(),
            problem,
        }
    }
}
