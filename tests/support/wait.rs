//! Waiting for something the test cannot be told about: the one place the tests poll.
//!
//! A test that can be told (a watch, a `Notify`, a channel, a child's exit) waits on that, and a
//! test that waits for time to pass drives the clock the code reads instead
//! ([`event_bridge::clock::ZkTime::at`]). What is left is a state only a look can see (a znode
//! gone, a port open, a log line written): [`eventually`] looks again and again, a short pause
//! between looks, until it is there. A loop that tries an operation until a server answers
//! (one electing a leader, one just started) paces its tries with [`Tries`].
//!
//! The one wait left in real time is [`real_time`]: where time passing is what the test is
//! about (a fault at its planned moment, a process left dead for a while, a server slow to
//! answer), and nothing the code reads could be moved instead. Each such wait says why.

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
    let mut tries = Tries::within(limit);
    loop {
        if let Some(found) = check().await.found() {
            return Some(found);
        }
        if !tries.again().await {
            return None;
        }
    }
}

/// The pace of a loop that tries again until something answers, for a limit: a short pause
/// before each try after the first (growing from 1 ms to [`LOOK_EVERY`]), and `false` once the
/// limit has passed: `while tries.again().await { … }`.
pub struct Tries {
    give_up: Instant,
    pause: Duration,
    longest: Duration,
    first: bool,
}

impl Tries {
    /// Tries for `limit` (the first try always happens).
    pub fn within(limit: Duration) -> Self {
        Tries {
            give_up: Instant::now() + limit,
            pause: Duration::from_millis(1),
            longest: LOOK_EVERY,
            first: true,
        }
    }

    /// Tries for `limit`, `pause` apart: for a try that writes (a publish, a cancel), whose
    /// pace changes what the run does (each publish tried again may add a duplicate).
    pub fn every(limit: Duration, pause: Duration) -> Self {
        Tries {
            pause,
            longest: pause,
            ..Tries::within(limit)
        }
    }

    /// Whether to try (again): at once the first time; after a pause later, while the limit
    /// has not passed.
    pub async fn again(&mut self) -> bool {
        if std::mem::take(&mut self.first) {
            return true;
        }
        if Instant::now() >= self.give_up {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(self.longest);
        true
    }
}

/// When a [`real_time`] wait ends: a time from now, or a moment.
pub trait Until {
    fn deadline(self) -> Instant;
}

impl Until for Duration {
    fn deadline(self) -> Instant {
        Instant::now() + self
    }
}

impl Until for Instant {
    fn deadline(self) -> Instant {
        self
    }
}

/// Waits in real time until `until`, because real time passing is the point: `why` says what
/// it stands for (a fault injected at its moment, a process left dead, a slow reply).
pub async fn real_time(until: impl Until, why: &str) {
    debug_assert!(!why.is_empty(), "a wait in real time says why");
    tokio::time::sleep_until(until.deadline()).await;
}
