//! Where a run gets its queue: one fixed queue, or a [`Session`] that can open a new ZooKeeper
//! session when the current one ends, so that held tasks are extended and settled on it.

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::session::Session;

/// The queue a run works on.
#[derive(Clone, Copy)]
pub(super) enum Source<'a> {
    /// One queue, one session: when it ends, what was held waits for the reaper.
    Fixed(&'a Queue),
    /// A session that is renewed when it ends.
    Live(&'a Session),
}

impl Source<'_> {
    /// The queue to send the next request on.
    pub(super) fn queue(&self) -> Queue {
        match self {
            Source::Fixed(queue) => (*queue).clone(),
            Source::Live(session) => session.queue(),
        }
    }

    /// Whether a new session can replace one that ended.
    pub(super) fn renews(&self) -> bool {
        matches!(self, Source::Live(_))
    }

    /// A queue on a new session in place of `stale`'s, or `error` back when there is no way
    /// to get one.
    pub(super) async fn renew(&self, stale: &Queue, error: Error) -> Result<Queue> {
        match self {
            Source::Fixed(_) => Err(error),
            Source::Live(session) => session.renew(stale, &error.to_string()).await,
        }
    }
}
