//! All-or-nothing publishing, for producers that send a batch over HTTP: every task of the
//! batch (with its idempotency key, when it has one) is created in one multi-op, or none is.
//! A key already taken is no error: its item is answered with the task that has it, and the
//! rest is created; a key given twice in one batch makes one task. A batch is checked before
//! anything is written: ids must differ (`status` and `cancel` by id find one task), a task
//! may wait only for tasks published before it (`after`), and the multi-op must fit in one
//! request, counting what the body does not show: each key's path, where a byte other than
//! ASCII letters, digits, `-` and `_` takes three, and a child's writes for its parents.
//!
//! A task with `after` (a child) is planned as `parents` says, its parents found anew at each
//! try: to its lane, to the dead letters, or waiting under `after/`, its parents checked and
//! its entries made in the same multi-op as the other items. A parent settled or moved
//! meanwhile fails the multi-op, and the batch is tried again.
//!
//! # Fitting one request
//!
//! ZooKeeper drops the connection of a client whose request is one byte over `jute.maxbuffer`
//! (0xfffff by default), which a publisher sees as a lost connection (503 over HTTP, "may or may
//! not have landed"). So a batch's size is counted before it is sent, exactly for our requests
//! (checked against the server: 1 048 575 bytes pass, one more drops the link): 17 bytes of
//! header and end marker, and per create 48 bytes of framing (operation header, three lengths,
//! flags, the `world:anyone` ACL) plus its path with the chroot and its data; a keyed task is two
//! creates. A batch over the limit is refused naming the task where it passes it (413 over
//! HTTP).

use std::collections::{HashMap, HashSet};

use zookeeper_client as zk;

use super::Queue;
use super::debounce::DebounceWrite;
use super::idempotency_keys::{KeyState, KeyedWrite, Published, created_name};
use super::members::Join;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::parents::{ChildPlan, Earlier};
use super::write::{self, Next, Read, Tries, Write};
use crate::error::{Error, Result};
use crate::layout::{Layout, encode_segment};
use crate::task::Envelope;

recipe!(
    /// The all-or-nothing publish (HTTP publishing): every item in one multi-op, or none
    /// (`all_or_nothing`).
    AllOrNothing,
    all_or_nothing
);

/// The most one request to ZooKeeper may carry: a server drops the connection of a client that
/// sends more than its `jute.maxbuffer`, 1 MiB − 1 unless it was changed.
const MAX_REQUEST_BYTES: usize = 0xf_ffff;

/// A request's header (xid and type) and the marker that ends a multi-op.
const MULTI_FRAMING: usize = 8 + 9;

/// What a create adds to a multi-op besides its path and data: the operation's header, the
/// lengths of path, data and ACL list, the flags, and the larger of our two ACLs
/// (`world:anyone`, 23 bytes).
const CREATE_FRAMING: usize = 9 + 4 + 4 + 4 + 23 + 4;

/// What a check adds to a multi-op besides its path: the operation's header, the path's
/// length and the version.
const CHECK_FRAMING: usize = 9 + 4 + 4;

/// What a child's writes are counted at before its parents are found, which they seldom
/// pass: a parent's path below the root (a task waiting under `delayed/` has the longest), a
/// parent's id (a UUID has 36 bytes), and what a dead child's record adds to its body.
const PARENT_PATH: usize = 64;
const PARENT_ID: usize = 64;
const RECORD_FIELDS: usize = 1_024;

/// What one item of a batch writes, or where its answer comes from.
enum Item {
    Plain(Vec<u8>),
    Keyed(KeyedWrite),
    /// Its key is taken by a task that existed before the batch.
    Existing(Published),
    /// Its key is that of an earlier item of the batch (its index).
    SameAs(usize),
    /// Debounced: written to `debounce/<key>` (created, or rewritten at the version read).
    Debounced(DebounceWrite),
    /// With `after`: to its lane, to the dead letters, or waiting for its parents.
    Child(ChildPlan),
}

impl AllOrNothing<'_> {
    /// Publishes `envelopes` in one multi-op: all of them, or (on an error) none. Each
    /// answer says whether the item made a task, met its key taken, or (with `after`) waits
    /// for its parents or went to the dead letters with one.
    pub async fn publish_batch(self, envelopes: &[Envelope]) -> Result<Vec<Published>> {
        self.check_batch(envelopes)?;
        super::parents::check_order(envelopes)?;
        let envelopes = &*self.with_due_times(envelopes).await?;
        match self.try_batch(envelopes).await? {
            Some(published) => Ok(published),
            None => Err(Error::Unreadable {
                path: self.layout().keys(),
                problem: "the batch's keys or parents kept changing while it was published; \
                          try again"
                    .into(),
            }),
        }
    }

    /// [`AllOrNothing::publish_batch`] of checked `envelopes` with their due times; `None` when
    /// their keys kept changing (taken, or a debounced key published or fired), or their
    /// parents (settled or moved), through the tries.
    pub(super) async fn try_batch(self, envelopes: &[Envelope]) -> Result<Option<Vec<Published>>> {
        let publish = PublishBatch {
            envelopes,
            joining: envelopes.iter().any(|e| e.batch.is_some()),
            items: Vec::new(),
            joins: Vec::new(),
            prefixes: Vec::new(),
        };
        write::run(&self, publish).await
    }

    /// After a batch's multi-op landed: its keys named with their tasks, the letters of its
    /// children that died with a parent sent to the dead-letter sink.
    async fn batch_landed(self, items: &[Item], names: &[Option<String>]) -> Result<()> {
        let named: Vec<(&KeyedWrite, &str)> = items
            .iter()
            .zip(names)
            .filter_map(|(item, name)| match (item, name) {
                (Item::Keyed(write), Some(name)) => Some((write, name.as_str())),
                _ => None,
            })
            .collect();
        if !named.is_empty() {
            self.name_keys(&named).await?;
        }
        for item in items {
            if let Item::Child(ChildPlan::Dead(dead)) = item {
                dead.landed(&self).await;
            }
        }
        Ok(())
    }

    /// Catches up after `failed` failed the multi-op of `items`, for the next try: a key
    /// taken, a debounce key published or fired, a parent settled or moved or a child
    /// registered with it (all looked at again), a base path missing (made). A child whose id
    /// waits or died already, or a parent of the batch whose id has children already, refuses
    /// the batch.
    async fn batch_failed(
        self,
        envelopes: &[Envelope],
        items: &[Item],
        failed: Failed<(usize, Part)>,
    ) -> Result<()> {
        let (i, part) = failed.tag;
        if let (Part::Parent, zk::Error::NodeExists, Item::Child(plan)) =
            (part, &failed.error, &items[i])
            && let Some(refused) = plan.marker_taken(&failed.path)
        {
            return Err(refused);
        }
        let refuse = |problem: &str| Error::Unpublishable {
            item: i + 1,
            problem: format!("a task with id {} {problem}", envelopes[i].id),
        };
        match (part, &failed.error) {
            (Part::Blocked, zk::Error::NodeExists) => Err(refuse("already waits for its parents")),
            (Part::Record, zk::Error::NodeExists) => Err(refuse("is among the dead letters")),
            (_, zk::Error::NodeExists | zk::Error::BadVersion) => Ok(()),
            (_, zk::Error::NoNode) => self.ensure_paths().await,
            _ => Err(failed.unexpected("publish batch")),
        }
    }

    /// Refuses `envelopes` before anything is written ([`Error::Unpublishable`], naming the
    /// task) when one is not publishable ([`Envelope::check_publishable`], or a feature's check of
    /// its fields: [`crate::feature::Features::check_publish`]), two share an id,
    /// or their multi-op would be more than one request carries (1 MiB − 1, ZooKeeper's default
    /// `jute.maxbuffer`; a key's path counts, and a child's writes for its parents). An item
    /// repeating an earlier one's key writes nothing; one whose key turns out taken is counted
    /// all the same.
    pub fn check_batch(&self, envelopes: &[Envelope]) -> Result<()> {
        let refuse = |i: usize, problem: String| Error::Unpublishable {
            item: i + 1,
            problem,
        };
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut keys = HashSet::new();
        let mut debounced = HashSet::new();
        let mut total = MULTI_FRAMING;
        for (i, envelope) in envelopes.iter().enumerate() {
            (envelope.check_publishable())
                .and_then(|()| self.features().check_publish(envelope))
                .map_err(|p| refuse(i, p))?;
            if let Some(first) = ids.insert(&envelope.id, i + 1) {
                let id = &envelope.id;
                let id = crate::task::shown(id);
                let problem = format!("id {id} is also task {first}'s: {UNIQUE_IDS}");
                return Err(refuse(i, problem));
            }
            if let Some(debounce) = &envelope.debounce
                && !debounced.insert(debounce.key.as_str())
            {
                let key = &debounce.key;
                let problem = format!(
                    "debounce_key {} is also an earlier task's: one a batch",
                    crate::task::shown(key)
                );
                return Err(refuse(i, problem));
            }
            if let Some(key) = &envelope.idempotency_key
                && !keys.insert(key.as_str())
            {
                continue;
            }
            let bytes = self
                .publish_bytes(envelope)
                .map_err(|e| refuse(i, e.to_string()))?;
            total += bytes;
            if total > MAX_REQUEST_BYTES {
                return Err(refuse(i, over_request(bytes, total)));
            }
        }
        Ok(())
    }

    /// What publishing `envelope` adds to a multi-op, as [`AllOrNothing::publish_bytes`];
    /// more than a request carries when it cannot be told (it will not serialize).
    pub(super) fn run_bytes(&self, envelope: &Envelope) -> usize {
        self.publish_bytes(envelope).unwrap_or(usize::MAX)
    }

    /// Whether a multi-op whose operations add `bytes` fits in one request.
    pub(super) fn fits(&self, bytes: usize) -> bool {
        bytes.saturating_add(MULTI_FRAMING) <= MAX_REQUEST_BYTES
    }

    /// The bytes publishing `envelope` adds to a multi-op: its task's create and, with an
    /// idempotency key, its key's, their paths as the server gets them (chroot included); for
    /// a child, the most its plan may write ([`AllOrNothing::child_bytes`]).
    fn publish_bytes(&self, envelope: &Envelope) -> Result<usize> {
        let chroot = self.client().path().trim_end_matches('/').len();
        let create = |path: &str, data: &[u8]| CREATE_FRAMING + chroot + path.len() + data.len();
        let prefix = self.layout().lane_prefix(&envelope.lane());
        Ok(match envelope.idempotency_key.as_deref() {
            None if !envelope.after.is_empty() => {
                self.child_bytes(envelope, envelope.to_bytes()?.len(), chroot)
            }
            None => create(&prefix, &envelope.to_bytes()?),
            Some(key) => {
                let write = self.idempotency_keys().keyed_write(envelope, key)?;
                create(&write.key_path, &write.unnamed) + create(&prefix, &write.body)
            }
        })
    }

    /// The most a child (`envelope`, whose body is `body` bytes) may add to a multi-op under
    /// a chroot of `chroot` bytes: waiting, its node and for each parent a check, its marker
    /// and its entry (the parent's id also in the body's `after` and `waiting_on`); dead, its
    /// record. Parents are counted at [`PARENT_PATH`] and [`PARENT_ID`], as they are not
    /// found yet.
    fn child_bytes(&self, envelope: &Envelope, body: usize, chroot: usize) -> usize {
        let layout = self.layout();
        let child = encode_segment(&envelope.id).len();
        let markers = chroot + layout.dependents().len() + 1;
        let per_parent = |key: &String| {
            let id = encode_segment(key).len().max(PARENT_ID);
            let check = CHECK_FRAMING + chroot + layout.root().len() + PARENT_PATH;
            check + 2 * (CREATE_FRAMING + markers + id) + 1 + child + 2 * (id + 3)
        };
        let keys: HashSet<&String> = envelope.after.iter().collect();
        let parents: usize = keys.into_iter().map(per_parent).sum();
        let node = CREATE_FRAMING + chroot + layout.blocked(&envelope.id).len() + body;
        let name = Layout::blocked_name(&envelope.id);
        let dead = CREATE_FRAMING + chroot + layout.dead_letter(&name).len() + body;
        (node + parents).max(dead + RECORD_FIELDS)
    }

    /// What each envelope of a batch writes, its key looked up first. A child is planned
    /// with the items before it, by id, as a later child that names them takes them.
    async fn batch_items(self, envelopes: &[Envelope]) -> Result<Vec<Item>> {
        let mut taken = self.taken_keys(envelopes).await?;
        let mut items: Vec<Item> = Vec::with_capacity(envelopes.len());
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        let mut earlier: HashMap<String, Earlier> = HashMap::new();
        for (i, envelope) in envelopes.iter().enumerate() {
            let item = if let Some(debounce) = &envelope.debounce {
                let write = self.debounce().debounce_write(envelope, debounce).await;
                Item::Debounced(write.map_err(|e| as_item(e, i))?)
            } else if !envelope.after.is_empty() {
                Item::Child(self.dependencies().plan_child(envelope, &earlier).await?)
            } else if let Some(key) = envelope.idempotency_key.as_deref() {
                if let Some(first) = first_with.get(key) {
                    Item::SameAs(*first)
                } else {
                    first_with.insert(key, i);
                    match taken.remove(key) {
                        Some(existing) => Item::Existing(existing),
                        None => Item::Keyed(self.idempotency_keys().keyed_write(envelope, key)?),
                    }
                }
            } else {
                Item::Plain(envelope.to_bytes()?)
            };
            let parent = as_parent(&item, &envelope.id, envelopes, &earlier);
            earlier.insert(envelope.id.clone(), parent);
            items.push(item);
        }
        Ok(items)
    }

    /// The idempotency keys of `envelopes` that are taken, each with the task that has it:
    /// the keys read in one multi-read, and only a taken one looked at again.
    async fn taken_keys(self, envelopes: &[Envelope]) -> Result<HashMap<String, Published>> {
        let mut keys: Vec<&str> = (envelopes.iter())
            .filter(|e| e.debounce.is_none())
            .filter_map(|e| e.idempotency_key.as_deref())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let paths: Vec<String> = keys.iter().map(|k| self.layout().key(k)).collect();
        let found = self.read_paths(&paths).await?;
        let mut taken = HashMap::new();
        for ((key, path), read) in keys.into_iter().zip(&paths).zip(found) {
            if read.is_none() {
                continue;
            }
            if let Some(existing) = self.idempotency_keys().existing(path).await? {
                taken.insert(key.to_string(), existing);
            }
        }
        Ok(taken)
    }
}

/// A batch published in one multi-op (see [`AllOrNothing::try_batch`]): its items, the
/// batches they join and their lanes, read anew at each try. Keys taken or base paths made
/// meanwhile take a few tries; batches' counters and parents, which other writers change, more.
struct PublishBatch<'e> {
    envelopes: &'e [Envelope],
    /// Whether an item joins a batch: a try that failed pauses before the next.
    joining: bool,
    items: Vec<Item>,
    joins: Vec<Join>,
    /// The tail of each item's lane.
    prefixes: Vec<String>,
}

impl Write for PublishBatch<'_> {
    type Tag = (usize, Part);
    type Out = Option<Vec<Published>>;
    const WHAT: &'static str = "publish batch";
    const TRIES: Tries = Tries::Contended;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Self::Out>> {
        let envelopes = self.envelopes;
        self.items = queue.all_or_nothing().batch_items(envelopes).await?;
        // The batches its items join: their totals raised in the same multi-op.
        self.joins = queue.batches().batch_joins(envelopes).await?;
        // Each item's task goes to the tail of its lane.
        let lanes: Vec<_> = envelopes.iter().map(Envelope::lane).collect();
        queue.key_lanes().ensure_lanes(&lanes).await?;
        self.prefixes = (lanes.iter())
            .map(|l| queue.layout().lane_prefix(l))
            .collect();
        if batch_multi(&self.items, &self.prefixes, &self.joins).is_empty() {
            let items = std::mem::take(&mut self.items);
            return Ok(Read::Stop(Some(answers(envelopes, items, &[]))));
        }
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, (usize, Part)>) {
        *multi = batch_multi(&self.items, &self.prefixes, &self.joins);
    }

    async fn landed(self, queue: &Queue, landed: Landed<(usize, Part)>) -> Result<Self::Out> {
        let mut names = Vec::with_capacity(self.items.len());
        for (i, item) in self.items.iter().enumerate() {
            names.push(match item {
                Item::Plain(_) | Item::Keyed(_) | Item::Child(ChildPlan::Lane(_)) => {
                    let created = landed.result((i, Part::NewTask));
                    Some(created_name(created, &self.prefixes[i])?)
                }
                _ => None,
            });
        }
        let all = queue.all_or_nothing();
        all.batch_landed(&self.items, &names).await?;
        Ok(Some(answers(self.envelopes, self.items, &names)))
    }

    async fn failed(
        &mut self,
        queue: &Queue,
        failed: Failed<(usize, Part)>,
    ) -> Result<Next<Self::Out>> {
        let all = queue.all_or_nothing();
        all.batch_failed(self.envelopes, &self.items, failed)
            .await?;
        Ok(if self.joining {
            Next::Pause
        } else {
            Next::Again
        })
    }

    /// Its keys kept changing (taken, or a debounced key published or fired), or its parents
    /// (settled or moved), through the tries.
    fn exhausted(&self) -> Result<Self::Out> {
        Ok(None)
    }
}

/// The multi-op of a batch: each item's writes, tagged with its index (a marker several
/// children wait on created once), then the batches its items join.
fn batch_multi<'a>(
    items: &'a [Item],
    prefixes: &'a [String],
    joins: &'a [Join],
) -> Multi<'a, (usize, Part)> {
    let mut multi = Multi::new();
    let mut markers = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Plain(body) | Item::Child(ChildPlan::Lane(body)) => {
                multi.push((i, Part::NewTask), Op::CreateSequential(&prefixes[i], body));
            }
            Item::Keyed(write) => {
                multi
                    .push(
                        (i, Part::IdempotencyKey),
                        Op::Create(&write.key_path, &write.unnamed),
                    )
                    .push(
                        (i, Part::NewTask),
                        Op::CreateSequential(&prefixes[i], &write.body),
                    );
            }
            Item::Debounced(write) => write.push(&mut multi, |part| (i, part)),
            Item::Child(ChildPlan::Dead(dead)) => dead.push(&mut multi, (i, Part::Record)),
            Item::Child(ChildPlan::Wait(wait)) => wait.push(&mut multi, i, &mut markers),
            Item::Existing(_) | Item::SameAs(_) => {}
        }
    }
    for join in joins {
        multi.push(
            (join.first, Part::Batch),
            Op::Set(&join.path, &join.data, join.version),
        );
    }
    multi
}

/// What `item` (the item with envelope id `id`) is to a later child that names it, given
/// what the items before it are (`earlier`).
fn as_parent(
    item: &Item,
    id: &str,
    envelopes: &[Envelope],
    earlier: &HashMap<String, Earlier>,
) -> Earlier {
    match item {
        Item::Plain(_) | Item::Keyed(_) => Earlier::Made(id.to_string()),
        Item::Child(plan) => plan.as_earlier(id),
        Item::Existing(Published::Existing {
            task: Some(task), ..
        }) => Earlier::Elsewhere(task.clone()),
        Item::Existing(Published::Existing { id, .. }) => Earlier::Elsewhere(id.clone()),
        Item::Existing(_) => Earlier::Elsewhere(id.to_string()),
        Item::SameAs(first) => earlier[&envelopes[*first].id].clone(),
        Item::Debounced(_) => Earlier::Debounced,
    }
}

/// `error`, refusing an item, as refusing item `i` (0-based) of a batch.
fn as_item(error: Error, i: usize) -> Error {
    match error {
        Error::Unpublishable { problem, .. } => Error::Unpublishable {
            item: i + 1,
            problem,
        },
        other => other,
    }
}

/// Why ids must differ within a publish.
const UNIQUE_IDS: &str =
    "ids must be unique within a publish (status and cancel by id would find only one task)";

/// Why a task does not fit: `bytes` its own part of the request, `total` the request with it.
fn over_request(bytes: usize, total: usize) -> String {
    if bytes + MULTI_FRAMING > MAX_REQUEST_BYTES {
        format!(
            "this task is {bytes} bytes in a ZooKeeper request (its body, its idempotency key's \
             path and data), over the {MAX_REQUEST_BYTES} one request may carry"
        )
    } else {
        format!(
            "with this task the publish is {total} bytes in one ZooKeeper request (bodies, \
             idempotency keys' paths and data), over the {MAX_REQUEST_BYTES} a request may \
             carry: publish fewer tasks at a time"
        )
    }
}

/// Each item's answer, from the names the multi-op created (`None` for items it did not).
fn answers(envelopes: &[Envelope], items: Vec<Item>, names: &[Option<String>]) -> Vec<Published> {
    let name = |i: usize| names.get(i).cloned().flatten();
    let mut out: Vec<Published> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let answer = match item {
            Item::Plain(_) | Item::Keyed(_) | Item::Child(ChildPlan::Lane(_)) => {
                Published::Created {
                    id: envelopes[i].id.clone(),
                    task: name(i).unwrap_or_default(),
                }
            }
            Item::Child(ChildPlan::Dead(dead)) => Published::Buried {
                id: envelopes[i].id.clone(),
                dead_letter: dead.name,
                reason: dead.reason,
            },
            Item::Child(ChildPlan::Wait(wait)) => Published::Blocked {
                id: envelopes[i].id.clone(),
                waiting_on: wait.waiting_on,
            },
            Item::Existing(existing) => existing,
            Item::Debounced(write) => Published::Debounced {
                id: envelopes[i].id.clone(),
                key: write.key,
                replaced: write.pending.map(|(_, id)| id),
            },
            Item::SameAs(first) => match &out[first] {
                Published::Created { id, task } => Published::Existing {
                    id: id.clone(),
                    task: Some(task.clone()),
                    state: KeyState::Pending,
                },
                existing => existing.clone(),
            },
        };
        out.push(answer);
    }
    out
}
