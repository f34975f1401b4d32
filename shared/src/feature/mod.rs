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

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::handler::Delivered;
use crate::layout::Layout;
use crate::state::State;
use crate::task::{Envelope, Task};

mod covered;
mod registry;

pub use covered::LatestCovers;
pub use registry::Features;

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
    /// `now_ms` is the latest ZooKeeper's time may be ([`ZkTime::latest_ms`]): a feature that
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

/// A feature's part in one ending multi-op ([`Feature::end_part`]), kept from before its
/// first try to its answer: asked for its writes at each try, answered when one of them
/// failed the try, told when the multi-op landed. What it holds (a turn at a znode, what it
/// read) is let go when it is dropped, after the ending.
pub trait EndPart: Send + Sync {
    /// Its writes for this try, given `still`: the indexes (in the `leaving` it was made
    /// with) of the tasks still ending. A task that ended otherwise (gone, its lease lost) is
    /// no longer among them.
    fn writes(&mut self, still: &[usize]) -> Vec<EndWrite>;

    /// Its write `k` (of this try's [`EndPart::writes`]) failed the multi-op with `error`:
    /// whether the ending is tried again (it read again what it must), or fails with the
    /// error (`false`). It bounds its own rereads.
    fn failed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        k: usize,
        error: &'a zk::Error,
    ) -> BoxFuture<'a, Result<bool>>;

    /// The multi-op landed: `results`, one for each of its writes of that try, in order.
    fn landed<'a>(
        &'a mut self,
        _site: &'a Site<'a>,
        _results: Vec<&'a zk::MultiWriteResult>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The multi-op landed (after [`EndPart::landed`]): what follows from the ending, such as
    /// other tasks that waited for the ended ones, run once the ending is over and every part
    /// let go of what it held.
    fn after(&mut self) -> Option<Box<dyn AfterEnd>> {
        None
    }
}

/// What follows from an ending ([`EndPart::after`]), run once it is over. A failure here
/// changes nothing of the ending: it logs it.
pub trait AfterEnd: Send {
    /// Runs it, in the queue at `site`.
    fn run<'a>(self: Box<Self>, site: &'a Site<'a>) -> BoxFuture<'a, ()>;
}

/// The features' parts in one ending multi-op, each with its feature's index.
#[derive(Default)]
pub struct EndParts(pub Vec<(usize, Box<dyn EndPart>)>);

/// The queue's store as a hook reaches it: its session, its paths, its ACLs; and the queue
/// itself, for a feature whose work after an ending goes through the core's own writes.
pub struct Site<'a> {
    /// The queue's ZooKeeper session.
    pub client: &'a zk::Client,
    /// The queue's paths.
    pub layout: &'a Layout,
    /// The ACLs of what it creates.
    pub acls: zk::Acls<'static>,
    /// The queue (a [`crate::Queue`]) as this module may hold it without naming it: the
    /// core's modules name this one, so this one names none of theirs (see [`Site::queue`]).
    pub queue: &'a (dyn Any + Send + Sync),
}

impl Site<'_> {
    /// The queue the hook runs in, as the type `Q` a feature names (`crate::Queue`); `None`
    /// for any other type.
    pub fn queue<Q: Any>(&self) -> Option<&Q> {
        self.queue.downcast_ref::<Q>()
    }

    /// Creates the persistent znode `path` (empty) unless it exists.
    pub async fn ensure(&self, path: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(self.acls);
        match self.client.create(path, b"", &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// Makes sure of a time bucket's znode `path` and of its `parent` (each made unless it
    /// exists), unless `made` already says `bucket`: a create that finds its node is a logged
    /// write all the same, so a process makes each bucket once.
    pub async fn ensure_bucket(
        &self,
        made: &std::sync::atomic::AtomicI64,
        bucket: i64,
        parent: &str,
        path: &str,
    ) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if made.load(Relaxed) != bucket {
            self.ensure(parent).await?;
            self.ensure(path).await?;
            made.store(bucket, Relaxed);
        }
        Ok(())
    }

    /// The children of `path`; none when it is gone.
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        children_of(self.client, path).await
    }

    /// One znode's data and stat; `None` when it is gone.
    pub async fn read(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        match self.client.get_data(path).await {
            Ok(read) => Ok(Some(read)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Several znodes' data and stats in one request (a multi-read); `None` for those gone.
    /// No request for no paths.
    pub async fn read_all(&self, paths: &[String]) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = self.client.new_multi_reader();
        for path in paths {
            (reader.add_get_data(path)).map_err(|e| Error::zk("get", path, e))?;
        }
        let results = (reader.commit().await).map_err(|e| Error::zk("get", &paths[0], e))?;
        (paths.iter().zip(results))
            .map(|(path, result)| match result {
                zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => Err(Error::zk("get", path, err)),
                other => {
                    let msg = format!("multi-read returned {other:?}");
                    Err(Error::zk("get", path, zk::Error::UnexpectedError(msg)))
                }
            })
            .collect()
    }
}

/// A task at its end, as [`Feature::at_end`] sees it.
pub struct Leaving<'a> {
    /// Its name (in its lane, or where it waits).
    pub name: &'a str,
    /// What other tasks name it by: its envelope's id, or a plain body's task name; none for
    /// a body that is neither.
    pub id: Option<&'a str>,
    /// Its envelope; none for a plain or unreadable body.
    pub envelope: Option<&'a Envelope>,
    /// The task as its holder has it, when it is held (a completed task always is).
    pub held: Option<&'a Task>,
    /// What its sink answered, when it says.
    pub delivered: Option<&'a Delivered>,
    /// Why it goes to the dead letters, when it does.
    pub reason: Option<&'a str>,
    /// Whether it ends within another task's end (a waiting child dying with its parent):
    /// what follows from its own end is left to the walk that ends it.
    pub within_another: bool,
}

impl<'a> Leaving<'a> {
    /// A held task that completed, its sink's answer `delivered`.
    pub fn completed(task: &'a Task, delivered: Option<&'a Delivered>) -> Self {
        Leaving {
            name: &task.name,
            id: Some(&task.envelope.id),
            envelope: Some(&task.envelope),
            held: Some(task),
            delivered,
            reason: None,
            within_another: false,
        }
    }
}

/// What the run's start read listed for one feature ([`Feature::listed_at_start`]): the
/// names of its folder's children.
pub type Listed = BTreeSet<String>;

/// What a read of a feature's [`Feature::read_at_start`] znode found.
#[derive(Clone, Copy, Debug)]
pub struct StartRead<'a> {
    /// The znode's path.
    pub path: &'a str,
    /// Its data and stat; `None` when it is not there.
    pub found: Option<(&'a [u8], &'a zk::Stat)>,
}

/// What a feature's start read means for the run ([`Feature::saw_at_start`]), until the
/// next one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtStart {
    /// Whether the run asks it at claim ([`Feature::at_claim`], [`Feature::stops_running`]):
    /// a feature with nothing to say (nothing paused) costs the run's claims nothing.
    pub asks_at_claim: bool,
    /// Whether the run claims nothing at all (the whole queue paused): it says so in its
    /// report (`queue_paused`).
    pub holds_all: bool,
    /// The znodes, each at the version read, that every claim's multi-op checks, so that no
    /// claim decided on this read lands after they changed (a pause): when one moved, the
    /// claim reads it again, tells the feature, and leaves the tasks the feature now leaves
    /// ([`AtClaim::Leave`]; a feature's other answers are not asked again in that claim).
    pub checks: Vec<ClaimCheck>,
    /// What the feature made of the read (what is paused), which its claim hooks are given
    /// with this answer ([`Started::kept`]): a claim decides on the very read its multi-op
    /// checks, whichever queue's features made it.
    pub kept: Option<Kept>,
    /// The znode, at the version read, whose check stands for the feature's part in every
    /// ending while it stays so ([`IdleCheck::Ends`]; see `feature/covered.rs`).
    pub covers_ends: Option<ClaimCheck>,
}

impl AtStart {
    /// The answer to a read of a feature's znode at `path` that found it idle
    /// ([`Feature::idle`]): nothing to ask at claim, nothing kept, and the version read checked
    /// as `check` says: by every claim, or by every ending in place of the feature's part.
    pub fn idle(path: &str, stat: &zk::Stat, check: IdleCheck) -> Self {
        let read = ClaimCheck {
            path: path.to_string(),
            version: stat.version,
            mzxid: stat.mzxid,
        };
        match check {
            IdleCheck::Claims => AtStart {
                checks: vec![read],
                ..AtStart::default()
            },
            IdleCheck::Ends => AtStart {
                covers_ends: Some(read),
                ..AtStart::default()
            },
        }
    }
}

/// What a feature's start-read znode is while the feature has nothing to do
/// ([`Feature::idle`]): it holds `data` and has no children.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    /// Its data while idle.
    pub data: &'static [u8],
    /// What the core checks for the feature while it is idle.
    pub check: IdleCheck,
}

/// What the core checks, at the version read, while a feature is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleCheck {
    /// Every claim's multi-op ([`AtStart::checks`]): what a change to it says (a pause) must
    /// hold for every claim decided after it.
    Claims,
    /// Every ending multi-op, in place of the feature's part ([`AtStart::covers_ends`]): while
    /// it is idle the feature writes nothing at an end (no parent has children).
    Ends,
}

/// What a feature made of its start read, carried with its answer and handed back to its
/// claim hooks; opaque to the core.
#[derive(Clone)]
pub struct Kept(pub Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept(..)")
    }
}

impl PartialEq for Kept {
    /// The same when it is the same value (one read's).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A znode at the version a feature's answers rest on, which a claim's multi-op checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimCheck {
    /// Its path.
    pub path: String,
    /// The version read.
    pub version: i32,
    /// Its `mzxid` when read: which of two reads is the newer (a version starts again when
    /// the znode is made again).
    pub mzxid: i64,
}

/// What the run's start read found for one feature, as its claim hooks are given it.
#[derive(Clone, Copy, Debug)]
pub struct Started<'a> {
    /// What it listed for it ([`Feature::listed_at_start`]); empty when it asked for none.
    pub listed: &'a Listed,
    /// What the feature made of its read ([`AtStart::kept`]), if anything.
    kept: Option<&'a Kept>,
}

impl<'a> Started<'a> {
    /// What the feature made of its read, as the type `T` it made.
    pub fn kept<T: Any>(&self) -> Option<&'a T> {
        self.kept.and_then(|kept| kept.0.downcast_ref::<T>())
    }
}

/// What the run's start read found for the features, by their index in the list: what it
/// listed for each that asked ([`Feature::listed_at_start`]), and what the others' reads
/// ([`Feature::read_at_start`]) told the run. Good for the queue whose features read it: the
/// indices are those of its list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    listed: Vec<(usize, Listed)>,
    read: Vec<(usize, AtStart)>,
}

impl Found {
    /// The listings `listed`, and what each read told (`read`), each with the index of the
    /// feature that asked for it.
    pub fn new(listed: Vec<(usize, Listed)>, read: Vec<(usize, AtStart)>) -> Self {
        let mut found = Found {
            listed,
            read: Vec::new(),
        };
        for (at, answer) in read {
            found.learn(at, answer);
        }
        found
    }

    /// Takes what the feature at index `at` answered to a read of its znode, in place of
    /// what it answered before.
    pub fn learn(&mut self, at: usize, answer: AtStart) {
        self.read.retain(|(i, _)| *i != at);
        self.read.push((at, answer));
    }

    /// What the feature at index `at` answered to its read, if it asked for one.
    pub fn answer(&self, at: usize) -> Option<&AtStart> {
        (self.read.iter()).find(|(i, _)| *i == at).map(|(_, a)| a)
    }

    /// Whether the feature at index `at` is not asked at claim in this run: its listing came
    /// back empty, or its read says it has nothing to say.
    pub fn empty_for(&self, at: usize) -> bool {
        self.answer(at).is_some_and(|a| !a.asks_at_claim)
            || (self.listed.iter()).any(|(i, l)| *i == at && l.is_empty())
    }

    /// What was found for the feature at index `at`, as its claim hooks are given it.
    pub fn of(&self, at: usize) -> Started<'_> {
        static NOTHING: Listed = BTreeSet::new();
        let listed = (self.listed.iter())
            .find(|(i, _)| *i == at)
            .map_or(&NOTHING, |(_, listed)| listed);
        let kept = self.answer(at).and_then(|a| a.kept.as_ref());
        Started { listed, kept }
    }

    /// Whether a feature's read says the run claims nothing (the whole queue paused).
    pub fn holds_all(&self) -> bool {
        self.read.iter().any(|(_, a)| a.holds_all)
    }

    /// What every claim's multi-op checks, each with the index of the feature it is for.
    pub fn checks(&self) -> Vec<(usize, ClaimCheck)> {
        (self.read.iter())
            .flat_map(|(at, a)| a.checks.iter().map(move |c| (*at, c.clone())))
            .collect()
    }
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

/// A task that left the queue, as a feature kept it ([`Feature::find_ended`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedTask {
    /// Its name when it ended.
    pub task: String,
    /// Its envelope id.
    pub id: String,
    /// How it ended.
    pub how: End,
}

/// How tasks end, as [`Feature::at_end`] is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Their handler succeeded.
    Completed,
    /// They go to the dead letters (each [`Leaving`] says why).
    Dead,
}

/// A write a feature adds to an ending, at any version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndWrite {
    /// Deletes znode `path`, at `version` (any when none).
    Delete {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Fails the multi-op unless znode `path` is at data version `version`.
    Check {
        /// The znode.
        path: String,
        /// The version it must be at.
        version: i32,
    },
    /// Fails the multi-op when znode `path` exists (a create and a delete of it, empty).
    Absent {
        /// The znode.
        path: String,
    },
    /// Sets the data of znode `path`, at `version` (any when none).
    Set {
        /// The znode.
        path: String,
        /// Its new data.
        data: Vec<u8>,
        /// The version it must be at.
        version: Option<i32>,
    },
    /// Creates the persistent znode `path` with `data`.
    Create {
        /// The znode.
        path: String,
        /// Its data.
        data: Vec<u8>,
    },
    /// Creates a persistent sequential znode `prefix<sequence>` with `data` (a task at a
    /// lane's tail).
    CreateSequential {
        /// The path its sequence number is appended to.
        prefix: String,
        /// Its data.
        data: Vec<u8>,
    },
}

impl EndWrite {
    /// What it adds to a request: its path and data.
    pub fn bytes(&self) -> usize {
        match self {
            EndWrite::Set { path, data, .. }
            | EndWrite::Create { path, data }
            | EndWrite::CreateSequential { prefix: path, data } => path.len() + data.len(),
            EndWrite::Delete { path, .. } | EndWrite::Check { path, .. } => path.len(),
            EndWrite::Absent { path } => 2 * path.len(),
        }
    }
}

/// A feature's answer to one of its writes that failed an ending or a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// The ending (or release) is committed again without the write.
    LeaveOut,
    /// The ending (or release) is committed again without any of the feature's writes for
    /// that task: they stand or fall together.
    LeaveOutAll,
    /// The ending (or release) is committed again with this write in place of the one that
    /// failed (the same znode at the version it moved to).
    Replace(EndWrite),
    /// A release only: the task is not given back, as it was cancelled while held; its
    /// holder buries it (`Settled::Cancelled`).
    Cancelled,
    /// Nothing explains it: the ending fails with the error.
    Unexpected,
}

impl AfterFailure {
    /// Changes one task's feature writes `writes` (each with its feature's index) as this
    /// answer to the failure of `writes[k]` says; whether the ending (or release) is tried
    /// again. `false` for [`AfterFailure::Cancelled`] and [`AfterFailure::Unexpected`], which
    /// the caller answers.
    pub fn apply(self, writes: &mut Vec<(usize, EndWrite)>, k: usize) -> bool {
        match self {
            AfterFailure::LeaveOut => {
                writes.remove(k);
            }
            AfterFailure::LeaveOutAll => {
                let feature = writes[k].0;
                writes.retain(|(at, _)| *at != feature);
            }
            AfterFailure::Replace(write) => writes[k].1 = write,
            AfterFailure::Cancelled | AfterFailure::Unexpected => return false,
        }
        true
    }
}

/// What a sweep works with: the queue's session, its paths, and ZooKeeper's time as the
/// reaper read it; and the queue itself, for a sweep whose work goes through the core's own
/// writes.
pub struct Upkeep {
    /// The queue's ZooKeeper session.
    pub client: zk::Client,
    /// The queue's paths.
    pub layout: Layout,
    /// ZooKeeper's time.
    pub now: ZkTime,
    /// The queue (a clone of the [`crate::Queue`]) as this module may hold it without naming
    /// it (see [`Upkeep::queue`]).
    pub queue: Arc<dyn Any + Send + Sync>,
}

impl Upkeep {
    /// The queue being swept, as the type `Q` a feature names (`crate::Queue`); `None` for
    /// any other type.
    pub fn queue<Q: Any>(&self) -> Option<&Q> {
        self.queue.downcast_ref::<Q>()
    }

    /// The children of `path`; none when it is gone.
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        children_of(&self.client, path).await
    }
}

/// The children of `path` on `client`'s session; none when it is gone.
async fn children_of(client: &zk::Client, path: &str) -> Result<Vec<String>> {
    match client.list_children(path).await {
        Ok(names) => Ok(names),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Error::zk("list", path, e)),
    }
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

/// A znode's stat with the given version, `mzxid` and number of children, the rest zero or
/// one: what the features' unit tests hand their hooks.
#[cfg(test)]
pub(crate) fn stat_for_tests(version: i32, mzxid: i64, num_children: i32) -> zk::Stat {
    zk::Stat {
        czxid: 1,
        mzxid,
        pzxid: 1,
        ctime: 0,
        mtime: 0,
        version,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 0,
        num_children,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(asks_at_claim: bool, holds_all: bool, version: i32) -> AtStart {
        let path = "/q/paused".to_string();
        let mzxid = i64::from(version) * 10;
        AtStart {
            asks_at_claim,
            holds_all,
            checks: vec![ClaimCheck {
                path,
                version,
                mzxid,
            }],
            kept: Some(Kept(Arc::new(version))),
            covers_ends: None,
        }
    }

    #[test]
    fn a_read_answered_again_replaces_what_the_feature_said_before() {
        let mut found = Found::new(vec![(0, Listed::new())], vec![(1, answer(true, true, 3))]);
        assert!(found.empty_for(0), "its listing came back empty");
        assert!(!found.empty_for(1) && found.holds_all());
        assert_eq!(
            found.checks(),
            [(1, answer(true, true, 3).checks[0].clone())]
        );
        found.learn(1, answer(false, false, 4));
        assert!(found.empty_for(1), "nothing to say now");
        assert!(!found.holds_all(), "the run may claim again");
        assert_eq!(found.checks().len(), 1, "its check replaced, not added");
        assert_eq!(found.checks()[0].1.version, 4);
        assert_eq!(
            found.of(1).kept::<i32>(),
            Some(&4),
            "what it made of the new read"
        );
        assert_eq!(found.of(1).kept::<String>(), None, "as the type it made");
        found.learn(1, AtStart::default());
        assert!(
            found.checks().is_empty(),
            "its znode is gone: nothing to check"
        );
    }
}
