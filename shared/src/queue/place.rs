//! Places: a grouped task that waits outside its lane keeps its turn in its group's order (see
//! [`crate::task::Place`] for what a place is).
//!
//! - **Made** with the task: the publish of a grouped child that waits for its parents, or of
//!   a debounced grouped task that starts its key, creates the place at the tail of its lane in
//!   the same multi-op ([`PlaceWrite`]); the task carries the place's id in `placed`. A bury of a
//!   pending grouped task that pauses its group, when it does not hold its group's lock, leaves
//!   a place standing for its death where the task was.
//! - **Taken** by the claim that meets the place as its group's next task
//!   ([`Groups::take_place`]): when the task is ready (its parents settled, its debounce due), one
//!   multi-op deletes it where it waited and writes it into the place, which the claim then
//!   takes as any task. Not ready: the place holds its group back, as a grouped task not due
//!   yet does. Gone (the child died with a parent or was cancelled, the debounced publish was
//!   withdrawn) or dead: the place is deleted, and the group pauses there when the task or its
//!   route says `on_dead: pause`.
//! - **Woken**: a task getting ready changes nothing in its lane, so the write that readies it
//!   (a child's last parent settling; a run finding a placed debounce key due) is followed by a
//!   `setData` of the lane's own znode (`tasks`, `lanes/high`, `lanes/low`, whose data nobody
//!   reads), which fires the workers' watches on the lane and takes no number from it.
//!
//! A publish keeps places in order with the tasks around it: a grouped debounced task, whose
//! write needs a read first, goes alone after the ones before it, as a child does. Costs: a
//! grouped child or debounced task costs one create more at publish, and a read (and a multi-op
//! when it is ready) when its turn comes; a place waiting long is read past by every walk, as a
//! grouped task not due yet is.

use crate::queue::Groups;
use serde_json::Value;
use zookeeper_client as zk;

use super::Queue;
use super::group_lock::GroupLock;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::write::{Next, Tries, Write};
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::layout::Layout;
use crate::task::{self, Body, Envelope, OnDead, Place, StandsFor};

/// A place to create with its task, at the tail of the task's lane.
#[derive(Clone, Debug)]
pub(super) struct PlaceWrite {
    prefix: String,
    body: Vec<u8>,
}

impl PlaceWrite {
    /// Adds the place's create to `multi`, tagged `tag`.
    pub(super) fn push<'a, T: Copy + PartialEq>(&'a self, multi: &mut Multi<'a, T>, tag: T) {
        multi.push(tag, Op::CreateSequential(&self.prefix, &self.body));
    }
}

/// What the claim that met a place comes to.
pub(super) enum PlaceTaken {
    /// The task is in the place now: its envelope, body and stat, to claim.
    Filled(Box<Envelope>, Vec<u8>, zk::Stat),
    /// Its task is not ready: the place holds its group back.
    NotReady,
    /// Its task is gone or dead: the place is deleted, and its group paused there (`true`)
    /// or going on.
    Ended { paused: bool },
    /// Its task is gone or dead, and the group's lock is another task's (its id): the place
    /// waits for its turn to pause the group.
    GroupBusy(String),
    /// The place changed or went meanwhile: another consumer's.
    Taken,
}

impl Groups<'_> {
    /// The place grouped `task` keeps in its lane while it waits for `stands_for`, under `id`;
    /// `None` for a task in no group.
    pub(super) fn place_write(
        &self,
        task: &Envelope,
        id: &str,
        stands_for: StandsFor,
    ) -> Option<PlaceWrite> {
        let group = task.group.as_deref()?;
        Some(PlaceWrite {
            prefix: self.layout().lane_prefix(&task.lane()),
            body: Place::of(task, group, id, stands_for).to_bytes(),
        })
    }

    /// Wakes the workers watching `lane` (a priority lane: a grouped task is in no key lane):
    /// its znode's data set (empty, at any version), which its watchers see change.
    pub(crate) async fn wake_lane(self, lane: &Lane) -> Result<()> {
        // A key lane's znode holds its head.
        if matches!(lane, Lane::Key(_)) {
            return Ok(());
        }
        let path = self.layout().lane_tasks(lane);
        match self.client().set_data(&path, b"", None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(Error::zk("wake", path, e)),
        }
    }

    /// The claim of place `name` (read at `version`) met as its group's next task: the task
    /// it stands for written into it when ready, else what the claim comes to (see the
    /// module documentation); `on_dead`: what its group does if its task died (the place's
    /// own, else its route's).
    pub(super) async fn take_place(
        self,
        name: &str,
        place: &Place,
        version: i32,
        now_ms: i64,
        on_dead: OnDead,
    ) -> Result<PlaceTaken> {
        let ending = match &place.stands_for {
            StandsFor::Parents => {
                let path = self.layout().blocked(&place.id);
                match self.ready_child(&path, &place.id).await? {
                    Waits::Ready(child, at) => {
                        return self.fill_place(name, version, &path, at, &child).await;
                    }
                    Waits::NotYet => return Ok(PlaceTaken::NotReady),
                    Waits::Gone => self.letter_of(&Layout::blocked_name(&place.id)).await?,
                }
            }
            StandsFor::Debounce { key } => {
                let path = self.layout().debounced(key);
                match self.ready_debounced(&path, &place.id, now_ms).await? {
                    Waits::Ready(task, at) => {
                        return self.fill_place(name, version, &path, at, &task).await;
                    }
                    Waits::NotYet => return Ok(PlaceTaken::NotReady),
                    Waits::Gone => Ending {
                        letter: format!("debounce/{key}"),
                        why: format!(
                            "debounce/{key}: the debounced publish {} was withdrawn before its turn",
                            place.id
                        ),
                    },
                }
            }
            StandsFor::Dead { letter, reason } => Ending {
                letter: letter.clone(),
                why: format!("{letter} went to the dead letters: {reason}"),
            },
        };
        self.end_place(name, version, place, on_dead, &ending).await
    }

    /// Whether the child at `path` that the place `id` stands for is ready (every parent
    /// completed).
    async fn ready_child(self, path: &str, id: &str) -> Result<Waits> {
        let Some((body, stat)) = self.read_path(path).await? else {
            return Ok(Waits::Gone);
        };
        Ok(match task::parse(&body) {
            Body::Envelope(child) if child.placed.as_deref() != Some(id) => Waits::Gone,
            Body::Envelope(child) if !child.waiting_on.is_empty() => Waits::NotYet,
            Body::Envelope(child) => Waits::Ready(Box::new(child), stat.version),
            _ => Waits::Gone,
        })
    }

    /// Whether the debounced publish at `path` that the place `id` stands for is due by
    /// `now_ms`.
    async fn ready_debounced(self, path: &str, id: &str, now_ms: i64) -> Result<Waits> {
        let Some((body, stat)) = self.read_path(path).await? else {
            return Ok(Waits::Gone);
        };
        Ok(match crate::task::PendingDebounced::read(&body, &stat) {
            Some(p) if p.envelope.placed.as_deref() != Some(id) => Waits::Gone,
            Some(p) if p.due_ms() > now_ms => Waits::NotYet,
            Some(p) => Waits::Ready(Box::new(p.envelope), stat.version),
            None => Waits::Gone,
        })
    }

    /// Writes `task` (waiting at the target path, read at its version) into place `name`
    /// (read at `version`), in one multi-op with the target's delete.
    async fn fill_place(
        self,
        name: &str,
        version: i32,
        target: &str,
        at: i32,
        task: &Envelope,
    ) -> Result<PlaceTaken> {
        let mut task = task.clone();
        task.placed = None;
        let body = task.to_bytes()?;
        let path = self.layout().task(name);
        let mut multi = Multi::new();
        multi
            .push(Part::Waiting, Op::Delete(target, at))
            .push(Part::Task, Op::Set(&path, &body, version));
        let failed = match self.commit("take place", &multi).await? {
            Ok(results) => match multi.result(&results, Part::Task) {
                Some(zk::MultiWriteResult::SetData { stat }) => {
                    tracing::debug!(task = %name, id = %task.id, "task in its place");
                    return Ok(PlaceTaken::Filled(Box::new(task), body, *stat));
                }
                other => {
                    let e = zk::Error::UnexpectedError(format!("place write returned {other:?}"));
                    return Err(Error::zk("take place", path, e));
                }
            },
            Err(failed) => failed,
        };
        use zk::Error::{BadVersion, NoNode};
        Ok(match (failed.tag, &failed.error) {
            (Part::Task, BadVersion | NoNode) => PlaceTaken::Taken,
            // Changed meanwhile (a parent, a publish of the key): looked at again later.
            (Part::Waiting, BadVersion | NoNode) => PlaceTaken::NotReady,
            _ => return Err(failed.unexpected("take place")),
        })
    }

    /// The dead letter `letter` as a place's ending: its reason, when it is still there.
    async fn letter_of(self, letter: &str) -> Result<Ending> {
        let read = self.read_path(&self.layout().dead_letter(letter)).await?;
        let reason = read
            .and_then(|(data, _)| serde_json::from_slice::<Value>(&data).ok())
            .and_then(|record| record["reason"].as_str().map(str::to_string));
        Ok(Ending {
            letter: letter.to_string(),
            why: match reason {
                Some(reason) => format!("{letter} went to the dead letters: {reason}"),
                None => format!("{letter} went to the dead letters"),
            },
        })
    }

    /// Deletes place `name` (read at `version`), whose task ended as `ending`, pausing its
    /// group there when `on_dead` says so: with a lock of its own when the group has none,
    /// as it is when it is paused already; another task's lock holds the place back.
    async fn end_place(
        self,
        name: &str,
        version: i32,
        place: &Place,
        on_dead: OnDead,
        ending: &Ending,
    ) -> Result<PlaceTaken> {
        let path = self.layout().task(name);
        let lock_path = self.layout().group(&place.group);
        let lock = serde_json::to_vec(&GroupLock {
            paused: Some(ending.why.clone()),
            ..GroupLock::held_by(&place.id, &ending.letter)
        })?;
        super::write::run(
            &self,
            EndPlace {
                name,
                path,
                version,
                place,
                ending,
                lock_path,
                lock,
                pause: on_dead == OnDead::Pause,
            },
        )
        .await
    }
}

/// Where the task a place stands for is.
enum Waits {
    /// Ready, with the version it was read at.
    Ready(Box<Envelope>, i32),
    NotYet,
    /// Gone: it died, or was withdrawn.
    Gone,
}

/// How a place's task ended: the name it left (a dead letter's), and why, as its group's
/// pause says.
struct Ending {
    letter: String,
    why: String,
}

/// A place deleted (at `version`) whose task ended as `ending`, its group paused there with a
/// lock of its own when `pause` says so.
struct EndPlace<'a> {
    name: &'a str,
    path: String,
    version: i32,
    place: &'a Place,
    ending: &'a Ending,
    lock_path: String,
    lock: Vec<u8>,
    pause: bool,
}

impl Write for EndPlace<'_> {
    type Tag = Part;
    type Out = PlaceTaken;
    const WHAT: &'static str = "end place";
    const TRIES: Tries = Tries::Few;

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        multi.push(Part::Task, Op::Delete(&self.path, self.version));
        if self.pause {
            multi.push(Part::Lock, Op::Create(&self.lock_path, &self.lock));
        }
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<PlaceTaken> {
        tracing::info!(task = %self.name, group = %self.place.group, paused = self.pause,
            why = %self.ending.why, "place ended");
        Ok(PlaceTaken::Ended { paused: self.pause })
    }

    async fn failed(&mut self, queue: &Queue, failed: Failed<Part>) -> Result<Next<PlaceTaken>> {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        match (failed.tag, &failed.error) {
            (Part::Task, BadVersion | NoNode) => return Ok(Next::Stop(PlaceTaken::Taken)),
            (Part::Lock, NoNode) => {
                let groups = queue.layout().groups();
                queue.cancels().ensure_parent(&groups).await?
            }
            (Part::Lock, NodeExists) => match queue.groups().group_lock(&self.place.group).await? {
                // Paused already: it stays so, and the place goes.
                Some(read) if read.lock.paused.is_some() => self.pause = false,
                Some(read) => return Ok(Next::Stop(PlaceTaken::GroupBusy(read.lock.id))),
                None => {}
            },
            _ => return Err(failed.unexpected(Self::WHAT)),
        }
        Ok(Next::Again)
    }

    fn exhausted(&self) -> Result<PlaceTaken> {
        Ok(PlaceTaken::Taken)
    }
}
