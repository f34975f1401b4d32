//! Batches in the queue (see [`crate::batch`]): opening and sealing one, a member's publish
//! (the task created with the batch's `total` raised, in one multi-op), and naming a callback
//! once it was published. The tally a member's completion or burial folds into its own
//! multi-op is the feature's (`features/batches/`).
//!
//! The callback's name is written to the batch just after its multi-op (a lost write leaves its
//! id, which `status` accepts); a batch znode whose data is not a batch (overwritten by hand or
//! by another tool) is reported unreadable by `batch status` and by a publish into it.
//!
//! # Costs
//!
//! Per member, no extra request on the publish (the `setData` joins the multi-op it sends
//! anyway; a bulk publish sends a run of up to 32 members of one batch as one multi-op).

use std::collections::HashMap;

use zookeeper_client as zk;

use super::Queue;
use super::idempotency_keys::{Published, created_name};
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::write::{Next, Read, Tries, Write};
use crate::error::{Error, Result};
use crate::task::Envelope;
use crate::task::batch::{BatchState, BatchStatus, callback_envelopes};

recipe!(
    /// Batches: opening and sealing one, a member's publish, the tally its members' endings fold
    /// in, the callback (`members`).
    Batches,
    batches
);

/// Bodies of one batch published in one multi-op, at most (well within a request), and how
/// many.
const MEMBERS_BYTES: usize = 512 * 1024;
const MEMBERS_PER_WRITE: usize = 256;

/// A batch as a listing read it: its name, and its state or why it cannot be read.
pub type BatchRead = (String, std::result::Result<BatchState, String>);

/// Batches as a write read them: by name, the state and version, or `None` when gone.
pub(super) type BatchesSeen = HashMap<String, Option<(BatchState, i32)>>;

/// What a settlement or a seal writes to one batch: its counters at the version read, and
/// the bodies of the callback tasks it publishes.
pub(crate) struct Tally {
    pub path: String,
    pub version: i32,
    pub data: Vec<u8>,
    pub callbacks: Vec<Vec<u8>>,
}

impl Tally {
    /// Its operations, tagged `tag`: the counters, then the callbacks at the normal lane's
    /// tail (`prefix`).
    pub(super) fn push<'a, T: Copy + PartialEq>(
        &'a self,
        multi: &mut Multi<'a, T>,
        tag: T,
        prefix: &'a str,
    ) {
        multi.push(tag, Op::Set(&self.path, &self.data, self.version));
        for body in &self.callbacks {
            multi.push(tag, Op::CreateSequential(prefix, body));
        }
    }
}

/// What an all-or-nothing publish writes to a batch its items join: the batch's `total`
/// raised by their number, at the version read, tagged with the index of its first member.
pub(super) struct Join {
    pub first: usize,
    pub path: String,
    pub data: Vec<u8>,
    pub version: i32,
}

/// The batches `members` (index, batch name) belong to, each once, by the index of its first
/// member, with how many members it has there.
pub(super) fn by_batch<'a>(
    members: impl Iterator<Item = (usize, &'a str)>,
) -> Vec<(usize, &'a str, u64)> {
    let mut out: Vec<(usize, &str, u64)> = Vec::new();
    for (i, name) in members {
        match out.iter_mut().find(|(_, n, _)| *n == name) {
            Some((_, _, count)) => *count += 1,
            None => out.push((i, name, 1)),
        }
    }
    out
}

/// The bodies of `state`'s callbacks when they are due (their ids set in `state`).
pub(crate) fn callback_bodies(state: &mut BatchState) -> Vec<Vec<u8>> {
    if !state.due() {
        return Vec::new();
    }
    (callback_envelopes(state).iter())
        .map(|e| serde_json::to_vec(e).expect("an envelope serializes"))
        .collect()
}

impl Batches<'_> {
    /// The first `most` batches by name (one listing, one multi-read), and how many there are.
    /// A batch that cannot be read shows as its name and the problem.
    pub async fn list(self, most: usize) -> Result<(Vec<BatchRead>, usize)> {
        let dir = self.layout().batches();
        let mut names = match self.client().list_children(&dir).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok((Vec::new(), 0)),
            Err(e) => return Err(Error::zk("list", dir, e)),
        };
        let total = names.len();
        names.sort();
        names.truncate(most);
        let paths: Vec<String> = names.iter().map(|n| format!("{dir}/{n}")).collect();
        let reads = self.read_paths(&paths).await?;
        let shown = (names.iter().zip(&paths).zip(reads)).filter_map(|((name, path), read)| {
            let (data, _) = read?;
            let name = crate::layout::decode_segment(name);
            Some((name, parse(path, &data).map_err(|e| e.to_string())))
        });
        Ok((shown.collect(), total))
    }

    /// Creates `batches/<name>` holding `state`; an error when one of that name exists.
    pub(crate) async fn open_batch(self, state: &BatchState) -> Result<()> {
        let path = self.layout().batch(&state.name);
        let data = state.to_bytes();
        for _ in 0..2 {
            match self
                .client()
                .create(&path, &data, &self.created(zk::CreateMode::Persistent))
                .await
            {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => {
                    return Err(batch_error(&state.name, "a batch of that name exists"));
                }
                Err(zk::Error::NoNode) => {
                    self.cancels()
                        .ensure_parent(&self.layout().batches())
                        .await?
                }
                Err(e) => return Err(Error::zk("create", &path, e)),
            }
        }
        Err(Error::zk("create", &path, zk::Error::NoNode))
    }

    /// Batch `name` and its version, `None` when there is none.
    pub async fn read_batch(self, name: &str) -> Result<Option<(BatchState, i32)>> {
        let path = self.layout().batch(name);
        let Some((data, stat)) = self.read_path(&path).await? else {
            return Ok(None);
        };
        Ok(Some((parse(&path, &data)?, stat.version)))
    }

    /// The batches `names` (one multi-read).
    pub(super) async fn read_batches(self, names: &[String]) -> Result<BatchesSeen> {
        let paths: Vec<String> = names.iter().map(|n| self.layout().batch(n)).collect();
        let read = self.read_paths(&paths).await?;
        let mut seen = HashMap::new();
        for ((name, path), found) in names.iter().zip(&paths).zip(read) {
            let state = match found {
                Some((data, stat)) => Some((parse(path, &data)?, stat.version)),
                None => None,
            };
            seen.insert(name.clone(), state);
        }
        Ok(seen)
    }

    /// Seals batch `name`; its callbacks go in the same write when nothing is pending.
    pub(crate) async fn seal_batch(self, name: &str) -> Result<BatchStatus> {
        let prefix = self.layout().lane_prefix(&crate::lane::Lane::NORMAL);
        super::write::run(
            &self,
            Seal {
                name,
                prefix,
                read: None,
            },
        )
        .await
    }

    /// Publishes `run` (envelopes of one batch, `batch`) as members: their tasks created and
    /// the batch's `total` raised, in one multi-op; an error when the batch is unknown or
    /// sealed (nothing is created then). A run too large for one request goes one by one.
    pub(super) async fn publish_members(
        self,
        run: &[Envelope],
        batch: &str,
    ) -> Result<Vec<Published>> {
        let bodies = run
            .iter()
            .map(Envelope::to_bytes)
            .collect::<Result<Vec<_>>>()?;
        let mut published = Vec::with_capacity(run.len());
        let mut start = 0;
        while start < run.len() {
            // As many as one request carries, in order; the chunks one after another (they
            // write the same batch).
            let mut end = start + 1;
            let mut bytes = bodies[start].len();
            while end < run.len()
                && end - start < MEMBERS_PER_WRITE
                && bytes + bodies[end].len() <= MEMBERS_BYTES
            {
                bytes += bodies[end].len();
                end += 1;
            }
            published.extend(
                self.publish_chunk(&run[start..end], &bodies[start..end], batch)
                    .await?,
            );
            start = end;
        }
        Ok(published)
    }

    async fn publish_chunk(
        self,
        run: &[Envelope],
        bodies: &[Vec<u8>],
        batch: &str,
    ) -> Result<Vec<Published>> {
        let path = self.layout().batch(batch);
        let lanes: Vec<_> = run.iter().map(Envelope::lane).collect();
        self.key_lanes().ensure_lanes(&lanes).await?;
        let prefixes: Vec<String> = lanes.iter().map(|l| self.layout().lane_prefix(l)).collect();
        super::write::run(
            &self,
            JoinChunk {
                run,
                bodies,
                batch,
                path,
                prefixes,
                read: None,
            },
        )
        .await
    }

    /// What publishing `envelopes` together writes to the batches they join (one multi-read
    /// of them); an error when one is unknown or sealed.
    pub(super) async fn batch_joins(self, envelopes: &[Envelope]) -> Result<Vec<Join>> {
        let members =
            (envelopes.iter().enumerate()).filter_map(|(i, e)| Some((i, e.batch.as_deref()?)));
        let groups = by_batch(members);
        let names: Vec<String> = groups.iter().map(|(_, n, _)| n.to_string()).collect();
        let seen = self.read_batches(&names).await?;
        let mut joins = Vec::with_capacity(groups.len());
        for (first, name, count) in groups {
            let Some(Some((state, version))) = seen.get(name) else {
                return Err(unknown_batch(name));
            };
            if state.sealed {
                return Err(batch_error(name, "sealed: no member joins it any more"));
            }
            let mut state = state.clone();
            state.total += count;
            joins.push(Join {
                first,
                path: self.layout().batch(name),
                data: state.to_bytes(),
                version: *version,
            });
        }
        Ok(joins)
    }

    /// Refuses a publish whose envelopes join a batch that is unknown or sealed, before
    /// anything is written (one multi-read of the batches named).
    pub(super) async fn check_batches(self, envelopes: &[Envelope]) -> Result<()> {
        let mut names: Vec<String> = envelopes.iter().filter_map(|e| e.batch.clone()).collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Ok(());
        }
        for (name, seen) in self.read_batches(&names).await? {
            match seen {
                None => return Err(unknown_batch(&name)),
                Some((state, _)) if state.sealed => {
                    return Err(batch_error(&name, "sealed: no member joins it any more"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Writes the name of the callback `tally`'s write created (`results`: that write's results
/// for the tally's operations) into its batch, at the version that write left, for `batch
/// status`. A failure leaves the callback's id there, and is logged.
pub(crate) async fn name_callback<'r>(
    client: &zk::Client,
    tally: &Tally,
    results: impl Iterator<Item = &'r zk::MultiWriteResult>,
) -> Option<BatchState> {
    let mut state: BatchState = serde_json::from_slice(&tally.data).ok()?;
    let created = results.into_iter().find_map(|r| match r {
        zk::MultiWriteResult::Create { path, .. } => Some(path),
        _ => None,
    })?;
    let name = created.rsplit('/').next().unwrap_or(created).to_string();
    state.callback = Some(name.clone());
    let version = Some(tally.version + 1);
    if let Err(e) = client
        .set_data(&tally.path, &state.to_bytes(), version)
        .await
    {
        tracing::warn!(batch = %state.name, callback = %name, error = %e, "batch callback published; its name not written");
    }
    tracing::info!(batch = %state.name, callback = %name, total = state.total, completed = state.completed, dead = state.dead, "batch settled: callback published");
    Some(state)
}

/// Batch `data` at `path`, read; an error naming it when it is not a batch.
pub(crate) fn parse(path: &str, data: &[u8]) -> Result<BatchState> {
    serde_json::from_slice(data).map_err(|e| Error::Unreadable {
        path: path.to_string(),
        problem: format!("not a batch: {e}"),
    })
}

fn busy(name: &str) -> Error {
    batch_error(name, "it kept changing while it was written; try again")
}

/// An error about batch `name` (nothing was written).
pub(crate) fn batch_error(name: &str, problem: impl Into<String>) -> Error {
    Error::Batch {
        name: name.to_string(),
        problem: problem.into(),
    }
}

/// The error for a batch that does not exist.
pub(crate) fn unknown_batch(name: &str) -> Error {
    batch_error(
        name,
        "no such batch (open it with `event-bridge batch open`)",
    )
}

/// Sealing batch `name`, its callbacks in the same write when nothing is pending.
struct Seal<'n> {
    name: &'n str,
    prefix: String,
    /// The batch as the try read it, sealed, and its write.
    read: Option<(BatchState, Tally)>,
}

impl Write for Seal<'_> {
    type Tag = Part;
    type Out = BatchStatus;
    const WHAT: &'static str = "seal batch";
    const TRIES: Tries = Tries::Contended;

    async fn read(&mut self, queue: &Queue) -> Result<Read<BatchStatus>> {
        let Some((mut state, version)) = queue.batches().read_batch(self.name).await? else {
            return Err(unknown_batch(self.name));
        };
        if state.sealed {
            return Err(batch_error(self.name, "sealed already"));
        }
        state.sealed = true;
        let tally = Tally {
            callbacks: callback_bodies(&mut state),
            path: queue.layout().batch(self.name),
            version,
            data: state.to_bytes(),
        };
        self.read = Some((state, tally));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        if let Some((_, tally)) = &self.read {
            tally.push(multi, Part::Batch, &self.prefix);
        }
    }

    async fn landed(self, queue: &Queue, landed: Landed<Part>) -> Result<BatchStatus> {
        let (state, tally) = self.read.as_ref().expect("a try reads before it writes");
        let named = name_callback(queue.client(), tally, landed.all().iter()).await;
        Ok(named.unwrap_or_else(|| state.clone()).status())
    }

    async fn failed(&mut self, _: &Queue, failed: Failed<Part>) -> Result<Next<BatchStatus>> {
        match failed.error {
            zk::Error::BadVersion => Ok(Next::Pause),
            zk::Error::NoNode => Err(unknown_batch(self.name)),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<BatchStatus> {
        Err(busy(self.name))
    }
}

/// Members joining a batch: their tasks created and the batch's `total` raised at the
/// version read.
struct JoinChunk<'a> {
    run: &'a [Envelope],
    bodies: &'a [Vec<u8>],
    batch: &'a str,
    path: String,
    prefixes: Vec<String>,
    /// The batch's data with the run joined, and the version read.
    read: Option<(Vec<u8>, i32)>,
}

/// What an operation of a member chunk's join is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Joining {
    /// The batch's counters, at the version read.
    Counters,
    /// The task of the member at this index of the chunk.
    Member(usize),
}

impl Write for JoinChunk<'_> {
    type Tag = Joining;
    type Out = Vec<Published>;
    const WHAT: &'static str = "publish";
    const TRIES: Tries = Tries::Contended;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Vec<Published>>> {
        let Some((mut state, version)) = queue.batches().read_batch(self.batch).await? else {
            return Err(unknown_batch(self.batch));
        };
        if state.sealed {
            return Err(batch_error(
                self.batch,
                "sealed: no member joins it any more",
            ));
        }
        state.total += self.run.len() as u64;
        self.read = Some((state.to_bytes(), version));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Joining>) {
        if let Some((data, version)) = &self.read {
            multi.push(Joining::Counters, Op::Set(&self.path, data, *version));
        }
        for (i, (prefix, body)) in self.prefixes.iter().zip(self.bodies).enumerate() {
            multi.push(Joining::Member(i), Op::CreateSequential(prefix, body));
        }
    }

    async fn landed(self, _: &Queue, landed: Landed<Joining>) -> Result<Vec<Published>> {
        let each = self.run.iter().zip(&self.prefixes).enumerate();
        each.map(|(i, (envelope, prefix))| {
            Ok(Published::Created {
                id: envelope.id.clone(),
                task: created_name(landed.result(Joining::Member(i)), prefix)?,
            })
        })
        .collect()
    }

    async fn failed(&mut self, _: &Queue, failed: Failed<Joining>) -> Result<Next<Vec<Published>>> {
        match (failed.tag, &failed.error) {
            (Joining::Counters, zk::Error::BadVersion) => Ok(Next::Pause),
            (Joining::Counters, _) => Err(unknown_batch(self.batch)),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<Vec<Published>> {
        Err(busy(self.batch))
    }
}
