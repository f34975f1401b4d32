//! Ending tasks: the one multi-op that takes tasks out of the queue for good, completed or
//! dead, whoever has them. Completion ([`Queue::complete_many`]), burial of a held, pending
//! or waiting task ([`Queue::bury`]), a blocked child's death with its parent and the cancel
//! of a blocked child all describe each task as an [`Ending`] and commit through
//! [`Queue::end`]: one builder, and one map ([`answer`]) from the operation that failed a try
//! to what the next try does.
//!
//! Each task's part of the multi-op:
//!
//! - its removal, checked where it is ([`Where`]): its holder's task and lease versions; a
//!   guard lease created and deleted around it when nobody holds it (the multi-op fails when
//!   someone does); its waiting node's version under `delayed/` or `after/`;
//! - its dead letter, when it dies ([`To`]);
//! - what goes with it: its group's lock (released, or turned into the group's pause), the
//!   slots it held in gates; the writes registered features add to its ending (`Feature::at_end`: its idempotency
//!   key's, its completion record, its cancel mark's delete, …), each of which its feature
//!   answers when it fails the multi-op (`Feature::after_failure`);
//! - the writes of the features' parts in the ending (`Feature::end_part`): writes that span
//!   the tasks, or rest on what the feature read, asked again at each try (a batch's counters
//!   and its callback, `features/batches/`; the markers for the children that wait for the
//!   tasks, `features/dependencies/`), and asked what follows from the ending (run once it is
//!   over and the parts let go of what they held).
//!
//! A failed try changes nothing. The part that failed it is read again (a lease whose
//! extension landed unseen, what a feature's part read), or left out when the task can end without it (a lock
//! that changed hands, a feature's write its feature leaves out), or rewritten as its feature
//! says, or it decides that task's
//! [`Settled`] (gone, lease lost, moved) and the others are committed again without it.

use zookeeper_client as zk;

use super::Queue;
use super::gate_cache::Freeing;
use super::group_lock::Release;
use super::held::{Lease, Settled};
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::record::DeadLetter;
use super::slots::{Rename, Shrink, SlotShare, push_rename};
use super::write::{self, Next, Read, Tries, Write};
use crate::error::Result;
use crate::feature::{AfterEnd, EndParts, EndWrite};

/// Where a task is when it ends: what its removal is checked against.
#[derive(Debug)]
pub(super) enum Where {
    /// Held under `lease`: task and lease deleted at their holder's versions.
    Held {
        lease: Box<Lease>,
        task: String,
        lease_path: String,
    },
    /// In its lane at `path`, read at `version`, held by nobody: a guard lease (`guard` its
    /// data) created and deleted around its removal. Replaced by `tombstone` when it has one
    /// (see `bury`'s `tombstone_of`).
    Unclaimed {
        path: String,
        lease_path: String,
        guard: Vec<u8>,
        version: i32,
        tombstone: Option<Vec<u8>>,
    },
    /// Waiting under `delayed/` at `path`, read at `version`.
    Waiting { path: String, version: i32 },
    /// A child waiting for its parents under `after/` at `path`, read at `version`; `entry`:
    /// its entry under the parent whose death it dies with, deleted with it.
    Blocked {
        path: String,
        version: i32,
        entry: Option<String>,
    },
}

/// How a task ends.
#[derive(Debug)]
pub(super) enum To {
    /// Completed.
    Completed,
    /// Dead: its dead letter.
    Dead { letter: Box<DeadLetter> },
}

/// One task on its way out of the queue, and everything its ending writes.
#[derive(Debug)]
pub(super) struct Ending {
    /// Its name (in its lane, or `after-<id>`), as the outcome reports it.
    pub(super) name: String,
    pub(super) from: Where,
    pub(super) to: To,
    /// Its group's lock, when it holds it.
    pub(super) lock: Option<Release>,
    /// The shares of slots it holds in gates, freed in the same multi-op.
    pub(super) slots: Vec<SlotShare>,
    /// The writes registered features add to it (`Feature::at_end`), each with the
    /// feature's index in the registry.
    pub(super) writes: Vec<(usize, EndWrite)>,
    /// Whether its lease was read again once already (an extension whose answer was lost).
    reread: bool,
    /// Its index among the endings the call began with (the features' parts know it so).
    at: usize,
}

impl Ending {
    pub(super) fn new(name: String, from: Where, to: To) -> Self {
        Ending {
            name,
            from,
            to,
            lock: None,
            slots: Vec::new(),
            writes: Vec::new(),
            reread: false,
            at: 0,
        }
    }

    /// What the features' writes add to a request (see `request_size`).
    pub(super) fn write_bytes(&self) -> usize {
        self.writes.iter().map(|(_, write)| write.bytes()).sum()
    }

    fn held(&self) -> bool {
        matches!(self.from, Where::Held { .. })
    }

    /// Its operations, tagged with its index `i`.
    fn push<'a>(&'a self, multi: &mut Multi<'a, (usize, Part)>, i: usize) {
        let tag = |part| (i, part);
        match &self.from {
            Where::Held {
                lease,
                task,
                lease_path,
            } => {
                multi
                    .push(tag(Part::Task), Op::Delete(task, lease.task_version))
                    .push(
                        tag(Part::Lease),
                        Op::Delete(lease_path, lease.lease_version),
                    );
            }
            Where::Unclaimed {
                path,
                lease_path,
                guard,
                version,
                tombstone,
            } => {
                let removal = match tombstone {
                    Some(place) => Op::Set(path, place, *version),
                    None => Op::Delete(path, *version),
                };
                multi
                    .push(tag(Part::Guard), Op::Create(lease_path, guard))
                    .push(tag(Part::Task), removal)
                    .push(tag(Part::Guard), Op::Delete(lease_path, -1));
            }
            Where::Waiting { path, version } => {
                multi.push(tag(Part::Waiting), Op::Delete(path, *version));
            }
            Where::Blocked {
                path,
                version,
                entry,
            } => {
                let entry = entry.as_deref().map(|e| Op::Delete(e, -1));
                multi
                    .push_some(tag(Part::Parent), entry)
                    .push(tag(Part::Blocked), Op::Delete(path, *version));
            }
        }
        if let To::Dead { letter } = &self.to {
            letter.push(multi, tag(Part::Record));
        }
        for (k, (_, write)) in self.writes.iter().enumerate() {
            push_write(multi, tag(Part::Feature(k as u16)), write);
        }
        multi.push_some(tag(Part::Lock), self.lock.as_ref().map(Release::op));
    }
}

/// Pushes a feature's `write` (see `Feature::at_end`, `Feature::at_release`) as `tag`.
pub(super) fn push_write<'a, T: Copy + PartialEq>(
    multi: &mut Multi<'a, T>,
    tag: T,
    write: &'a EndWrite,
) {
    match write {
        EndWrite::Set {
            path,
            data,
            version,
        } => multi.push(tag, Op::Set(path, data, version.unwrap_or(-1))),
        EndWrite::Create { path, data } => multi.push(tag, Op::Create(path, data)),
        EndWrite::CreateSequential { prefix, data } => {
            multi.push(tag, Op::CreateSequential(prefix, data))
        }
        EndWrite::Delete { path, version } => {
            multi.push(tag, Op::Delete(path, version.unwrap_or(-1)))
        }
        EndWrite::Check { path, version } => multi.push(tag, Op::Check(path, *version)),
        EndWrite::Absent { path } => multi
            .push(tag, Op::Create(path, b""))
            .push(tag, Op::Delete(path, -1)),
    };
}

/// What the next try does after one part of an ending failed the multi-op.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Try again: the part was left out or will be written differently.
    Again,
    /// Read the lease again: an extension whose answer was lost may have landed.
    Lease,
    /// The task ends so, and the others go on without it.
    Ended(Settled),
    /// Nothing explains it.
    Unexpected,
}

/// The one map from the part that failed a try (`part`, with `error`) to what becomes of
/// `ending` (changed here when a part is left out or renamed).
fn answer(ending: &mut Ending, part: Part, error: &zk::Error) -> Answer {
    use zk::Error::{BadVersion, NoNode, NodeExists};
    let held = ending.held();
    match (part, error) {
        // A record of an earlier queue under the same root (or sequence numbers wrapped) has
        // the name: this one gets a name of its own.
        (Part::Record, NodeExists) => match &mut ending.to {
            To::Dead { letter } => match letter.rename() {
                true => Answer::Again,
                false => Answer::Unexpected,
            },
            To::Completed => Answer::Unexpected,
        },
        // The lock changed hands (an operator unpaused the group): not ours to write.
        (Part::Lock, BadVersion | NoNode | NodeExists) => {
            ending.lock = None;
            Answer::Again
        }
        (Part::Lease, BadVersion) if held && !std::mem::replace(&mut ending.reread, true) => {
            Answer::Lease
        }
        (Part::Task | Part::Waiting | Part::Blocked | Part::Parent, NoNode) => {
            Answer::Ended(Settled::Gone)
        }
        (Part::Task | Part::Lease, BadVersion | NoNode) if held => {
            Answer::Ended(Settled::LeaseLost)
        }
        (Part::Guard, NodeExists) | (Part::Task | Part::Waiting | Part::Blocked, BadVersion) => {
            Answer::Ended(Settled::Moved)
        }
        _ => Answer::Unexpected,
    }
}

/// How each ending came out, and what follows from it (the parts' [`AfterEnd`]s, run by
/// [`Queue::end`] once the parts let go of what they held).
pub(super) struct Ended {
    pub(super) settled: Vec<(String, Settled)>,
    after: Vec<Box<dyn AfterEnd>>,
}

/// One call of [`Queue::end`], as a [`Write`]: the endings still to commit, how the others
/// came out, what its tries read, and what this try writes besides the endings.
struct Call {
    what: &'static str,
    endings: Vec<Ending>,
    settled: Vec<(String, Settled)>,
    /// The features' parts, and their writes of this try, a list each.
    parts: EndParts,
    part_writes: Vec<Vec<EndWrite>>,
    /// This try's slot writes: the shrinks locked, their renames, the frees they send.
    shrinks: Vec<Shrink>,
    renames: Vec<Rename>,
    freeing: Vec<Freeing>,
}

impl Write for Call {
    type Tag = (usize, Part);
    type Out = Ended;
    const WHAT: &'static str = "end";
    const TRIES: Tries = Tries::Answers;

    fn what(&self) -> &'static str {
        self.what
    }

    /// The features' parts' writes and the slots' renames of this try; done when no ending
    /// is left.
    async fn read(&mut self, queue: &Queue) -> Result<Read<Ended>> {
        if self.endings.is_empty() {
            let settled = std::mem::take(&mut self.settled);
            let after = Vec::new();
            return Ok(Read::Stop(Ended { settled, after }));
        }
        let still: Vec<usize> = self.endings.iter().map(|e| e.at).collect();
        self.part_writes = (self.parts.0.iter_mut())
            .map(|(_, part)| part.writes(&still))
            .collect();
        let shares: Vec<SlotShare> = (self.endings.iter())
            .flat_map(|e| e.slots.clone())
            .collect();
        // The gates' recipe only when a task holds a slot.
        if !shares.is_empty() {
            self.shrinks = queue.gates().shrinks(&shares).await?;
            (self.renames, self.freeing) = queue.gates().slot_frees(&self.shrinks);
        }
        Ok(Read::Write)
    }

    /// Each ending's part, the features' parts' writes, the slots' renames.
    fn build<'a>(&'a self, multi: &mut Multi<'a, (usize, Part)>) {
        for (i, ending) in self.endings.iter().enumerate() {
            ending.push(multi, i);
        }
        for (p, writes) in self.part_writes.iter().enumerate() {
            for (k, write) in writes.iter().enumerate() {
                push_write(multi, (p, Part::Shared(k as u16)), write);
            }
        }
        for (k, rename) in self.renames.iter().enumerate() {
            push_rename(multi, (k, Part::Slot), rename);
        }
    }

    /// The slots freed, the features' parts told, each ended task's letter logged and
    /// forwarded, and what follows from the ending taken from the parts (which let go of
    /// what they held when this returns).
    async fn landed(mut self, queue: &Queue, landed: Landed<(usize, Part)>) -> Result<Ended> {
        if !self.freeing.is_empty() {
            queue.memory.gates.freed(&self.freeing);
        }
        self.shrinks.into_iter().for_each(Shrink::done);
        let site = queue.site();
        for (p, (_, part)) in self.parts.0.iter_mut().enumerate() {
            let results = (0..self.part_writes[p].len())
                .filter_map(|k| landed.result((p, Part::Shared(k as u16))))
                .collect();
            part.landed(&site, results).await;
        }
        let mut ended = queue.ended(self.endings, self.settled).await;
        ended.after = (self.parts.0.iter_mut())
            .filter_map(|(_, part)| part.after())
            .collect();
        Ok(ended)
    }

    /// A slot gone with the session that made it (one replaced while the handler ran): its
    /// tasks hold nothing any more. Else the ending whose part failed is answered (see
    /// [`answer`]). Nothing else of the multi-op landed.
    async fn failed(
        &mut self,
        queue: &Queue,
        failed: Failed<(usize, Part)>,
    ) -> Result<Next<Ended>> {
        let mut shrinks = std::mem::take(&mut self.shrinks);
        (self.renames, self.freeing) = Default::default();
        if failed.tag.1 == Part::Slot {
            if failed.error != zk::Error::NoNode {
                let (slot, error) = (&failed.path, &failed.error);
                tracing::warn!(%slot, %error, "slot left to its session's end");
            }
            shrinks.remove(failed.tag.0).gone();
        }
        shrinks.into_iter().for_each(Shrink::unchanged);
        if failed.tag.1 != Part::Slot {
            self.after_failure(queue, failed).await?;
        }
        Ok(Next::Again)
    }

    fn exhausted(&self) -> Result<Ended> {
        unreachable!("an ending's answers bound its tries")
    }
}

impl Call {
    /// Catches up after `failed` failed its multi-op (see [`answer`]).
    async fn after_failure(&mut self, queue: &Queue, failed: Failed<(usize, Part)>) -> Result<()> {
        let (at, part) = failed.tag;
        // A write of a feature's part: the part answers.
        if let Part::Shared(k) = part {
            let site = queue.site();
            let part = &mut self.parts.0[at].1;
            return match part.failed(&site, usize::from(k), &failed.error).await? {
                true => Ok(()),
                false => Err(failed.unexpected(self.what)),
            };
        }
        let ending = &mut self.endings[at];
        // A feature's own write: the feature answers.
        if let Part::Feature(k) = part {
            let (feature, write) = &ending.writes[usize::from(k)];
            let answer = queue
                .features()
                .after_failure(*feature, write, &failed.error);
            return match answer.apply(&mut ending.writes, usize::from(k)) {
                true => Ok(()),
                false => Err(failed.unexpected(self.what)),
            };
        }
        let outcome = match answer(ending, part, &failed.error) {
            Answer::Again => return Ok(()),
            Answer::Lease => {
                if let Where::Held { lease, .. } = &mut ending.from
                    && queue.still_ours(lease).await?
                {
                    return Ok(());
                }
                Settled::LeaseLost
            }
            Answer::Ended(outcome) => outcome,
            Answer::Unexpected => return Err(failed.unexpected(self.what)),
        };
        let ending = self.endings.remove(at);
        self.settled.push(queue.not_ended(ending, outcome).await);
        Ok(())
    }
}

impl Queue {
    /// Ends `endings` in one multi-op (see the module documentation), with the features'
    /// `parts` in it (made for these endings, in this order), committed again without the part
    /// or the task that failed a try, until it lands; `what` names it in errors.
    pub(super) async fn end(
        &self,
        what: &'static str,
        mut endings: Vec<Ending>,
        parts: EndParts,
    ) -> Result<Ended> {
        for (at, ending) in endings.iter_mut().enumerate() {
            ending.at = at;
        }
        let call = Call {
            what,
            settled: Vec::with_capacity(endings.len()),
            endings,
            parts,
            part_writes: Vec::new(),
            shrinks: Vec::new(),
            renames: Vec::new(),
            freeing: Vec::new(),
        };
        let mut ended = write::run(self, call).await?;
        let site = self.site();
        for after in std::mem::take(&mut ended.after) {
            after.run(&site).await;
        }
        Ok(ended)
    }

    /// After the multi-op of `endings` landed: each dead letter logged and forwarded.
    async fn ended(&self, endings: Vec<Ending>, mut settled: Vec<(String, Settled)>) -> Ended {
        for ending in endings {
            if let To::Dead { letter } = &ending.to {
                let (task, reason) = (&ending.name, &letter.reason);
                let consumer = self.consumer_id();
                tracing::warn!(%task, %consumer, %reason, "task dead-lettered");
                letter.landed(self).await;
            }
            settled.push((ending.name, Settled::Done));
        }
        Ended {
            settled,
            after: Vec::new(),
        }
    }

    /// A task left out of the multi-op: `outcome` decided it. The slots it held are freed, as
    /// a handler's end does when its task is not completed.
    async fn not_ended(&self, mut ending: Ending, outcome: Settled) -> (String, Settled) {
        let shares = std::mem::take(&mut ending.slots);
        self.gates().free_slots(&shares).await;
        let task = &ending.name;
        match (&ending.to, outcome) {
            (To::Completed, Settled::Gone) => {
                tracing::info!(%task, "already gone: nothing to complete")
            }
            (To::Completed, _) => {
                tracing::warn!(%task, "lease lost before completing; nothing changed")
            }
            (To::Dead { .. }, _) => tracing::debug!(%task, ?outcome, "not buried"),
        }
        (ending.name, outcome)
    }
}
