//! Waiting for something the test cannot be told about: the one place the tests poll.
//!
//! A test that can be told (a watch, a `Notify`, a channel, a child's exit) waits on that, and a
//! test that waits for time to pass drives the clock the code reads instead
//! ([`event_bridge::clock::ZkTime::at`]). What is left is a state only a look can see (a znode
//! gone, a port open, a log line written): [`eventually`] looks again and again, a short pause
//! between looks, until it is there.

use std::fmt::Display;
use std::time::Duration;

use tokio::time::Instant;

/// How long [`eventually`] looks before it gives up: a hang guard, not a speed claim.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The longest pause between two looks (the first pauses are shorter: most waits are short).
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// What a look answers: `true` or `Some(found)` when what it waits for is there.
pub trait Look {
    type Found;
    fn found(self) -> Option<Self::Found>;
}

impl Look for bool {
    type Found = ();
    fn found(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Look for Option<T> {
    type Found = T;
    fn found(self) -> Option<T> {
        self
    }
}

/// Looks with `check` until it finds what it waits for, and returns that; panics naming `what`
/// when it still has not after [`PATIENCE`].
pub async fn eventually<L: Look, F: Future<Output = L>>(
    what: impl Display,
    check: impl FnMut() -> F,
) -> L::Found {
    match poll(PATIENCE, check).await {
        Some(found) => found,
        None => panic!("gave up waiting after {PATIENCE:?}: {what}"),
    }
}

/// Looks with `check` until it finds what it waits for, for `limit` at most; `None` when it
/// never did (for a caller that has its own limit, or says itself what was missing).
pub async fn poll<L: Look, F: Future<Output = L>>(
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> Option<L::Found> {
    let give_up = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(found) = check().await.found() {
            return Some(found);
        }
        if Instant::now() >= give_up {
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LOOK_EVERY);
    }
}
