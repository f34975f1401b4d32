//! The znodes of recurring schedules: `schedules/<name>` holds a schedule (JSON) with the
//! latest slot it took, and `schedules/<name>/<slot>` marks the latest slot that made a task.
//! Taking a slot is one multi-op: the schedule rewritten at the version read (its latest slot
//! moved on), the slot's mark created, and the slot's task (with its idempotency key, when it
//! has one) created. Of any number of firers racing for a slot, one commits; the others' writes
//! fail on the version or the mark and change nothing.
//!
//! That multi-op carries the payload twice (in the schedule and in its task) and the encoded
//! name in two paths, so it must fit one request ZooKeeper takes: over `jute.maxbuffer` (1 MiB
//! by default) the server drops the connection. Its size is reckoned before it is sent, against
//! the bound a task keeps to ([`MAX_BODY_BYTES`]): a schedule over it is refused when added, and
//! one stored anyway (by hand, or by an earlier version) fails alone, without a request.

use zookeeper_client as zk;

use super::recurrence::Schedule;
use crate::error::{Error, Result};
use crate::queue::write::{self, Next, Read, Tries, Write};
use crate::queue::{Failed, KeyedWrite, Landed, Multi, Op, Queue, created_name};
use crate::task::{Envelope, MAX_BODY_BYTES};

/// Recurring schedules' znodes, and taking a slot, in `queue`.
#[derive(Clone, Copy)]
pub struct Schedules<'q>(&'q Queue);

impl<'q> Schedules<'q> {
    /// The schedules of `queue`.
    pub fn new(queue: &'q Queue) -> Self {
        Schedules(queue)
    }
}

/// What each write of a schedule's multi-op is, as its failure is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The schedule's znode, at the version its firer read.
    Schedule,
    /// A slot's mark.
    SlotMark,
    /// The slot's task's idempotency key.
    IdempotencyKey,
    /// The slot's task.
    NewTask,
}

/// What one operation adds to a multi-op's request besides its path and data: its header, the
/// lengths, a version or flags, and an ACL (generously: a digest ACL names a user and a hash).
const OP_OVERHEAD: usize = 160;

/// What a multi-op's request adds besides its operations: the framing and the headers.
const REQUEST_OVERHEAD: usize = 64;

/// A schedule as read, with the version its next write must match.
#[derive(Clone, Debug)]
pub struct StoredSchedule {
    /// The schedule.
    pub schedule: Schedule,
    /// The schedule znode's version when read.
    pub version: i32,
}

/// What taking one slot did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotTaken {
    /// The slot made this task.
    Fired {
        /// The new task's name.
        task: String,
    },
    /// The slot's idempotency key was taken by an earlier task (this one, if known): the slot
    /// is taken without a new task.
    Existing {
        /// The name of the task that has the key, if known.
        task: Option<String>,
    },
    /// The slot was passed over (misfire policy `skip`).
    Skipped,
    /// Another firer took a slot first, or the schedule changed meanwhile: nothing written.
    Raced,
}

impl Schedules<'_> {
    /// Every schedule, by name: one list and one multi-read. A schedule that cannot be read
    /// comes back as the problem, so one bad schedule does not stop the others.
    pub async fn list(self) -> Result<Vec<(String, std::result::Result<StoredSchedule, String>)>> {
        let dir = self.0.layout().schedules();
        let mut names = self.0.children_of(&dir).await?;
        names.sort();
        let paths: Vec<String> = names.iter().map(|n| format!("{dir}/{n}")).collect();
        let reads = self.0.read_paths(&paths).await?;
        Ok(names
            .into_iter()
            .zip(reads)
            .filter_map(|(name, read)| {
                let (bytes, stat) = read?;
                let name = crate::layout::decode_segment(&name);
                Some((name, stored(&bytes, &stat)))
            })
            .collect())
    }

    /// Schedule `name`, if there is one.
    pub async fn schedule(self, name: &str) -> Result<Option<StoredSchedule>> {
        let path = self.0.layout().schedule(name);
        let Some((bytes, stat)) = self.0.read_path(&path).await? else {
            return Ok(None);
        };
        stored(&bytes, &stat)
            .map(Some)
            .map_err(|problem| Error::Unreadable { path, problem })
    }

    /// Creates `schedule` (`version` `None`) or rewrites it at `version`; `false` when the name
    /// is taken, or the schedule changed or went meanwhile.
    pub async fn put_schedule(self, schedule: &Schedule, version: Option<i32>) -> Result<bool> {
        let path = self.0.layout().schedule(&schedule.name);
        let data = serde_json::to_vec(schedule)?;
        let written = match version {
            None => {
                self.0
                    .cancels()
                    .ensure_parent(&self.0.layout().schedules())
                    .await?;
                self.0
                    .client()
                    .create(&path, &data, &self.0.created(zk::CreateMode::Persistent))
                    .await
                    .map(drop)
            }
            Some(version) => self
                .0
                .client()
                .set_data(&path, &data, Some(version))
                .await
                .map(drop),
        };
        match written {
            Ok(()) => Ok(true),
            Err(zk::Error::NodeExists | zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
            Err(e) => Err(Error::zk("write", path, e)),
        }
    }

    /// Changes schedule `name` by `change`, written at the version read (again when another
    /// client wrote it in between): the schedule as written; `None` when there is none.
    pub async fn change_schedule(
        self,
        name: &str,
        change: &(dyn Fn(&mut Schedule) + Sync),
    ) -> Result<Option<Schedule>> {
        let rewrite = ChangeSchedule {
            name,
            change,
            read: None,
        };
        write::run(self.0, rewrite).await
    }

    /// Deletes schedule `name` and its slot mark; `false` when there was none.
    pub async fn remove_schedule(self, name: &str) -> Result<bool> {
        let remove = RemoveSchedule {
            path: self.0.layout().schedule(name),
            marks: Vec::new(),
        };
        write::run(self.0, remove).await
    }

    /// Takes slot `slot_ms` of `stored`: with `task`, creates it (and its key) with the
    /// slot's mark; without, passes the slot over. The mark of the slot before goes after.
    /// Nothing is written unless the schedule is still at the version read (a firer with a
    /// stale read gets [`SlotTaken::Raced`]). [`super::fire_due`] is the usual
    /// caller; a firer of one's own may call it directly.
    pub async fn take_slot(
        self,
        stored: &StoredSchedule,
        slot_ms: i64,
        task: Option<&Envelope>,
    ) -> Result<SlotTaken> {
        let name = &stored.schedule.name;
        let path = self.0.layout().schedule(name);
        let previous = stored.schedule.last_slot_ms;
        let moved = serde_json::to_vec(&Schedule {
            last_slot_ms: Some(slot_ms),
            ..stored.schedule.clone()
        })?;
        let Some(envelope) = task else {
            let mut multi = Multi::new();
            multi.push(Part::Schedule, Op::Set(&path, &moved, stored.version));
            return match self.0.commit("skip slot", &multi).await? {
                Ok(_) => Ok(SlotTaken::Skipped),
                Err(f) if matches!(f.error, zk::Error::BadVersion | zk::Error::NoNode) => {
                    Ok(SlotTaken::Raced)
                }
                Err(failed) => Err(failed.unexpected("skip slot")),
            };
        };
        let mark = self.0.layout().schedule_slot(name, slot_ms);
        self.0.key_lanes().ensure_lanes(&[envelope.lane()]).await?;
        let firing = self.firing(name, &path, &moved, &mark, envelope)?;
        let taken = self.fire(&firing, stored.version).await?;
        let fired = matches!(taken, SlotTaken::Fired { .. } | SlotTaken::Existing { .. });
        if let Some(previous) = previous.filter(|p| fired && *p != slot_ms) {
            let old = self.0.layout().schedule_slot(name, previous);
            match self.0.client().delete(&old, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => tracing::warn!(mark = %old, error = %e, "old slot mark left"),
            }
        }
        Ok(taken)
    }

    /// Checks that a slot of `schedule` making `envelope` (its task of slot `slot_ms`) could be
    /// fired: the error names the schedule and the size of what it would send.
    pub(crate) fn check_firing(
        &self,
        schedule: &Schedule,
        slot_ms: i64,
        envelope: &Envelope,
    ) -> Result<()> {
        let name = &schedule.name;
        let moved = serde_json::to_vec(&Schedule {
            last_slot_ms: Some(slot_ms),
            ..schedule.clone()
        })?;
        let (path, mark) = (
            self.0.layout().schedule(name),
            self.0.layout().schedule_slot(name, slot_ms),
        );
        self.firing(name, &path, &moved, &mark, envelope).map(drop)
    }

    /// What taking a slot of schedule `name` (at `path`, rewritten as `moved`) with its mark
    /// `mark` and the task `envelope` writes; refused, before anything is sent, when it would
    /// not fit one request.
    fn firing<'a>(
        &self,
        name: &str,
        path: &'a str,
        moved: &'a [u8],
        mark: &'a str,
        envelope: &Envelope,
    ) -> Result<Firing<'a>> {
        let body = match &envelope.idempotency_key {
            Some(key) => self
                .0
                .idempotency_keys()
                .keyed_write(envelope, key)
                .map(Body::Keyed),
            None => envelope.to_bytes().map(Body::Plain),
        };
        let body = body.map_err(|e| match e {
            Error::TooLarge { size, limit } => schedule_error(
                name,
                format!("its task would be {size} bytes, over the {limit}-byte limit of a task"),
            ),
            other => other,
        })?;
        let prefix = self.0.layout().lane_prefix(&envelope.lane());
        let firing = Firing {
            path,
            moved,
            mark,
            prefix,
            body,
        };
        let bytes = request_bytes(&firing.multi(0));
        if bytes > MAX_BODY_BYTES {
            return Err(schedule_error(name, too_large(bytes)));
        }
        Ok(firing)
    }

    /// The multi-op of a slot that makes a task, checked against the schedule's `version`.
    async fn fire(self, firing: &Firing<'_>, version: i32) -> Result<SlotTaken> {
        let multi = firing.multi(version);
        let keyed = match &firing.body {
            Body::Keyed(write) => Some(write),
            Body::Plain(_) => None,
        };
        let failed = match self.0.commit("fire slot", &multi).await? {
            Ok(results) => {
                let task = created_name(multi.result(&results, Part::NewTask), &firing.prefix)?;
                if let Some(write) = keyed {
                    self.0.idempotency_keys().name_key(write, &task).await?;
                }
                return Ok(SlotTaken::Fired { task });
            }
            Err(failed) => failed,
        };
        use zk::Error::{BadVersion, NoNode, NodeExists};
        match (failed.tag, &failed.error, keyed) {
            (Part::Schedule | Part::SlotMark, BadVersion | NoNode | NodeExists, _) => {
                Ok(SlotTaken::Raced)
            }
            // An earlier task has the key: the slot is taken without one.
            (Part::IdempotencyKey, NodeExists, Some(write)) => {
                let (path, moved, mark) = (firing.path, firing.moved, firing.mark);
                self.take_without_task(path, moved, version, mark, &write.key_path)
                    .await
            }
            (Part::IdempotencyKey, NoNode, Some(_)) => {
                self.0
                    .cancels()
                    .ensure_parent(&self.0.layout().keys())
                    .await?;
                Ok(SlotTaken::Raced)
            }
            _ => Err(failed.unexpected("fire slot")),
        }
    }

    /// Takes a slot whose idempotency key an earlier task holds: the slot and its mark, no task.
    async fn take_without_task(
        self,
        path: &str,
        moved: &[u8],
        version: i32,
        mark: &str,
        key_path: &str,
    ) -> Result<SlotTaken> {
        let mut multi = Multi::new();
        multi
            .push(Part::Schedule, Op::Set(path, moved, version))
            .push(Part::SlotMark, Op::Create(mark, b""));
        match self.0.commit("fire slot", &multi).await? {
            Ok(_) => {
                let task = self
                    .0
                    .idempotency_keys()
                    .existing(key_path)
                    .await?
                    .and_then(|p| p.task().map(str::to_string));
                Ok(SlotTaken::Existing { task })
            }
            Err(failed)
                if matches!(
                    failed.error,
                    zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists
                ) =>
            {
                Ok(SlotTaken::Raced)
            }
            Err(failed) => Err(failed.unexpected("fire slot")),
        }
    }
}

/// A slot's task as its firing writes it.
enum Body {
    Plain(Vec<u8>),
    /// With its idempotency key, created in the same multi-op.
    Keyed(KeyedWrite),
}

/// What taking a slot with a task writes, in one multi-op.
struct Firing<'a> {
    path: &'a str,
    moved: &'a [u8],
    mark: &'a str,
    prefix: String,
    body: Body,
}

impl Firing<'_> {
    /// The multi-op, checked against the schedule's `version`: the schedule moved on, the
    /// slot's mark, the task (after its key) last.
    fn multi(&self, version: i32) -> Multi<'_, Part> {
        let mut multi = Multi::new();
        multi
            .push(Part::Schedule, Op::Set(self.path, self.moved, version))
            .push(Part::SlotMark, Op::Create(self.mark, b""));
        if let Body::Keyed(write) = &self.body {
            multi.push(
                Part::IdempotencyKey,
                Op::Create(&write.key_path, &write.unnamed),
            );
        }
        let body = match &self.body {
            Body::Plain(body) => body,
            Body::Keyed(write) => &write.body,
        };
        multi.push(Part::NewTask, Op::CreateSequential(&self.prefix, body));
        multi
    }
}

/// At least the bytes of the request that sends `ops` as one multi-op.
fn request_bytes(multi: &Multi<'_, Part>) -> usize {
    let each = multi
        .ops()
        .map(|op| OP_OVERHEAD + op.path().len() + data_of(op).len());
    REQUEST_OVERHEAD + each.sum::<usize>()
}

/// The bytes of data `op` sends.
fn data_of<'a>(op: &Op<'a>) -> &'a [u8] {
    match *op {
        Op::Create(_, d) | Op::CreateEphemeral(_, d) | Op::CreateSequential(_, d) => d,
        Op::Set(_, d, _) => d,
        Op::Delete(..) | Op::Check(..) => b"",
    }
}

/// Why a firing of `bytes` is refused.
fn too_large(bytes: usize) -> String {
    format!(
        "firing a slot would send {bytes} bytes in one request, over the {MAX_BODY_BYTES}-byte \
         limit (ZooKeeper drops the connection of a request over jute.maxbuffer, 1 MiB by \
         default): the payload goes in twice (the schedule and its task) and the encoded name \
         in two paths; make them smaller"
    )
}

fn schedule_error(name: &str, problem: String) -> Error {
    Error::Schedule {
        name: name.to_string(),
        problem,
    }
}

fn stored(bytes: &[u8], stat: &zk::Stat) -> std::result::Result<StoredSchedule, String> {
    serde_json::from_slice(bytes)
        .map(|schedule| StoredSchedule {
            schedule,
            version: stat.version,
        })
        .map_err(|e| format!("not a schedule: {e}"))
}

/// A schedule changed at the version read (see [`Schedules::change_schedule`]).
struct ChangeSchedule<'c> {
    name: &'c str,
    change: &'c (dyn Fn(&mut Schedule) + Sync),
    /// This try's schedule, changed, with its path, data and the version read.
    read: Option<(Schedule, String, Vec<u8>, i32)>,
}

impl Write for ChangeSchedule<'_> {
    type Tag = Part;
    type Out = Option<Schedule>;
    const WHAT: &'static str = "change schedule";
    const TRIES: Tries = Tries::Few;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Option<Schedule>>> {
        let Some(stored) = Schedules::new(queue).schedule(self.name).await? else {
            return Ok(Read::Stop(None));
        };
        let mut schedule = stored.schedule;
        (self.change)(&mut schedule);
        let data = serde_json::to_vec(&schedule)?;
        let path = queue.layout().schedule(self.name);
        self.read = Some((schedule, path, data, stored.version));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        if let Some((_, path, data, version)) = &self.read {
            multi.push(Part::Schedule, Op::Set(path, data, *version));
        }
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<Option<Schedule>> {
        Ok(self.read.map(|(schedule, ..)| schedule))
    }

    /// Changed or deleted meanwhile: read again.
    async fn failed(&mut self, _: &Queue, failed: Failed<Part>) -> Result<Next<Option<Schedule>>> {
        match failed.error {
            zk::Error::BadVersion | zk::Error::NoNode => Ok(Next::Again),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<Option<Schedule>> {
        let problem = "it kept changing while it was written; try again".to_string();
        Err(schedule_error(self.name, problem))
    }
}

/// A schedule deleted with its slot marks (see [`Schedules::remove_schedule`]).
struct RemoveSchedule {
    path: String,
    /// Its marks, as listed for this try.
    marks: Vec<String>,
}

impl Write for RemoveSchedule {
    type Tag = Part;
    type Out = bool;
    const WHAT: &'static str = "remove schedule";
    const TRIES: Tries = Tries::Few;

    async fn read(&mut self, queue: &Queue) -> Result<Read<bool>> {
        let marks = match queue.client().list_children(&self.path).await {
            Ok(marks) => marks,
            Err(zk::Error::NoNode) => return Ok(Read::Stop(false)),
            Err(e) => return Err(Error::zk("list", &self.path, e)),
        };
        self.marks = marks.iter().map(|m| format!("{}/{m}", self.path)).collect();
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        for mark in &self.marks {
            multi.push(Part::SlotMark, Op::Delete(mark, -1));
        }
        multi.push(Part::Schedule, Op::Delete(&self.path, -1));
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<bool> {
        Ok(true)
    }

    /// A firer took a slot meanwhile (a mark came or went): looked at again.
    async fn failed(&mut self, _: &Queue, failed: Failed<Part>) -> Result<Next<bool>> {
        match failed.error {
            zk::Error::NoNode | zk::Error::NotEmpty => Ok(Next::Again),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<bool> {
        Err(Error::Unreadable {
            path: self.path.clone(),
            problem: "its slots kept changing while it was removed; try again".into(),
        })
    }
}
