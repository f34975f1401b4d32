//! A holder's writes (settling, extending) and their one retry loop, [`Run::send`], driven by
//! the one retry policy: on the same session after a dropped link, on a new one after an
//! expiry (when the run has a session to renew); fencing makes every repeat safe.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Run;
use crate::error::Result;
use crate::queue::Queue;
use crate::queue::{Recovery, recovery};

/// How long to wait before sending a settling write again after a dropped link.
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// What a holder's write came to.
pub(super) enum Sent<T> {
    /// Its result, and whether it took more than one try.
    Answered(T, bool),
    /// No answer before its deadline.
    Unsettled,
}

impl<H> Run<'_, H> {
    /// Sends a settling write until the run's settling deadline; see [`Run::send`].
    pub(super) async fn settle<T, F, Fut>(&self, write: F) -> Result<Sent<T>>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.send(self.settle_by, RESEND_PAUSE, write).await
    }

    /// The one retry loop of a holder's writes (settling, extending): sends `write` on the
    /// run's queue until it is answered or `by` comes. After a failure the retry policy
    /// ([`recovery`]) decides: a dropped link sends it again after `pause`; an ended session
    /// sends it on a new one (when the run has a session to renew; a new session that cannot
    /// be had yet is tried again after `pause`); anything else is the write's error. Fencing
    /// makes every repeat safe.
    ///
    /// # Notable errors
    /// - the write's error when the retry policy gives up on it (not a link or session fault),
    ///   or when the session is over and the run has none to renew.
    pub(super) async fn send<T, F, Fut>(
        &self,
        by: Instant,
        pause: Duration,
        write: F,
    ) -> Result<Sent<T>>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut queue = self.queue();
        let mut resent = false;
        loop {
            let error = match tokio::time::timeout_at(by, write(queue.clone())).await {
                Err(_) => return Ok(Sent::Unsettled),
                Ok(Ok(answer)) => return Ok(Sent::Answered(answer, resent)),
                Ok(Err(error)) => error,
            };
            resent = true;
            match recovery(&error, queue.session_over()) {
                Recovery::GiveUp => return Err(error),
                Recovery::SameSession => {
                    tracing::warn!(%error, "a holder's write failed on a dropped link; trying again");
                }
                Recovery::NewSession => {
                    tracing::warn!(%error, "a holder's write failed: the session is over; trying on a new one");
                    let renewed = self.source.renew(&queue, error);
                    match tokio::time::timeout_at(by, renewed).await {
                        Ok(Ok(fresh)) => {
                            queue = fresh;
                            continue;
                        }
                        Ok(Err(e)) if self.source.renews() => {
                            tracing::warn!(error = %e, "no new session yet");
                        }
                        Ok(Err(e)) => return Err(e),
                        Err(_) => return Ok(Sent::Unsettled),
                    }
                }
            }
            tokio::time::sleep_until((Instant::now() + pause).min(by)).await;
        }
    }
}
