//! Riding out a lost connection under a publish: how long to wait ([`PublishOptions`]), and
//! waiting until a session answers again: the same one, which the client reconnects by itself
//! while it lives (a leader election, a dropped link), or a new one once it is over, when the
//! caller can open one ([`Renew`]; [`crate::Session::renew`] does).

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::Queue;
use crate::error::{Error, Result};
use crate::session::{Recovery, recovery};

/// How long a bulk publish waits for ZooKeeper to answer again after it lost its connection,
/// by default: longer than a session lives unanswered (10 s by default, which the client
/// declares expired after about 14 s) plus a new session's connect (5 s), and than an
/// ensemble's election takes; short enough that a script does not hang on a ZooKeeper that is
/// down.
pub const PUBLISH_RETRY_FOR: Duration = Duration::from_secs(60);

/// Between two tries while ZooKeeper does not answer.
const PAUSE: Duration = Duration::from_millis(200);

/// Opens a new session when the one a publish runs on is over: the queue on it.
pub type Renew<'r> = dyn Fn(Queue) -> BoxFuture<'r, Result<Queue>> + Send + Sync + 'r;

/// How a bulk publish ([`Queue::publish_each`]) rides out a lost connection.
#[derive(Clone, Copy)]
pub struct PublishOptions<'r> {
    /// How long one outage may last, from the failure until what was in doubt is settled and
    /// sent again ([`PUBLISH_RETRY_FOR`] by default).
    pub retry_for: Duration,
    /// Opens a new session when the publish's is over (expired); without it, an expiry ends
    /// the publish with what was in doubt unknown.
    pub renew: Option<&'r Renew<'r>>,
}

impl Default for PublishOptions<'_> {
    fn default() -> Self {
        PublishOptions {
            retry_for: PUBLISH_RETRY_FOR,
            renew: None,
        }
    }
}

impl std::fmt::Debug for PublishOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOptions")
            .field("retry_for", &self.retry_for)
            .field("renew", &self.renew.is_some())
            .finish()
    }
}

/// Whether `error` leaves what was sent with it in doubt: the link or the session failed
/// under it (anything the retry policy would send again).
pub(super) fn in_doubt(error: &Error, session_over: bool) -> bool {
    recovery(error, session_over) != Recovery::GiveUp
}

/// One outage of a publish: its deadline, set at its first failure.
pub(super) struct Outage<'o, 'r> {
    options: &'o PublishOptions<'r>,
    deadline: Option<Instant>,
}

impl<'o, 'r> Outage<'o, 'r> {
    pub(super) fn new(options: &'o PublishOptions<'r>) -> Self {
        Outage {
            options,
            deadline: None,
        }
    }

    /// How long an outage may last.
    pub(super) fn retry_for(&self) -> Duration {
        self.options.retry_for
    }

    /// The publish went on without a failure: the next one starts a new outage.
    pub(super) fn over(&mut self) {
        self.deadline = None;
    }

    /// After `error` failed a request on `queue`: the queue to go on with, once a session
    /// answers, within the outage's budget. `error` itself when it is not a failure of the link
    /// or the session; [`Error::Timeout`] when the budget ran out.
    pub(super) async fn back(&mut self, queue: &Queue, error: Error) -> Result<Queue> {
        if !in_doubt(&error, queue.session_over()) {
            return Err(error);
        }
        let retry_for = self.options.retry_for;
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + retry_for);
        tracing::warn!(error = %error, "zookeeper connection lost under a publish; waiting for a session");
        let root = queue.layout().root().to_string();
        let out_of_time = || Error::Timeout {
            op: "publish",
            path: root.clone(),
            timeout_ms: retry_for.as_millis() as u64,
        };
        let mut queue = queue.clone();
        let mut over = queue.session_over();
        loop {
            if over {
                let Some(renew) = self.options.renew else {
                    return Err(Error::zk(
                        "publish",
                        &root,
                        zookeeper_client::Error::SessionExpired,
                    ));
                };
                match tokio::time::timeout_at(deadline, renew(queue.clone())).await {
                    Ok(Ok(fresh)) => {
                        queue = fresh;
                        over = false;
                    }
                    Ok(Err(e)) if Instant::now() + PAUSE < deadline => {
                        tracing::warn!(error = %e, "no new session yet");
                        tokio::time::sleep(PAUSE).await;
                        continue;
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(out_of_time()),
                }
            }
            // A request made while the client reconnects waits for the connection.
            let answered = tokio::time::timeout_at(deadline, queue.client().sync(&root)).await;
            let failed = match answered {
                Ok(Ok(())) => return Ok(queue),
                Ok(Err(e)) => Error::zk("sync", &root, e),
                Err(_) => return Err(out_of_time()),
            };
            match recovery(&failed, queue.session_over()) {
                Recovery::GiveUp => return Err(failed),
                Recovery::NewSession if self.options.renew.is_none() => return Err(failed),
                Recovery::NewSession => over = true,
                Recovery::SameSession if Instant::now() + PAUSE >= deadline => {
                    return Err(out_of_time());
                }
                Recovery::SameSession => tokio::time::sleep(PAUSE).await,
            }
        }
    }
}
