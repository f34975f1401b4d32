//! All-or-nothing publishing, for producers that send a batch over HTTP: every task of the
//! batch (with its idempotency key, when it has one) is created in one multi-op, or none is.
//! A key already taken is no error: its item is answered with the task that has it, and the
//! rest is created; a key given twice in one batch makes one task. A batch is checked before
//! anything is written: ids must differ (`status` and `cancel` by id find one task), and the
//! multi-op must fit in one request, counting what the body does not show: each key's path,
//! where a byte other than ASCII letters, digits, `-` and `_` takes three.

use std::collections::{HashMap, HashSet};

use zookeeper_client as zk;

use super::Queue;
use super::keys::{KeyState, KeyedWrite, Published, created_name};
use super::ops::{Multi, Op, Part};
use crate::error::{Error, Result};
use crate::task::Envelope;

/// Times a batch is tried again when a key was taken or a base path made meanwhile.
const TRIES: usize = 3;

/// The most one request to ZooKeeper may carry: a server drops the connection of a client that
/// sends more than its `jute.maxbuffer`, 1 MiB − 1 unless it was changed.
const MAX_REQUEST_BYTES: usize = 0xf_ffff;

/// A request's header (xid and type) and the marker that ends a multi-op.
const MULTI_FRAMING: usize = 8 + 9;

/// What a create adds to a multi-op besides its path and data: the operation's header, the
/// lengths of path, data and ACL list, the flags, and the larger of our two ACLs
/// (`world:anyone`, 23 bytes).
const CREATE_FRAMING: usize = 9 + 4 + 4 + 4 + 23 + 4;

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
}

struct DebounceWrite {
    path: String,
    key: String,
    body: Vec<u8>,
    /// The pending node's version and envelope id, when one was there.
    pending: Option<(i32, String)>,
}

impl Queue {
    /// Publishes `envelopes` in one multi-op: all of them, or (on an error) none. Each
    /// answer says whether the item made a task or met its key taken.
    pub async fn publish_batch(&self, envelopes: &[Envelope]) -> Result<Vec<Published>> {
        self.check_batch(envelopes)?;
        let envelopes = &*self.with_due_times(envelopes).await?;
        match self.try_batch(envelopes).await? {
            Some(published) => Ok(published),
            None => Err(Error::Unreadable {
                path: self.layout().keys(),
                problem: "the batch's keys kept changing while it was published; try again".into(),
            }),
        }
    }

    /// [`Queue::publish_batch`] of checked `envelopes` with their due times; `None` when
    /// their keys kept changing (taken, or a debounced key published or fired) through
    /// [`TRIES`] tries.
    pub(super) async fn try_batch(&self, envelopes: &[Envelope]) -> Result<Option<Vec<Published>>> {
        let joining = envelopes.iter().any(|e| e.batch.is_some());
        let tries = TRIES + if joining { super::members::TRIES } else { 0 };
        for attempt in 0..tries {
            if joining && attempt > 0 {
                super::members::batch_backoff(attempt).await;
            }
            let items = self.batch_items(envelopes).await?;
            // The batches its items join: their totals raised in the same multi-op.
            let joins = self.batch_joins(envelopes).await?;
            // Each item's task goes to the tail of its lane.
            let prefixes: Vec<String> = envelopes
                .iter()
                .map(|e| self.layout().lane_prefix(e.priority))
                .collect();
            // Each operation tagged with its item's index.
            let mut multi = Multi::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Item::Plain(body) => {
                        multi.push((i, Part::NewTask), Op::CreateSequential(&prefixes[i], body));
                    }
                    Item::Keyed(write) => {
                        multi
                            .push((i, Part::Key), Op::Create(&write.key_path, &write.unnamed))
                            .push(
                                (i, Part::NewTask),
                                Op::CreateSequential(&prefixes[i], &write.body),
                            );
                    }
                    Item::Debounced(write) => match &write.pending {
                        Some((version, _)) => {
                            multi.push(
                                (i, Part::Waiting),
                                Op::Set(&write.path, &write.body, *version),
                            );
                        }
                        None => {
                            multi.push((i, Part::Waiting), Op::Create(&write.path, &write.body));
                        }
                    },
                    Item::Existing(_) | Item::SameAs(_) => {}
                }
            }
            for join in &joins {
                multi.push(
                    (join.first, Part::Batch),
                    Op::Set(&join.path, &join.data, join.version),
                );
            }
            if multi.is_empty() {
                return Ok(Some(answers(envelopes, items, &[])));
            }
            match self.commit("publish batch", &multi).await? {
                Ok(results) => {
                    let mut names = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        names.push(match item {
                            Item::Plain(_) | Item::Keyed(_) => {
                                let created = multi.result(&results, (i, Part::NewTask));
                                Some(created_name(created, &prefixes[i])?)
                            }
                            Item::Existing(_) | Item::SameAs(_) | Item::Debounced(_) => None,
                        });
                    }
                    let named: Vec<(&KeyedWrite, &str)> = items
                        .iter()
                        .zip(&names)
                        .filter_map(|(item, name)| match (item, name) {
                            (Item::Keyed(write), Some(name)) => Some((write, name.as_str())),
                            _ => None,
                        })
                        .collect();
                    if !named.is_empty() {
                        self.name_keys(&named).await?;
                    }
                    return Ok(Some(answers(envelopes, items, &names)));
                }
                Err(failed) => match failed.error {
                    // A key was taken meanwhile, or a debounce key published or fired: look
                    // at them again.
                    zk::Error::NodeExists | zk::Error::BadVersion => continue,
                    zk::Error::NoNode => self.ensure_paths().await?,
                    _ => return Err(failed.unexpected("publish batch")),
                },
            }
        }
        Ok(None)
    }

    /// Refuses `envelopes` before anything is written ([`Error::Unpublishable`], naming the
    /// task) when one is not publishable ([`Envelope::check_publishable`]), two share an id,
    /// or their multi-op would be more than one request carries (1 MiB − 1, ZooKeeper's default
    /// `jute.maxbuffer`; a key's path counts). An item repeating an earlier one's key writes
    /// nothing; one whose key turns out taken is counted all the same.
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
            envelope.check_publishable().map_err(|p| refuse(i, p))?;
            if let Some(first) = ids.insert(&envelope.id, i + 1) {
                let id = &envelope.id;
                let problem = format!("id {id:?} is also task {first}'s: {UNIQUE_IDS}");
                return Err(refuse(i, problem));
            }
            if let Some(debounce) = &envelope.debounce
                && !debounced.insert(debounce.key.as_str())
            {
                let key = &debounce.key;
                let problem =
                    format!("debounce_key {key:?} is also an earlier task's: one a batch");
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

    /// The bytes publishing `envelope` adds to a multi-op: its task's create and, with an
    /// idempotency key, its key's, their paths as the server gets them (chroot included).
    fn publish_bytes(&self, envelope: &Envelope) -> Result<usize> {
        let chroot = self.client().path().trim_end_matches('/').len();
        let create = |path: &str, data: &[u8]| CREATE_FRAMING + chroot + path.len() + data.len();
        let prefix = self.layout().lane_prefix(envelope.priority);
        Ok(match envelope.idempotency_key.as_deref() {
            None => create(&prefix, &envelope.to_bytes()?),
            Some(key) => {
                let write = self.keyed_write(envelope, key)?;
                create(&write.key_path, &write.unnamed) + create(&prefix, &write.body)
            }
        })
    }

    /// What each envelope of a batch writes, its key looked up first.
    async fn batch_items(&self, envelopes: &[Envelope]) -> Result<Vec<Item>> {
        let mut items = Vec::with_capacity(envelopes.len());
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        for (i, envelope) in envelopes.iter().enumerate() {
            if let Some(debounce) = &envelope.debounce {
                items.push(Item::Debounced(
                    self.debounce_write(envelope, &debounce.key).await?,
                ));
                continue;
            }
            let Some(key) = envelope.idempotency_key.as_deref() else {
                items.push(Item::Plain(envelope.to_bytes()?));
                continue;
            };
            if let Some(first) = first_with.get(key) {
                items.push(Item::SameAs(*first));
                continue;
            }
            first_with.insert(key, i);
            items.push(Item::Keyed(self.keyed_write(envelope, key)?));
        }
        self.taken_keys(items).await
    }

    /// `items` with each keyed one whose key is taken answered by the task that has it: the
    /// keys read in one multi-read, and only a taken one looked at again.
    async fn taken_keys(&self, mut items: Vec<Item>) -> Result<Vec<Item>> {
        let (keyed, paths): (Vec<usize>, Vec<String>) = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item {
                Item::Keyed(write) => Some((i, write.key_path.clone())),
                _ => None,
            })
            .unzip();
        let found = self.read_paths(&paths).await?;
        for ((i, path), read) in keyed.into_iter().zip(&paths).zip(found) {
            if read.is_none() {
                continue;
            }
            if let Some(existing) = self.existing(path).await? {
                items[i] = Item::Existing(existing);
            }
        }
        Ok(items)
    }
}

impl Queue {
    /// What a debounced item of a batch writes: its envelope at `debounce/<key>`, over what is
    /// pending there.
    async fn debounce_write(&self, envelope: &Envelope, key: &str) -> Result<DebounceWrite> {
        let path = self.layout().debounced(key);
        let pending = match self.client().get_data(&path).await {
            Ok((data, stat)) => Some((stat.version, super::debounce::pending_id(&data))),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(Error::zk("get", path, e)),
        };
        Ok(DebounceWrite {
            path,
            key: key.to_string(),
            body: envelope.to_bytes()?,
            pending,
        })
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
            Item::Plain(_) | Item::Keyed(_) => Published::Created {
                id: envelopes[i].id.clone(),
                task: name(i).unwrap_or_default(),
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
