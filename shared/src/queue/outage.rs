//! Riding out a lost connection under a publish: how long to wait ([`PublishOptions`]), and
//! waiting until a session answers again: the same one, which the client reconnects by itself
//! while it lives (a leader election, a dropped link), or a new one once it is over, when the
//! caller can open one ([`Renew`]; [`crate::Session::renew`] does).

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::Queue;
use super::recovery::{Recovery, recovery};
use crate::error::{Error, Result};

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
    /// When the caller must have its answer (an invocation's deadline, less a margin): an
    /// outage ends there at the latest, however much of `retry_for` is left, and so does the
    /// search for what landed. `None`: `retry_for` alone bounds an outage.
    pub deadline: Option<Instant>,
}

impl Default for PublishOptions<'_> {
    fn default() -> Self {
        PublishOptions {
            retry_for: PUBLISH_RETRY_FOR,
            renew: None,
            deadline: None,
        }
    }
}

impl std::fmt::Debug for PublishOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOptions")
            .field("retry_for", &self.retry_for)
            .field("renew", &self.renew.is_some())
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// Whether the server refused the request `error` answered without applying it: ZooKeeper's
/// throttle (`Throttled`) turns a request away before it is processed.
pub(super) fn refused(error: &Error) -> bool {
    matches!(
        error,
        Error::Zk {
            source: zookeeper_client::Error::Throttled,
            ..
        }
    )
}

/// Whether `error` leaves what was sent with it in doubt: the link or the session failed
/// under it (anything the retry policy would send again), but for a request the server
/// refused ([`refused`]): that one was not applied.
pub(super) fn in_doubt(error: &Error, session_over: bool) -> bool {
    !refused(error) && retriable(error, session_over)
}

/// Whether a publish waits and goes on after `error`: a failure of the link or the session,
/// or a request the server refused for now.
pub(super) fn retriable(error: &Error, session_over: bool) -> bool {
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

    /// Nothing is pending any more (what was in doubt is settled and what was left sent): the
    /// next failure starts a new outage, with a budget of its own.
    pub(super) fn over(&mut self) {
        self.deadline = None;
    }

    /// When the current outage ends (its first failure plus `retry_for`, no later than the
    /// options' deadline); the options' deadline when none is under way.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match (self.deadline, self.options.deadline) {
            (Some(outage), Some(caller)) => Some(outage.min(caller)),
            (outage, caller) => outage.or(caller),
        }
    }

    /// `work` (a search for what landed), within the current outage's deadline; a
    /// [`Error::Timeout`] when it runs out first.
    pub(super) async fn within<T>(
        &self,
        queue: &Queue,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(deadline) = self.deadline() else {
            return work.await;
        };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(done) => done,
            Err(_) => Err(self.out_of_time(queue)),
        }
    }

    fn out_of_time(&self, queue: &Queue) -> Error {
        Error::Timeout {
            op: "publish",
            path: queue.layout().root().to_string(),
            timeout_ms: self.options.retry_for.as_millis() as u64,
        }
    }

    /// After `error` failed a request on `queue`: the queue to go on with, once a session
    /// answers, within the outage's budget (and the options' deadline). `error` itself when it
    /// is not a failure of the link or the session, nor a request the server refused for now;
    /// [`Error::Timeout`] when the budget ran out.
    pub(super) async fn back(&mut self, queue: &Queue, error: Error) -> Result<Queue> {
        if !retriable(&error, queue.session_over()) {
            return Err(error);
        }
        let retry_for = self.options.retry_for;
        self.deadline
            .get_or_insert_with(|| Instant::now() + retry_for);
        let deadline = self.deadline().expect("an outage is under way");
        let out_of_time = || self.out_of_time(queue);
        if refused(&error) {
            // Turned away by a busy server: a pause before the request goes again.
            tracing::warn!(error = %error, "zookeeper refused a publish's request for now; sending it again");
            if Instant::now() + PAUSE >= deadline {
                return Err(out_of_time());
            }
            tokio::time::sleep(PAUSE).await;
        } else {
            tracing::warn!(error = %error, "zookeeper connection lost under a publish; waiting for a session");
        }
        let root = queue.layout().root().to_string();
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
