//! The queue on ZooKeeper: the core every task goes through, and the features beside it.
//!
//! The core ([`Queue`]):
//!
//! - [`publish`](Queue::publish) (`publish`, `bulk`): sequential creates at a lane's tail,
//!   pipelined; `outage`: riding out a lost connection under a publish; `after_publish`:
//!   the hook every publish calls once its tasks landed ([`AfterPublish`]: kicks).
//! - `start`, `walk`, `lane_walk`, `ranges`, with the [`Probes`] (`probe`): finding tasks by
//!   number from the heads, without listing a lane.
//! - `reads`: reading znodes, one or many to a request.
//! - `claim`: taking a task; `outcome`: what came of a task in a run ([`TaskOutcome`]), from
//!   its claim to its end; `stale`: what a lost race teaches.
//! - `holder`: what the holder of a [`Lease`] does while it runs the task: extend, release
//!   ([`Settled`]).
//! - `end`: ending tasks, the one multi-op of every completion and burial; `complete` and
//!   `bury` say what a task ends with; `record`: dead letters, copied to a
//!   [`DeadLetterSink`] (`forward`).
//! - `ops`: the multi-op every write is made of.
//!
//! The features, each a recipe (`recipe`): a view of the queue with its own methods, reached
//! from it, and called by the core only for a task that carries the feature:
//!
//! - [`Groups`] (`group_lock`, `place`): ordered groups' locks, and grouped tasks' places.
//! - [`IdempotencyKeys`] (`idempotency_keys`, `idempotency_key_expiry`): the keyed publish
//!   (a key's end and sweep are the feature's, `features/idempotency_keys/`).
//! - [`Gates`] (`gate`, `gate_cache`, `slots`, `slot_writes`, `key_gates`): limited routes'
//!   and concurrency keys' gates, and the slots claims hold in them.
//! - [`KeyLanes`] (`key_lanes`): lanes made as publishes need them; key lanes listed.
//! - [`Batches`] (`members`): batches' znodes, members, tallies and callbacks.
//! - [`Dependencies`] (`parents`, `dependents`): children waiting for their parents.
//! - [`DebounceKeys`] (`debounce`): debounced publishes, filed in the due index (their firing
//!   is the feature's, `features/debounce/`).
//! - [`Cancels`] (`cancels`): cancel marks, and cancelling a pending or waiting task.
//! - [`InDoubt`] (`landed`): what landed of a publish whose answers were lost.
//! - [`Delays`] (`delay`): tasks that wait out a backoff or a delay under `delayed/`.
//! - [`AllOrNothing`] (`all_or_nothing`): a publish of every item in one multi-op, or none
//!   (HTTP publishing).
//!
//! # Fencing
//!
//! A claim is one multi-op: create the lease, write it once more (so our leases are never at
//! version 0, which is where a lease of a 000-design consumer stays), and rewrite the task
//! with its attempt count raised, checked against the version just read. The claim's zxid
//! (the lease's `czxid`) is its *fencing token*: it grows with every write of the ensemble.
//!
//! Every later write of the holder (extend, complete, release, bury) checks both the task's
//! version and the lease's version. If the lease expired, was reaped and another consumer
//! claimed the task, the lease znode has the same path, perhaps even the same version, but the
//! task's version has moved on, so the stale holder's write fails and changes nothing.

#[macro_use]
mod recipe;
mod after_publish;
mod all_or_nothing;
mod bulk;
mod bury;
mod cancels;
mod claim;
mod complete;
mod debounce;
mod delay;
mod dependents;
mod end;
mod forward;
mod gate;
mod gate_cache;
mod group_lock;
mod held;
mod holder;
mod idempotency_key_expiry;
mod idempotency_keys;
mod key_gates;
mod key_lanes;
mod landed;
mod lane_walk;
mod members;
mod ops;
mod outage;
mod outcome;
mod parents;
mod place;
mod probe;
mod publish;
mod ranges;
mod reads;
pub(crate) mod record;
mod recovery;
mod request_size;
mod settings;
mod signals;
mod slot_writes;
mod slots;
mod stale;
mod start;
mod step_store;
mod turns;
mod walk;
pub(crate) mod write;
pub(crate) use write::Tries;

use std::sync::Arc;

use zookeeper_client as zk;

pub use crate::done_record::DoneRecord;
pub use crate::resume::{MAX_SIGNAL_KEY_NAME_BYTES, check_signal_key};
pub use crate::task::PendingDebounced;
pub use after_publish::AfterPublish;
pub use all_or_nothing::AllOrNothing;
pub use bury::Burial;
pub use cancels::Cancels;
pub use claim::{CLAIM_BATCH, CLAIM_BATCH_BYTES, Restraints};
pub use debounce::DebounceKeys;
pub use debounce::Debounced;
pub use delay::Delays;
pub use delay::{Deferred, parse_waiting, waiting_name};
pub use dependents::Dependencies;
pub use forward::{DeadLetterSink, SendError};
pub use gate::Gates;
pub use gate_cache::KEY_GATE_IDLE_MS;
pub use group_lock::Groups;
pub use group_lock::{GroupLock, HeldLock, LockRead};
pub use held::{Lease, Settled};
pub(crate) use holder::Extra;
pub use holder::GiveBack;
pub use idempotency_keys::IdempotencyKeys;
pub use key_gates::{GateLoad, KeyInFlight};
pub use key_lanes::{KeyLaneList, KeyLanes};
/// The idempotency keys' view, under its former name.
#[deprecated(note = "renamed `IdempotencyKeys`")]
pub type Keys<'a> = IdempotencyKeys<'a>;
pub(crate) use idempotency_keys::Requeued;
pub use idempotency_keys::{KeyState, Published};
pub use landed::InDoubt;
pub use lane_walk::LaneWalk;
pub use members::BatchRead;
pub use members::Batches;
pub(crate) use members::parse as parse_batch;
pub(crate) use members::{Tally, batch_error, callback_bodies, name_callback, unknown_batch};
pub(crate) use turns::{Held, Turns};
// What features write through the core's write loop with tags of their own (not every build
// has such a feature).
#[allow(unused_imports)]
pub(crate) use idempotency_keys::{KeyData, KeyedWrite, created_name};
#[allow(unused_imports)]
pub(crate) use ops::{Failed, Landed};
pub(crate) use ops::{Multi, Op, Part};
pub use outage::{PUBLISH_RETRY_FOR, PublishOptions, Renew};
pub use outcome::TaskOutcome;
pub use parents::{GoneEnd, ParentLook, TAKEN_AS_DEAD, TakenAs};
pub use probe::Probes;
pub use probe::{Head, HeadData, LaneStart, Lanes, LeaseSeen, Probe, Probed};
pub use publish::Outcome;
pub use reads::TaskRead;
pub use record::CANCELLED;
pub use recovery::{Recovery, recovery};
pub use settings::Settings;
pub(crate) use signals::{Look, Waiter, taken_note, waiter_name};
pub use signals::{SIGNALLER_GRACE_MS, Signalled, Signals};
pub use slots::{SlotShare, claim_token, tasks_in as slot_tasks};
pub use start::Start;
pub use step_store::DROP_PER_MULTI;
pub use walk::{WIDEST, WINDOW, Walk, names_task};

use crate::clock::ZkTime;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::feature::{Features, Site};
use crate::layout::Layout;

/// One queue on one ZooKeeper session.
#[derive(Clone)]
pub struct Queue {
    client: zk::Client,
    layout: Layout,
    consumer_id: String,
    settings: Settings,
    /// What the recipes remember in this process (see `recipe`).
    memory: Arc<recipe::Memory>,
    acls: zk::Acls<'static>,
    /// Where dead letters also go, if anywhere.
    dead_letters: Option<Arc<dyn DeadLetterSink>>,
    /// The features its hooks call (see [`crate::feature`]).
    features: Features,
    /// Called after every publish landed (kicks, when `EVENT_BRIDGE_KICK=on`).
    after_publish: Option<Arc<dyn AfterPublish>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("root", &self.layout.root())
            .field("consumer_id", &self.consumer_id)
            .field("session", &self.client.session_id())
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue over `client` with `config`'s root and lease settings.
    pub fn new(client: zk::Client, config: &Config, consumer_id: impl Into<String>) -> Self {
        Queue {
            client,
            layout: Layout::new(&config.root),
            consumer_id: consumer_id.into(),
            settings: Settings::of(config),
            memory: Arc::default(),
            acls: acls(config),
            dead_letters: None,
            features: crate::registered_features(config),
            after_publish: None,
        }
    }

    /// Calls `hook` after every publish landed ([`AfterPublish`]).
    pub fn with_after_publish(mut self, hook: Arc<dyn AfterPublish>) -> Self {
        self.after_publish = Some(hook);
        self
    }

    /// After a publish landed: its hook, if any. Never fails the publish.
    pub(crate) async fn landed(&self) {
        if let Some(hook) = &self.after_publish {
            hook.landed(self).await;
        }
    }

    /// Calls `features`' hooks instead of the registered ones (the list in `features/`, what
    /// [`Queue::new`] gives). A list without a feature turns it off, as far as it joins through
    /// the hooks: without `features::dependencies::Dependencies`, for one, no ending writes
    /// the markers its children wait on, and children published with `after` wait until a
    /// reaper with that feature sees to them; without `features::pause::Pause` nothing is
    /// paused; without `features::concurrency_keys::ConcurrencyKeys`, a task whose concurrency
    /// key no gate can be named after is not buried at claim, and its claim fails.
    pub fn with_features(mut self, features: Features) -> Self {
        self.features = features;
        self
    }

    /// The features whose hooks it calls.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Sends every dead letter to `sink` too, after it is committed under `dead/`.
    pub fn with_dead_letters(mut self, sink: Arc<dyn DeadLetterSink>) -> Self {
        self.dead_letters = Some(sink);
        self
    }

    /// A consumer id for this process: `<prefix>-<random>`.
    pub fn new_consumer_id(prefix: &str) -> String {
        let suffix: String = (0..8).map(|_| fastrand::alphanumeric()).collect();
        format!("{prefix}-{}", suffix.to_lowercase())
    }

    /// The raw client: only the crate's own modules write through it, so that every write of
    /// a holder goes through the fenced operations.
    pub(crate) fn client(&self) -> &zk::Client {
        &self.client
    }

    /// The queue's store as a feature's hooks reach it.
    pub(crate) fn site(&self) -> Site<'_> {
        Site {
            client: &self.client,
            layout: &self.layout,
            acls: self.acls,
            queue: self,
        }
    }

    /// The znode paths under this queue's root.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The id this queue's consumer writes into the leases it creates.
    pub fn consumer_id(&self) -> &str {
        &self.consumer_id
    }

    /// What its operations read of the configuration.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The session's id and password, as ZooKeeper knows them.
    pub fn session(&self) -> &zk::SessionInfo {
        self.client.session()
    }

    /// Whether the client knows its session has ended (expired, closed, refused).
    pub fn session_over(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// Follows the session's state.
    pub fn state_watcher(&self) -> zk::StateWatcher {
        self.client.state_watcher()
    }

    /// How a node of `mode` is created under this queue's ACLs.
    pub(crate) fn created(&self, mode: zk::CreateMode) -> zk::CreateOptions<'static> {
        mode.with_acls(self.acls)
    }

    /// Creates the base paths (the root, `tasks`, `leases`, `dead`, `clock`, …) when missing.
    /// One multi-read finds which are: a create that finds its node is a write all the same
    /// (ZooKeeper logs the failed transaction), and every cold start and command calls this.
    pub async fn ensure_paths(&self) -> Result<()> {
        let all = self.base_paths();
        // A node we may not read (another user's ACL) is tried as a create, as before.
        let found = match self.read_paths(&all).await {
            Ok(found) => found,
            Err(_) => vec![None; all.len()],
        };
        create_missing(self, all, found).await
    }

    /// As [`Queue::ensure_paths`], reading the session's root (`/`: the chroot, when the
    /// connection string names one) in the same request; `false`, creating nothing, when it
    /// is missing. (A cold start so saves the round trip of a separate look at the chroot.)
    pub(crate) async fn ensure_paths_under_root(&self) -> Result<bool> {
        let mut all = vec!["/".to_string()];
        all.extend(self.base_paths());
        let Ok(mut found) = self.read_paths(&all).await else {
            // Something we may not read: the chroot looked at alone, then as before.
            return match self.client.check_stat("/").await {
                Ok(Some(_)) => self.ensure_paths().await.map(|()| true),
                Ok(None) | Err(zk::Error::NoNode) => Ok(false),
                Err(e) => Err(Error::zk("stat", "/", e)),
            };
        };
        if found.remove(0).is_none() {
            return Ok(false);
        }
        all.remove(0);
        create_missing(self, all, found).await.map(|()| true)
    }

    /// Every persistent node the queue needs, parents first: the layout's base paths, and the
    /// znodes the features' start reads read that they have made with them
    /// ([`crate::feature::Feature::made_with`], such as `paused`).
    pub fn base_paths(&self) -> Vec<String> {
        let mut all = self.layout.base_paths();
        let made = self.features().made_with(&self.layout);
        all.extend(made.into_iter().map(|(path, _)| path));
        all
    }

    /// Reads ZooKeeper's time by touching the `clock` znode: as of the answer, so the reading
    /// is never ahead of the server ([`ZkTime::now_ms`]), and as of the request for the latest
    /// it may be ([`ZkTime::latest_ms`]).
    pub async fn server_time(&self) -> Result<ZkTime> {
        let path = self.layout.clock();
        let sent_at = std::time::Instant::now();
        let stat = self
            .client
            .set_data(&path, b"", None)
            .await
            .map_err(|e| Error::zk("set", path, e))?;
        Ok(ZkTime::from_request(stat.mtime, sent_at))
    }

    /// Number of children of `path`, from its stat.
    pub async fn count(&self, path: &str) -> Result<usize> {
        match self.client.check_stat(path).await {
            Ok(stat) => Ok(stat.map_or(0, |s| s.num_children as usize)),
            Err(e) => Err(Error::zk("stat", path, e)),
        }
    }
}

/// The ACLs for the nodes the bridge creates: the authenticated user's only when
/// `ZOOKEEPER_AUTH` is set, open otherwise.
/// Creates those of `all` that `found` says are missing.
async fn create_missing(
    queue: &Queue,
    all: Vec<String>,
    found: Vec<Option<(Vec<u8>, zk::Stat)>>,
) -> Result<()> {
    let paths: Vec<String> = all
        .into_iter()
        .zip(found)
        .filter_map(|(path, read)| read.is_none().then_some(path))
        .collect();
    // A feature's znode holds what it is made with from the start (`paused`: JSON, which a
    // consumer of an earlier version parses).
    let made = queue.features().made_with(&queue.layout);
    let data = |p: &String| -> &'static [u8] {
        (made.iter().find(|(path, _)| path == p)).map_or(b"", |(_, data)| data)
    };
    let creates: Vec<_> = paths
        .iter()
        .map(|p| {
            queue
                .client
                .create(p, data(p), &queue.created(zk::CreateMode::Persistent))
        })
        .collect();
    for (path, created) in paths.iter().zip(futures::future::join_all(creates).await) {
        match created {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(Error::zk("create", path, e)),
        }
    }
    Ok(())
}

fn acls(config: &Config) -> zk::Acls<'static> {
    if config.zookeeper_auth.is_some() {
        zk::Acls::creator_all()
    } else {
        zk::Acls::anyone_all()
    }
}
