//! The hook interface: what a feature is to the core, and the registry the core iterates.
//!
//! A feature (a folder under `features/`) joins through the named hooks of [`Feature`]; the
//! core calls each registered feature's hook at its point of a task's life and never names a
//! feature itself. What a feature keeps with a task is its own section of the envelope
//! ([`crate::task::Section`]), which the core carries without reading.
//!
//! The hooks and where the core calls them:
//!
//! - at the door (`event-bridge publish -f`'s JSON lines, an HTTP publish's items): the item
//!   fields it reads ([`Feature::item_fields`]), carried into the envelope by
//!   [`Features::envelope_from_item`];
//! - everywhere: a feature that names the fields it reads ([`Feature::item_fields`],
//!   [`Feature::envelope_fields`]) is asked only about tasks whose envelope carries one, so
//!   a task without them never calls into it;
//! - at publish: [`Feature::check_publish`], before anything is written
//!   (`Queue::publish_each`, `AllOrNothing::check_batch`);
//! - at a run's start: [`Feature::listed_at_start`], a folder the run's one start read lists
//!   for it (`queue/start.rs`), which its claim hooks then see ([`Found`]); and
//!   [`Feature::read_at_start`], a znode the same read reads for it, told to
//!   [`Feature::saw_at_start`], whose answer ([`AtStart`]) says whether the run asks it at
//!   claim, whether the run may claim at all, and what every claim's multi-op checks;
//! - at claim: [`Feature::at_claim`], whether the task may be taken now, in the claim's
//!   preparation (`queue/claim/prepare.rs`): a task a feature refuses is buried there with
//!   the feature's reason and never reaches a handler, one it leaves stays in its lane
//!   untouched; the claim's multi-op checks the znodes the feature's start read named
//!   ([`AtStart::checks`]), and when one moved, reads it again, tells the feature, and leaves
//!   the tasks it was sending that the feature now leaves (its other answers wait for the
//!   next claim of those tasks: `queue/claim.rs`); and, while a resumable
//!   handler runs, [`Feature::stops_running`], whether it is asked to stop
//!   (`process/hold.rs`);
//! - at a release (a retry given back): [`Feature::at_release`], the writes it adds to the
//!   release's multi-op (`queue/holder.rs`), answered as an ending's are;
//! - in `explain` and `status`: [`Feature::explain`], what it says of the task, a line or a
//!   reason that holds the task back (`inspect/explain.rs`), with what a start read of the
//!   features found (`Queue::read_features`); the same read marks a task that a feature leaves
//!   where it is (`inspect`'s `paused`); and in `stats`, [`Feature::in_stats`], a field of its
//!   own (`stats.rs`);
//! - when the queue's base paths are made: [`Feature::made_with`], the data its start-read
//!   znode is made with (`queue/mod.rs`);
//! - at a start read that finds a feature's znode idle ([`Feature::idle`]): nothing; the core
//!   answers for it ([`AtStart::idle`]) and checks the znode's version at every claim, or at
//!   every ending in place of the feature's part (`covered.rs`), so an idle feature is never
//!   called by a plain task's run;
//! - at the end: [`Feature::at_end`], the writes it adds to the multi-op that takes tasks out
//!   of the queue, completed (`queue/complete.rs`) or dead (`queue/bury.rs`, and a blocked
//!   child dying with its parent, `queue/dependents.rs`), asked only at the ends it names
//!   ([`Feature::ends`]); and [`Feature::after_failure`], its answer when one of its writes
//!   failed that multi-op (`queue/end.rs`); and [`Feature::end_part`], its part in that
//!   multi-op ([`EndPart`]) when its writes span the tasks or rest on what it reads: asked for
//!   them again at each try, answered when one failed, told when the multi-op landed, and
//!   asked what follows from the ending ([`AfterEnd`], run through the queue, [`Site::queue`],
//!   once every part let go of what it held), with
//!   [`Feature::end_bytes`], what the part may add to a request;
//! - in the reaper's upkeep: [`Feature::sweep`], what it tidies (`reap.rs`), through the
//!   queue's session and paths ([`Upkeep`]);
//! - when the core looks for a task that left the queue (a publish cut by a lost connection,
//!   `queue/landed.rs`; a parent a child names, `queue/parents/find.rs`):
//!   [`Feature::find_ended`], what the feature kept of it.
//!
//! The hooks that reach ZooKeeper get the queue's session, paths and ACLs as a [`Site`]. What
//! a feature does beside a run, with the whole queue at hand, is a run hook
//! ([`crate::run_hook`]).
//!
//! This module imports nothing of `features/` (`shared/tests/module_graph.rs` checks it):
//! the registry's list is made there, and given to a [`crate::Queue`] when it is built.

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::Result;
use crate::layout::Layout;
use crate::state::State;
use crate::task::{Envelope, Task};

mod covered;
mod end;
mod registry;
mod site;
mod start;

pub use covered::LatestCovers;
pub use end::{AfterEnd, AfterFailure, End, EndPart, EndParts, EndWrite, EndedTask, Leaving};
pub use registry::Features;
pub use site::{Site, Upkeep};
#[cfg(test)]
pub(crate) use start::stat_for_tests;
pub use start::{AtStart, ClaimCheck, Found, Idle, IdleCheck, Kept, Listed, StartRead, Started};

/// A feature, as the core calls it. Every hook has a default that does nothing, so a feature
/// writes only the hooks it needs.
pub trait Feature: Send + Sync + 'static {
    /// Its name (its folder's under `features/`), in explanations and logs.
    fn name(&self) -> &'static str;

    /// The top-level fields of a JSON line or an HTTP publish item that it reads: each is
    /// carried into the envelope as it is, as the section of that name. A feature that names
    /// some is asked at publish, at claim and in `explain` only about an envelope that carries
    /// one of them, so a task without them pays nothing for it.
    fn item_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The envelope's top-level fields it reads that the core types itself (such as
    /// `idempotency_key`, see [`Envelope::carries`]): like [`Feature::item_fields`], a
    /// feature that names some is asked (at publish, at claim, in `explain` and at the end)
    /// only about envelopes that carry one of them, so a task without them never calls it.
    fn envelope_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// At publish, before anything is written: what it refuses of `envelope` (its section
    /// malformed), as a problem naming the field and its fix.
    fn check_publish(&self, _envelope: &Envelope) -> Result<(), String> {
        Ok(())
    }

    /// The folder under the queue's root (its name, such as `cancelled`) whose children the
    /// run's start read lists for it (one request for the run whatever the features ask),
    /// which [`Feature::at_claim`] and [`Feature::stops_running`] are given. Read once when
    /// the list is made. A feature whose folder was listed empty is not asked by them at all.
    /// A feature asks for a listing or a read ([`Feature::read_at_start`]), not both.
    fn listed_at_start(&self) -> Option<&'static str> {
        None
    }

    /// A znode under the queue's root (its name, such as `dependents` or `paused`) that the
    /// run's start read reads for it, in the same one request; it is told what was found
    /// ([`Feature::saw_at_start`]), and so is it when a claim read the znode again because
    /// it moved under the claim ([`AtStart::checks`]). Read once when the list is made.
    fn read_at_start(&self) -> Option<&'static str> {
        None
    }

    /// What a read of its [`Feature::read_at_start`] znode found: its data and stat, or none
    /// when it is not there. The answer says what the run does with the feature until its
    /// next start read; an error (the znode holds what the feature cannot read) fails the
    /// run's start read, naming the znode.
    fn saw_at_start(&self, _read: &StartRead<'_>) -> Result<AtStart> {
        Ok(AtStart::default())
    }

    /// At claim, at ZooKeeper's time `now_ms`, with what the run's start read found for it
    /// (what it listed, what the feature made of its read): whether the task may be taken now.
    /// `now_ms` is the latest ZooKeeper's time may be ([`ZkTime::latest_ms`](crate::clock::ZkTime::latest_ms)): a feature that
    /// refuses a task from a moment on (an expiry) refuses it once that moment may have come,
    /// never after it.
    /// Asked of a feature that reads a znode at the start only while its last read said so
    /// ([`AtStart::asks_at_claim`]).
    fn at_claim(&self, _envelope: &Envelope, _now_ms: i64, _started: &Started<'_>) -> AtClaim {
        AtClaim::Take
    }

    /// While a resumable handler of the task runs, with what the run's latest start read
    /// found for it: whether the handler is asked to stop (it saves and returns).
    fn stops_running(&self, _envelope: &Envelope, _started: &Started<'_>) -> bool {
        false
    }

    /// At the release of held `task` for a retry: the writes it adds to the release's
    /// multi-op, which land with it or not at all.
    fn at_release(&self, _layout: &Layout, _task: &Task) -> Vec<EndWrite> {
        Vec::new()
    }

    /// In `explain`, of a task in `state` (not ended yet), at ZooKeeper's time `now_ms`, with
    /// what a start read found for it (as a claim would see it): what it says of the task, if
    /// anything ([`Said`]). Asked as [`Feature::at_claim`] is: not while its read said it has
    /// nothing to say.
    fn explain(
        &self,
        _envelope: &Envelope,
        _asked: &Asked,
        _started: &Started<'_>,
    ) -> Option<Said> {
        None
    }

    /// In `stats`, with what a start read found for it: a top-level field of the stats and
    /// its value, when it has something to show (what is paused).
    fn in_stats(&self, _started: &Started<'_>) -> Option<(&'static str, serde_json::Value)> {
        None
    }

    /// The data its [`Feature::read_at_start`] znode is made with, with the queue's base
    /// paths (`None`: not made; a feature that reads it must then take "not there").
    fn made_with(&self) -> Option<&'static [u8]> {
        None
    }

    /// What its [`Feature::read_at_start`] znode is while the feature has nothing to do, and
    /// what the core checks for it then ([`Idle`]): a start read that finds it so is answered
    /// by the core without asking the feature ([`AtStart::idle`]), so an idle feature costs a
    /// run nothing but that check. Read once when the list is made. A feature whose idle znode
    /// covers its ends ([`IdleCheck::Ends`]) is asked for its part, once the check failed, with
    /// what names each leaving task (name, id, reason), not its envelope or held task.
    fn idle(&self) -> Option<Idle> {
        None
    }

    /// The ends [`Feature::at_end`] is asked about, read once when the list is made: a
    /// feature is not called at the other ends, so a task pays nothing at an end no feature
    /// writes at. Every end unless it says.
    fn ends(&self) -> &'static [End] {
        &[End::Completed, End::Dead]
    }

    /// At the end of the tasks `leaving`, ended together `how`, in the queue at `site`:
    /// the writes it adds to their ending's multi-op, each with the index in `leaving` of the
    /// task it goes with. They land with that task's ending or not at all.
    fn at_end<'a>(
        &'a self,
        _site: &'a Site<'a>,
        _leaving: &'a [Leaving<'a>],
        _how: End,
    ) -> BoxFuture<'a, Result<Vec<(usize, EndWrite)>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// At the end of the tasks `leaving`, ended together `how`: its part in that one
    /// multi-op when its writes span the tasks, or rest on what it reads and may read again
    /// ([`EndPart`]); none when the tasks do not concern it. Asked at the ends it names
    /// ([`Feature::ends`]), once for each multi-op the ending is sent as.
    fn end_part<'a>(
        &'a self,
        _site: &'a Site<'a>,
        _leaving: &'a [Leaving<'a>],
        _how: End,
    ) -> BoxFuture<'a, Result<Option<Box<dyn EndPart>>>> {
        Box::pin(async { Ok(None) })
    }

    /// What its [`Feature::end_part`] may add to a request at most, for each of `leaving`
    /// (charged to one task when the write spans several), so that the core splits a large
    /// ending over several multi-ops before it sends it (`queue/request_size.rs`).
    fn end_bytes(&self, leaving: &[Leaving<'_>]) -> Vec<usize> {
        vec![0; leaving.len()]
    }

    /// When `write` (one of its [`Feature::at_end`]) failed the ending's multi-op with
    /// `error`: whether the ending goes on without it, or fails.
    fn after_failure(&self, _write: &EndWrite, _error: &zk::Error) -> AfterFailure {
        AfterFailure::Unexpected
    }

    /// In the reaper's upkeep: what it tidies, and how many things it tidied.
    fn sweep<'a>(&'a self, _upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async { Ok(0) })
    }

    /// Each of the tasks `keys` (task names or envelope ids) that left the queue, as this
    /// feature kept it, if it did: one answer per key, in order. Asked for many keys at once,
    /// so a feature looks at its store once for them all.
    fn find_ended<'a>(
        &'a self,
        _site: &'a Site<'a>,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<EndedTask>>>> {
        Box::pin(async { Ok(keys.iter().map(|_| None).collect()) })
    }
}

/// Whether `envelope` carries one of `fields` ([`Envelope::carries`]).
fn carries(envelope: &Envelope, fields: &[&str]) -> bool {
    fields.iter().any(|field| envelope.carries(field))
}

/// What `explain` asks a feature about ([`Feature::explain`]): a task in `state`, at
/// ZooKeeper's time `now_ms`.
#[derive(Clone, Copy, Debug)]
pub struct Asked {
    /// The task's state.
    pub state: State,
    /// ZooKeeper's time.
    pub now_ms: i64,
}

/// What a feature says of a task in `explain` ([`Feature::explain`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    /// Its line, as `explain` prints it.
    pub line: String,
    /// When the feature holds the task back (a pause): its reason as data, a JSON object whose
    /// `reason` field names it, which `explain`'s reasons carry as they are. `None`: a line
    /// said beside the others (when a task expires), which holds nothing back.
    pub holds: Option<serde_json::Map<String, serde_json::Value>>,
    /// Said after the core's own reasons (what holds the task back now: its due time, its
    /// group, its gates), for what becomes of it at its next claim whatever holds it (a
    /// cancel mark). A reason that holds the task back comes before a line, unless it is
    /// last.
    pub last: bool,
}

/// What a feature says of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtClaim {
    /// The claim may go on.
    Take,
    /// Not now: the task stays where it is, untouched, and the claim answers
    /// [`crate::queue::TaskOutcome::Paused`] (counted once per run, and not tried again in
    /// it).
    Leave,
    /// The task never runs: it goes to the dead letters with `reason`, and its group does
    /// what the task or its route says (`on_dead`).
    Bury {
        /// The dead letter's reason.
        reason: String,
    },
    /// The task was cancelled: it goes to the dead letters with the reason `cancelled`, its
    /// group going on, and the claim answers [`crate::queue::TaskOutcome::Cancelled`].
    Cancel,
    /// The feature's part of the envelope is malformed (another producer's): the task goes to
    /// the dead letters as a malformed envelope, naming `problem`, its group going on, as a
    /// body that cannot be read does.
    Malformed {
        /// What is wrong, naming the field.
        problem: String,
    },
}
