//! The library's one error type.

use zookeeper_client as zk;

use crate::config::ConfigError;

/// Everything that can go wrong in the library.
///
/// Races are not errors: losing a claim, or finding a lease already reaped, are outcomes
/// ([`crate::queue::TaskOutcome`], [`crate::queue::Settled`]). What remains here is what an
/// operator must look at. Whether a failed request is worth repeating, on this session or a
/// new one, is decided in one place: [`crate::session::recovery`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration variable is missing or malformed; the message names it.
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// No ZooKeeper session could be established in time.
    #[error(
        "cannot reach ZooKeeper at {address} within {timeout_ms} ms: {reason}; check that it runs \
         and that ZOOKEEPER_CONNECTION_STRING names it (`event-bridge doctor` checks each server)"
    )]
    Unreachable {
        /// The connection string that was tried (servers and chroot).
        address: String,
        /// How long the connect waited, in milliseconds.
        timeout_ms: u64,
        /// What the client reported, or that the time ran out.
        reason: String,
    },

    /// A ZooKeeper request failed for a reason the caller cannot treat as a race.
    #[error("zookeeper {op} {path}: {source}; {}", zk_fix(source))]
    Zk {
        /// The request that failed (`get`, `list`, `create`, `delete`, …).
        op: &'static str,
        /// The znode it was about.
        path: String,
        /// The client's error.
        #[source]
        source: zk::Error,
    },

    /// A ZooKeeper request did not answer before the invocation's time ran out.
    #[error(
        "zookeeper {op} {path}: no answer within {timeout_ms} ms; run it again once ZooKeeper \
         answers (`event-bridge doctor` checks each server)"
    )]
    Timeout {
        /// The request that got no answer.
        op: &'static str,
        /// The znode it was about.
        path: String,
        /// How long it waited, in milliseconds.
        timeout_ms: u64,
    },

    /// A task is too large for a znode.
    #[error(
        "task is {size} bytes, over the {limit}-byte znode limit: keep large data elsewhere and \
         publish a reference to it"
    )]
    TooLarge {
        /// The task's encoded size in bytes.
        size: usize,
        /// The most a task znode may hold, in bytes.
        limit: usize,
    },

    /// A publish refused before anything was written: task `item` of it (from 1) is one ZooKeeper
    /// would refuse, or one `status` and `cancel` could not tell from another.
    #[error(
        "task {item} of the publish: {problem}; correct it and publish again (nothing was written)"
    )]
    Unpublishable {
        /// Which task of the publish, counted from 1.
        item: usize,
        /// What is wrong with it.
        problem: String,
    },

    /// A publish cut by a lost connection that could not tell what became of its task `item`
    /// (counted from 1), with envelope id `id`: its answer was lost, and it may exist (or have
    /// run already) or not; or the connection did not come back in time, and it was not sent.
    /// The problem says which; `cut`, for a publish that stopped there, what became of the
    /// publish's tasks that have no answer.
    #[error(
        "task {item} of the publish (id {id}): {problem}{}; run `event-bridge status {id}` to \
         see whether it landed before publishing it again",
        cut_text(.cut)
    )]
    InDoubt {
        /// Which task of the publish, counted from 1.
        item: usize,
        /// The task's envelope id: what `event-bridge status` finds it by.
        id: String,
        /// Whether the answer was lost or the request never went out.
        problem: String,
        /// For a publish that stopped at this task: what became of the tasks after it.
        cut: Option<CutShort>,
    },

    /// A kick (see [`crate::kick`]) that did not reach the function: logged, never a
    /// publish's error.
    #[error(
        "kick to {target}: {problem}; the cron tick or the next publisher's kick drains instead \
         (check EVENT_BRIDGE_KICK_URL and CRON_SECRET)"
    )]
    Kick {
        /// Where it was sent.
        target: String,
        /// What went wrong.
        problem: String,
    },

    /// Input that should have been JSON was not.
    #[error("invalid JSON: {0}; correct it")]
    Json(#[from] serde_json::Error),

    /// A znode the bridge keeps its own state in holds something it cannot read.
    #[error(
        "{path} holds what event-bridge cannot read: {problem}; correct or delete it \
         (docs/WIRE-FORMAT.md gives its format)"
    )]
    Unreadable {
        /// The znode.
        path: String,
        /// Why its content cannot be read.
        problem: String,
    },

    /// A schedule that cannot be added or fired as asked.
    #[error("schedule {name}: {problem}")]
    Schedule {
        /// The schedule's name.
        name: String,
        /// What cannot be done, and why.
        problem: String,
    },

    /// A batch that cannot be opened, joined or sealed as asked (unknown, sealed, opened
    /// twice, a bad name); nothing was written.
    #[error("batch {name}: {problem}")]
    Batch {
        /// The batch's name.
        name: String,
        /// What cannot be done, and why.
        problem: String,
    },

    /// A task published to run after `parent` cannot wait for it (unknown, a debounced
    /// publish, a body that can never run); nothing was written.
    #[error(
        "parent {}: {problem}; correct the task's `after` (nothing was written)",
        crate::quoted::clipped(parent)
    )]
    Parent {
        /// The parent as the task named it (name or envelope id).
        parent: String,
        /// Why the task cannot wait for it.
        problem: String,
    },

    /// A dead-letter record cannot be sent back to the queue: it keeps no body to send.
    #[error(
        "dead letter {name} cannot be redriven: {problem}; publish its task again, then purge it"
    )]
    NotRedrivable {
        /// The dead letter's name.
        name: String,
        /// Why it cannot be sent back.
        problem: String,
    },

    /// A handler's result over the limit a completion record keeps; nothing was built.
    #[error(
        "result is {bytes} bytes of JSON, over the {limit}-byte limit: return a smaller result, \
         or keep it elsewhere and return a reference"
    )]
    ResultTooLarge {
        /// The result's size as JSON, in bytes.
        bytes: usize,
        /// The most a completion record keeps, in bytes.
        limit: usize,
    },

    /// A signal that cannot be sent as asked (its key, its payload); nothing was sent.
    #[error("signal {}: {problem}", crate::quoted::clipped(key))]
    Signal {
        /// The signal's key, as given.
        key: String,
        /// What is wrong with the key or the payload.
        problem: String,
    },

    /// A handler's progress report breaks a rule (see [`crate::progress`]); nothing was kept.
    #[error("progress not reported: {0}")]
    BadProgress(String),

    /// The dashboard cannot start as asked (its address, its mode, its metrics).
    #[error("dashboard on {listen}: {problem}")]
    Dashboard {
        /// The address it was asked to listen on.
        listen: String,
        /// What stops it.
        problem: String,
    },
}

/// What a publish that stopped without a session ([`Error::InDoubt`]) left without an answer:
/// tasks sent whose answers were lost (they may exist), and tasks never sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutShort {
    /// Tasks sent whose answers were lost: each may exist or not.
    pub unknown: usize,
    /// Tasks never sent: none of them exists.
    pub unsent: usize,
}

impl std::fmt::Display for CutShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} task(s) sent may or may not exist (their answers say \"unknown\"), {} were not \
             published",
            self.unknown, self.unsent
        )
    }
}

/// `cut` as the end of an [`Error::InDoubt`]'s message.
fn cut_text(cut: &Option<CutShort>) -> String {
    cut.map(|cut| format!(": {cut}")).unwrap_or_default()
}

impl Error {
    /// Wraps a ZooKeeper error with the operation and path it came from.
    pub(crate) fn zk(
        op: &'static str,
        path: impl Into<String>,
        source: impl Into<zk::Error>,
    ) -> Self {
        Error::Zk {
            op,
            path: path.into(),
            source: source.into(),
        }
    }
}

/// What to do about a ZooKeeper error the caller could not treat as a race.
fn zk_fix(error: &zk::Error) -> &'static str {
    match error {
        zk::Error::NoAuth => {
            "set ZOOKEEPER_AUTH to credentials its ACL grants (`event-bridge doctor` names them)"
        }
        zk::Error::NoNode => "run `event-bridge init` to create the base paths",
        _ => "run it again; `event-bridge doctor` checks the servers if it keeps failing",
    }
}

/// A result whose error is the crate's [`Error`] unless another is named.
pub type Result<T, E = Error> = std::result::Result<T, E>;
