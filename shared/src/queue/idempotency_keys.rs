//! Idempotency keys at publish: a publish with a key creates `keys/<key>` and the task in one
//! multi-op, so of two producers racing with one key exactly one creates a task; the other
//! gets the task that has it. What a keyed task's end does to its key (marked completed and
//! filed by when it expires, or deleted so the key may be published again), and the reaper's
//! sweep of keys past their window, are the feature's (`features/idempotency_keys/`), through
//! the core's end and sweep hooks.
//!
//! A task's envelope names its key, but the key is the task's only while its data names the
//! task's id and it is not completed: once the task died, another task may have taken the
//! key. A redrive takes the key again in the multi-op that queues the task, or, when another
//! task has it, queues nothing ([`crate::dead::redrive()`]).
//!
//! The task's name is known only from the keyed publish's answer, so it goes into the key with a
//! second write; a publisher that meets a key without a name waits for it (up to a second). While
//! a task holds its key only that naming write changes it (version 0 to 1). A publish that meets
//! a completed key past its window deletes it and publishes (`idempotency_key_expiry.rs`), so a
//! publish after the window never waits for the sweep.
//!
//! # Costs
//!
//! A keyed publish adds the key's create to the task's multi-op, and the naming write after
//! it. A task without a key costs nothing more anywhere.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::Queue;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::write::{self, Next, Read, Tries, Write};
use crate::error::{Error, Result};
use crate::layout;
use crate::task::Envelope;

recipe!(
    /// Idempotency keys at publish: taking one, and a key past its window met by a publish
    /// (`idempotency_keys`, `idempotency_key_expiry`).
    IdempotencyKeys,
    idempotency_keys
);

/// How long a publish that met a taken key waits for the winner to write its task's name.
const NAME_WAIT: Duration = Duration::from_millis(50);
const NAME_TRIES: usize = 20;

/// What a keyed publish writes (see [`IdempotencyKeys::keyed_write`]).
pub(crate) struct KeyedWrite {
    pub(crate) key_path: String,
    pub(crate) unnamed: Vec<u8>,
    pub(crate) body: Vec<u8>,
    id: String,
}

/// `keys/<key>`'s data.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KeyData {
    /// The id of the task that has the key.
    pub(crate) id: String,
    /// Its name, written right after the create (a multi-op cannot know it before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    /// When the task completed (the completing consumer's clock, ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completed_at: Option<i64>,
}

impl KeyData {
    /// When the key in `bytes` was completed, if it was (and is readable).
    pub(crate) fn completed_at_in(bytes: &[u8]) -> Option<i64> {
        serde_json::from_slice::<KeyData>(bytes).ok()?.completed_at
    }

    /// Whether a key whose task completed at `completed_at` (ms since the epoch) is past its
    /// `window` by this machine's clock.
    pub(crate) fn past_window(completed_at: i64, window: Duration) -> bool {
        let window = crate::lease::millis(window);
        completed_at.saturating_add(window) <= chrono::Utc::now().timestamp_millis()
    }
}

impl KeyData {
    /// The data of `write`'s key once its task is named `task`.
    pub(super) fn named(write: &KeyedWrite, task: &str) -> Self {
        KeyData {
            id: write.id.clone(),
            task: Some(task.to_string()),
            completed_at: None,
        }
    }
}

/// Where the task that has a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyState {
    /// In its lane, waiting for a consumer.
    Pending,
    /// Held by a consumer.
    Leased,
    /// It left `tasks/` neither completed nor dead: it waits out a backoff, or came back under
    /// a new name.
    Waiting,
    /// Completed; its key is kept until it expires.
    Completed,
}

impl KeyState {
    /// The state of the task that has the key.
    pub fn state(self) -> crate::state::State {
        use crate::state::State;
        match self {
            KeyState::Pending => State::Pending,
            KeyState::Leased => State::Leased,
            KeyState::Waiting => State::Waiting,
            KeyState::Completed => State::Completed,
        }
    }

    /// The state's name, as the JSON answers spell it ([`crate::state::State::name`]).
    pub fn as_str(self) -> &'static str {
        self.state().name()
    }
}

/// What a redrive of a dead letter did.
#[derive(Debug)]
pub(crate) enum Requeued {
    /// Its task is back in the queue under this name.
    Created(String),
    /// Its idempotency key belongs to another task now, as a publish would answer.
    KeyTaken(Published),
}

/// What a publish did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "published", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Published {
    /// A new task.
    Created {
        /// The envelope id.
        id: String,
        /// The task znode's name.
        task: String,
    },
    /// Its idempotency key was taken: nothing was created. The task that has the key (its
    /// name is unknown only if its publisher died between its two writes).
    Existing {
        /// The envelope id of the task that has the key.
        id: String,
        /// That task's name.
        task: Option<String>,
        /// Where that task is.
        state: KeyState,
    },
    /// Published debounced: it waits under its debounce key (its task is made when the
    /// period ends), having replaced the pending envelope `replaced` when one was there.
    Debounced {
        /// The envelope id.
        id: String,
        /// The debounce key it waits under.
        key: String,
        /// The id of the envelope it replaced, if any.
        replaced: Option<String>,
    },
    /// Published with `after`: it waits under `after/<id>` for the parents (ids) in
    /// `waiting_on`, and goes to its lane when they are settled.
    Blocked {
        /// The envelope id.
        id: String,
        /// The parents' ids it still waits for.
        waiting_on: Vec<String>,
    },
    /// Published with `after`, a parent already dead and the task failing with it: it went
    /// straight to the dead letters as `dead_letter`.
    Buried {
        /// The envelope id.
        id: String,
        /// The dead letter's name.
        dead_letter: String,
        /// Why: the dead parent.
        reason: String,
    },
}

impl Published {
    /// The task's name: the new one, or the one that had the key.
    pub fn task(&self) -> Option<&str> {
        match self {
            Published::Created { task, .. } => Some(task),
            Published::Existing { task, .. } => task.as_deref(),
            Published::Debounced { .. } | Published::Blocked { .. } | Published::Buried { .. } => {
                None
            }
        }
    }
}

impl Queue {
    /// The idempotency keys' view, under its former name.
    #[deprecated(note = "renamed `Queue::idempotency_keys`")]
    pub fn keys(&self) -> IdempotencyKeys<'_> {
        self.idempotency_keys()
    }
}

impl IdempotencyKeys<'_> {
    pub(super) async fn publish_one(self, envelope: &Envelope) -> Result<Published> {
        if !envelope.after.is_empty() {
            envelope
                .check_publishable()
                .map_err(|problem| Error::Unpublishable { item: 1, problem })?;
            return self.dependencies().publish_child(envelope).await;
        }
        // An empty id, a key too long (its requests would drop the connection), a
        // concurrency key no gate can be named after: refused first. (A body within a task's
        // limit and a key within its own always fit one request, so this costs no
        // serialization.)
        envelope
            .check_publishable()
            .map_err(|problem| Error::Unpublishable { item: 1, problem })?;
        if let Some(batch) = &envelope.batch {
            let mut one = self
                .batches()
                .publish_members(std::slice::from_ref(envelope), batch)
                .await?;
            return Ok(one.remove(0));
        }
        if let Some(debounce) = &envelope.debounce {
            let done = self
                .debounce()
                .publish_debounced(envelope, debounce)
                .await?;
            return Ok(Published::Debounced {
                id: envelope.id.clone(),
                key: debounce.key.clone(),
                replaced: match done {
                    super::Debounced::Replaced { previous } => Some(previous),
                    _ => None,
                },
            });
        }
        match &envelope.idempotency_key {
            Some(key) => self.publish_keyed(envelope, key).await,
            None => {
                let lane = self.key_lanes().lane_for(envelope).await?;
                Ok(Published::Created {
                    id: envelope.id.clone(),
                    task: self.publish_in(&lane, &envelope.to_bytes()?).await?,
                })
            }
        }
    }

    async fn publish_keyed(self, envelope: &Envelope, key: &str) -> Result<Published> {
        let write = self.keyed_write(envelope, key)?;
        let prefix = self
            .layout()
            .lane_prefix(&self.key_lanes().lane_for(envelope).await?);
        write::run(&self, PublishKeyed { write, prefix }).await
    }

    /// Queues a dead letter's task again (the letter read at `dead` at `version`): `body` as
    /// it is, or, for `keyed` (its envelope and idempotency key), the envelope with its key taken
    /// again, in one multi-op with the letter's removal. The letter goes first, so a letter
    /// redriven or purged meanwhile fails it before the key is looked at. `None` when the letter
    /// went meanwhile (redriven or purged by someone else); [`Requeued::KeyTaken`] when another
    /// task has the key (published after this one died): nothing is written.
    pub(crate) async fn redrive(
        self,
        body: &[u8],
        keyed: Option<(&Envelope, &str)>,
        dead: &str,
        version: i32,
    ) -> Result<Option<Requeued>> {
        let write = keyed.map(|(e, key)| self.keyed_write(e, key)).transpose()?;
        let body = write.as_ref().map_or(body, |w| &w.body[..]);
        // Back to the tail of the lane it was published in.
        let prefix = self
            .layout()
            .lane_prefix(&self.key_lanes().lane_of_body(body).await?);
        let batch = match crate::task::parse(body) {
            crate::task::Body::Envelope(e) => e.batch,
            _ => None,
        };
        let seen = match &batch {
            Some(b) => self.batches().read_batch(b).await?,
            None => None,
        };
        // The task's name: a record whose name was taken has a `~` suffix the batch never saw.
        let letter = dead.rsplit('/').next().unwrap_or(dead);
        let letter =
            (letter.split_once(crate::layout::DEAD_NAME_SUFFIX)).map_or(letter, |(task, _)| task);
        let redrive = Redrive {
            dead,
            version,
            letter,
            body,
            key: write.as_ref(),
            prefix,
            batch,
            seen,
            rejoin: None,
        };
        write::run(&self, redrive).await
    }

    /// What publishing `envelope` with `key` writes: the key znode (without its task's name,
    /// which a multi-op cannot know yet) and the body, marked `keyed`.
    pub(crate) fn keyed_write(&self, envelope: &Envelope, key: &str) -> Result<KeyedWrite> {
        let envelope = Envelope {
            keyed: true,
            ..envelope.clone()
        };
        let data = KeyData {
            id: envelope.id.clone(),
            task: None,
            completed_at: None,
        };
        Ok(KeyedWrite {
            key_path: self.layout().key(key),
            unnamed: serde_json::to_vec(&data)?,
            body: envelope.to_bytes()?,
            id: envelope.id,
        })
    }

    /// Writes the name of the task a keyed publish just created into its key; whoever meets
    /// the key before this lands waits for it (see `existing`).
    pub(crate) async fn name_key(self, write: &KeyedWrite, task: &str) -> Result<()> {
        let named = serde_json::to_vec(&KeyData::named(write, task))?;
        if let Err(e) = self
            .client()
            .set_data(&write.key_path, &named, Some(0))
            .await
        {
            tracing::warn!(key = %write.key_path, error = %e, "key left without its task's name");
        }
        Ok(())
    }

    /// The task that has the key at `key_path`; `None` when the key went meanwhile.
    pub(crate) async fn existing(self, key_path: &str) -> Result<Option<Published>> {
        let mut key = None;
        for _ in 0..NAME_TRIES {
            let Some((bytes, _)) = self.read_path(key_path).await? else {
                return Ok(None);
            };
            let data: KeyData = serde_json::from_slice(&bytes).map_err(|e| Error::Unreadable {
                path: key_path.to_string(),
                problem: e.to_string(),
            })?;
            let named = data.task.is_some() || data.completed_at.is_some();
            key = Some(data);
            if named {
                break;
            }
            tokio::time::sleep(NAME_WAIT).await;
        }
        let Some(KeyData {
            id,
            task,
            completed_at,
        }) = key
        else {
            return Ok(None);
        };
        if completed_at.is_some_and(|at| self.key_expired(at)) {
            // Its window has passed, the sweep just did not come by yet: the key is free.
            self.delete_expired_key(key_path).await?;
            return Ok(None);
        }
        let state = match (&task, completed_at) {
            (_, Some(_)) => KeyState::Completed,
            (Some(name), None) => self.key_task_state(name).await?,
            (None, None) => KeyState::Pending,
        };
        Ok(Some(Published::Existing { id, task, state }))
    }

    /// Where the task named `name` is, from one probe of its number.
    async fn key_task_state(self, name: &str) -> Result<KeyState> {
        let Some(number) = layout::sequence(name) else {
            return Ok(KeyState::Pending);
        };
        let lane = crate::lane::Lane::of_name(name);
        let probe = self.probes().probe_in(&lane, &[], number, 1).await?;
        Ok(match probe.found.first() {
            Some(found) if found.lease.is_some() => KeyState::Leased,
            Some(_) => KeyState::Pending,
            None => KeyState::Waiting,
        })
    }
}

/// The name of the task the multi-op's operation `index` created.
pub(crate) fn created_name(result: Option<&zk::MultiWriteResult>, prefix: &str) -> Result<String> {
    match result {
        Some(zk::MultiWriteResult::Create { path, .. }) => {
            let name = path.rsplit('/').next().unwrap_or(path);
            debug_assert!(crate::layout::sequence(name).is_some());
            Ok(name.to_string())
        }
        other => {
            let msg = format!("publish returned {other:?}");
            Err(Error::zk(
                "publish",
                prefix,
                zk::Error::UnexpectedError(msg),
            ))
        }
    }
}

/// A keyed publish: the key and the task created in one multi-op.
struct PublishKeyed {
    write: KeyedWrite,
    /// The tail of its lane.
    prefix: String,
}

impl Write for PublishKeyed {
    type Tag = Part;
    type Out = Published;
    const WHAT: &'static str = "publish";
    const TRIES: Tries = Tries::Few;

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        multi
            .push(
                Part::IdempotencyKey,
                Op::Create(&self.write.key_path, &self.write.unnamed),
            )
            .push(
                Part::NewTask,
                Op::CreateSequential(&self.prefix, &self.write.body),
            );
    }

    async fn landed(self, queue: &Queue, landed: Landed<Part>) -> Result<Published> {
        let task = created_name(landed.result(Part::NewTask), &self.prefix)?;
        queue
            .idempotency_keys()
            .name_key(&self.write, &task)
            .await?;
        let id = self.write.id.clone();
        Ok(Published::Created { id, task })
    }

    /// The key taken: the task that has it (read again when it went meanwhile); `keys/` gone:
    /// made again.
    async fn failed(&mut self, queue: &Queue, failed: Failed<Part>) -> Result<Next<Published>> {
        match (failed.tag, &failed.error) {
            (Part::IdempotencyKey, zk::Error::NodeExists) => Ok(
                match queue
                    .idempotency_keys()
                    .existing(&self.write.key_path)
                    .await?
                {
                    Some(existing) => Next::Stop(existing),
                    None => Next::Again,
                },
            ),
            (Part::IdempotencyKey, zk::Error::NoNode) => {
                queue
                    .cancels()
                    .ensure_parent(&queue.layout().keys())
                    .await?;
                Ok(Next::Again)
            }
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<Published> {
        Err(Error::Unreadable {
            path: self.write.key_path.clone(),
            problem: "the key kept changing while it was published; try again".into(),
        })
    }
}

/// A dead letter's task queued again (see [`IdempotencyKeys::redrive`]).
struct Redrive<'r> {
    /// The letter, at the version read.
    dead: &'r str,
    version: i32,
    /// The task's name, as its batch knows it.
    letter: &'r str,
    body: &'r [u8],
    key: Option<&'r KeyedWrite>,
    prefix: String,
    /// Its batch, as last read.
    batch: Option<String>,
    seen: Option<(crate::task::batch::BatchState, i32)>,
    /// This try's write of the batch: a member of one not over yet is pending in it again.
    rejoin: Option<(String, Vec<u8>, i32)>,
}

impl Write for Redrive<'_> {
    type Tag = Part;
    type Out = Option<Requeued>;
    const WHAT: &'static str = "redrive";
    const TRIES: Tries = Tries::Contended;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Option<Requeued>>> {
        self.rejoin = (self.seen.clone()).and_then(|(mut state, v)| {
            let path = queue.layout().batch(&state.name);
            state
                .rejoin(self.letter)
                .then(|| (path, state.to_bytes(), v))
        });
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        multi.push(Part::Record, Op::Delete(self.dead, self.version));
        if let Some((path, data, v)) = &self.rejoin {
            multi.push(Part::Batch, Op::Set(path, data, *v));
        }
        if let Some(w) = self.key {
            multi.push(Part::IdempotencyKey, Op::Create(&w.key_path, &w.unnamed));
        }
        multi.push(Part::NewTask, Op::CreateSequential(&self.prefix, self.body));
    }

    async fn landed(self, queue: &Queue, landed: Landed<Part>) -> Result<Option<Requeued>> {
        let task = created_name(landed.result(Part::NewTask), &self.prefix)?;
        if let Some(w) = self.key {
            queue.idempotency_keys().name_key(w, &task).await?;
        }
        Ok(Some(Requeued::Created(task)))
    }

    /// The letter gone: redriven or purged by someone else. The batch changed: read again. The
    /// key taken: the task that has it.
    async fn failed(
        &mut self,
        queue: &Queue,
        failed: Failed<Part>,
    ) -> Result<Next<Option<Requeued>>> {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        match (failed.tag, &failed.error, self.key) {
            (Part::Record, NoNode | BadVersion, _) => return Ok(Next::Stop(None)),
            (Part::Batch, NoNode | BadVersion, _) => {
                let batch = self.batch.as_deref().unwrap_or_default();
                self.seen = queue.batches().read_batch(batch).await?;
            }
            (Part::IdempotencyKey, NodeExists, Some(w)) => {
                if let Some(existing) = queue.idempotency_keys().existing(&w.key_path).await? {
                    return Ok(Next::Stop(Some(Requeued::KeyTaken(existing))));
                }
            }
            (Part::IdempotencyKey, NoNode, _) => {
                queue
                    .cancels()
                    .ensure_parent(&queue.layout().keys())
                    .await?
            }
            _ => return Err(failed.unexpected(Self::WHAT)),
        }
        Ok(Next::Again)
    }

    fn exhausted(&self) -> Result<Option<Requeued>> {
        Err(Error::Unreadable {
            path: self.key.map_or(self.dead, |w| &w.key_path).to_string(),
            problem: "the key kept changing while the dead letter was redriven; try again".into(),
        })
    }
}
