//! The audit that nothing is stuck: every task that has not ended has a way out.
//!
//! Most states carry their own way out, which nothing can take away: a lease expires and the
//! reaper frees it, a waiting or debounced task has its due time, a pause is lifted by
//! `resume`, a pending task is claimed or held back by one of those. Three states wait for
//! something another znode stands for, and that znode can be gone or wrong while the task
//! waits on. Those are what the audit looks at, a bounded sample each run
//! ([`AUDIT_PER_RUN`] of each, from a place that moves from run to run):
//!
//! - **A child whose parent cannot release it.** A child under `after/` waits for each parent
//!   it names through its entry under the parent's marker (`dependents/<parent>/<child>`): the
//!   parent's end settles the entries under its marker. A child that names a parent under
//!   whose marker it has no entry is never settled. Not repaired: how the parent ended is not
//!   known; the line names the parent and the ways out (`cancel`, or the parent's marker set by
//!   hand).
//! - **A child whose parent is gone.** A parent ends through one of our consumers, which
//!   writes its marker in the same multi-op. A 000-design consumer completes a task by deleting
//!   it, and a task's znode may be deleted by hand: the marker stays unsettled, and the
//!   children wait for good. A parent whose marker is unsettled is looked for where its
//!   child's entry saw it, then (at most [`PARENTS_LOOKED_FOR`] a run) by id, as a child's
//!   publish looks for a parent, twice, between two reads of the marker (see
//!   `queue::parents::gone`). Not repaired: only a person knows whether the parent did its
//!   work; the line names `event-bridge end-parent`, which takes it as completed or dead, and
//!   `cancel`.
//! - **A group behind a task that is gone.** A group's lock names the task that holds it, and
//!   where it is: in its lane under its name, or under `delayed/` while it waits out a retry
//!   (the release writes that into the lock), or back in its lane under a name its next claim
//!   writes (`moved`, not judged). A lock whose task is not where it says holds its group back
//!   for good (a 000-design consumer completed the task after its lease was reaped, or it was
//!   deleted by hand). Repaired: the lock is deleted at the version read, and the group goes on.
//! - **A slot that counts tasks no longer held.** A slot in a gate belongs to the claim that
//!   made it (see `queue::slots`): while any of that claim's leases stands, it counts. A slot
//!   none of whose claim's leases stands shrinks its gate for as long as its session lives.
//!   Not repaired: its consumer may be frozen with a request still open, and only the end of
//!   its session says it will not wake (ZooKeeper then deletes the slot); a consumer whose free
//!   was lost sends it again every second.
//!
//! Each finding is confirmed before it counts: the child, the lock or the slot is read again
//! after the reads that judged it, and counts only when it did not change in between (a
//! settlement, a promotion or a free between the reads would otherwise look like a stuck
//! state).
//!
//! # Bounds
//!
//! The sample's reads are bounded; its listings (`after/`, `groups/`, the gates, `leases/`) are
//! as long as what they hold, never the lanes' backlog, and a parent with more than 20 000
//! children is not listed (that run does not audit it, and says so in a warning). The one
//! exception: a parent with an unsettled marker that is not where its child's entry saw it (a
//! parent published in the same call as its child, one that a retry moved, or one a child of an
//! earlier version names) is looked for by id, which walks the queue as `status` by id does: at
//! most [`PARENTS_LOOKED_FOR`] such parent a run, taken in turn. With `GONE_PARENTS=completed`
//! (only 000 consumers delete tasks, and only what succeeded) the reaper takes a gone parent as
//! completed and sees to its children.
//!
//! # What the lock and the slot say
//!
//! So that a lock always says where its task is, the release that moves a grouped task under
//! `delayed/` writes the waiting node's name into the lock (at the version its claim left, in the
//! release's multi-op), and the promotion that moves it back writes `moved` (at the version read,
//! in the promotion's multi-op: one read of the lock per grouped promotion); the next claim
//! rewrites the lock with the task's new name. Not judged: a grouped task between its backoff's
//! end and its next claim.
//!
//! A slot whose claim has no lease is first kept as a suspect, with when it was first seen so,
//! and counts as stuck once it stayed so for [`SLOT_GRACE_MS`] (a frozen consumer whose lease was
//! reaped loses its session, and the slot, within that); it is then kept as stuck in every run
//! until it is gone. A first version deleted such a slot: the contract checker then saw a slot
//! deleted 0.7 s after its free was lost with the link, which its consumer sends again every
//! second anyway. The slots are read before the leases, so a claim since made both after them.
//! Slots an earlier version renamed have empty data and read as a claim with no lease: reported
//! after an upgrade, until their claims end.
//!
//! # Findings
//!
//! The run logs each finding (`stuck state found`, with its line), counts it (`stuck_tasks`,
//! `stuck_repaired`, in the report, the EMF line and the worker's Prometheus gauge), and keeps the
//! first [`LINES_KEPT`] lines in `ROOT/audit` ([`keep`]), which every run writes, with no line
//! when it finds nothing, so that its `at_ms` is when the reaper last ran (`doctor` judges its
//! age); `stats` reads it in its one multi-read.

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::config::GoneParents;
use crate::error::{Error, Result};
use crate::layout::decode_segment;
use crate::queue::{GroupLock, ParentLook, Queue, TakenAs, claim_token};
use crate::stats::{AuditRecord, Suspect};
use crate::task::after::{ChildEntry, ParentEnd};
use crate::task::{self, Body};

/// Blocked children, group locks and gates looked at per run, at most, each.
pub const AUDIT_PER_RUN: usize = 64;

/// Znodes read in one multi-read.
const READ_BATCH: usize = 64;

/// How long a slot no lease holds stays a suspect before it counts as stuck: longer than any
/// session ZooKeeper grants by default (20 ticks of 2 s), so that a consumer frozen with its
/// lease reaped has lost its session (and its slot) by then, and a free lost with the link has
/// been sent again many times.
pub const SLOT_GRACE_MS: i64 = 60_000;

/// Parents looked for by id per run, at most: each look walks the queue, as `status` by id
/// does (twice, to be sure).
pub const PARENTS_LOOKED_FOR: usize = 1;

/// Children a listing of the audit takes, at most (20 000 task names are about 400 KB).
const LIST_MAX: usize = 20_000;

/// Findings kept in the audit's record (`ROOT/audit`, [`AuditRecord`]) for `stats` and the
/// dashboard.
pub const LINES_KEPT: usize = 10;

/// What one audit found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Audit {
    /// Blocked children, group locks and slots judged.
    pub looked_at: usize,
    /// The stuck states found (repaired or not).
    pub stuck: Vec<Stuck>,
    /// Slots no lease holds, each with when it was first seen so: judged again next run from
    /// that moment. Those seen so for [`SLOT_GRACE_MS`] are in `stuck` too; the others' session
    /// may still end (a frozen consumer, a free on its way again).
    pub suspects: Vec<Suspect>,
}

impl Audit {
    /// How many of its findings were repaired.
    pub fn repaired(&self) -> usize {
        self.stuck.iter().filter(|s| s.repaired()).count()
    }
}

/// A state with no way out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stuck {
    /// Child `child` (an envelope id) waits for `parent`, under whose marker it has no entry.
    Orphan {
        /// The child's envelope id.
        child: String,
        /// The parent it names.
        parent: String,
    },
    /// Group `group`'s lock names `task` (id `id`), which is not where the lock says.
    HeadGone {
        /// The group.
        group: String,
        /// The task name the lock names.
        task: String,
        /// That task's envelope id.
        id: String,
        /// Whether the lock was deleted (at the version read), letting the group go on.
        repaired: bool,
    },
    /// Slot `slot` of gate `gate` counts tasks of a claim none of whose leases stands.
    SlotHeld {
        /// The gate.
        gate: String,
        /// The slot's znode name.
        slot: String,
    },
    /// Child `child` waits for `parent`, which is gone from the queue without an end: not
    /// pending, held, waiting, waiting for parents of its own, dead, nor completed with a
    /// record, and its marker unsettled. Repaired (with `GONE_PARENTS=completed`): the parent
    /// was taken as completed, and its children went on.
    ParentGone {
        /// The child's envelope id.
        child: String,
        /// The parent's id, as the child names it.
        parent: String,
        /// Whether the parent was taken as completed (`GONE_PARENTS=completed`).
        repaired: bool,
    },
}

impl Stuck {
    fn repaired(&self) -> bool {
        match self {
            Stuck::Orphan { .. } | Stuck::SlotHeld { .. } => false,
            Stuck::HeadGone { repaired, .. } | Stuck::ParentGone { repaired, .. } => *repaired,
        }
    }

    /// What is stuck, and what lets it go.
    pub fn line(&self) -> String {
        match self {
            Stuck::Orphan { child, parent } => format!(
                "stuck: child {child} waits for parent {parent}, which cannot release it (no \
                 entry under its marker); `cancel {child}` ends it"
            ),
            Stuck::HeadGone {
                group, task, id, ..
            } => format!(
                "stuck: group {group} is held by {task} (id {id}), which is gone{}",
                self.fix(", so its lock was deleted and the group goes on")
            ),
            Stuck::ParentGone {
                child,
                parent,
                repaired: true,
            } => format!(
                "stuck: child {child} waited for parent {parent}, which was gone from the queue \
                 without an end, so it was taken as completed (GONE_PARENTS=completed) and its \
                 children went on"
            ),
            Stuck::ParentGone { child, parent, .. } => format!(
                "stuck: child {child} waits for parent {parent}, which is gone from the queue \
                 without an end (not pending, held, waiting, dead, nor completed with a record: \
                 a 000-design consumer completed it, or it was deleted by hand); \
                 `event-bridge end-parent {parent} --as completed` (or `--as dead`) lets its \
                 children go on, `cancel {child}` ends this one"
            ),
            Stuck::SlotHeld { gate, slot } => format!(
                "stuck: slot {slot} of gate {gate} counts tasks no lease holds; it goes with \
                 its consumer's session (stop or restart that consumer to free it now)"
            ),
        }
    }

    fn fix(&self, what: &str) -> String {
        match self.repaired() {
            true => what.to_string(),
            false => ": the next reaper run repairs it".to_string(),
        }
    }
}

/// Keeps what `audit` found at `now` in `ROOT/audit`, also when it found nothing: the record's
/// `at_ms` is when the reaper last ran (`event-bridge doctor` judges its age). One request.
pub async fn keep(queue: &Queue, now: &ZkTime, audit: &Audit) -> Result<()> {
    let path = queue.layout().audit();
    let record = AuditRecord {
        at_ms: now.now_ms(),
        stuck_tasks: audit.stuck.len(),
        repaired: audit.repaired(),
        lines: audit
            .stuck
            .iter()
            .take(LINES_KEPT)
            .map(Stuck::line)
            .collect(),
        suspects: audit.suspects.clone(),
    };
    let data = serde_json::to_vec(&record)?;
    match queue.client().set_data(&path, &data, None).await {
        Ok(_) => Ok(()),
        Err(zk::Error::NoNode) => {
            let options = queue.created(zk::CreateMode::Persistent);
            match queue.client().create(&path, &data, &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(e) => Err(Error::zk("create", path, e)),
            }
        }
        Err(e) => Err(Error::zk("set", path, e)),
    }
}

/// Looks at a sample of blocked children, group locks and gates (where the sample starts
/// moves with `now`), and repairs what it safely can when `repair`. A slot no lease holds is a
/// suspect first, and stuck once the last record (`ROOT/audit`) has had it as one for
/// [`SLOT_GRACE_MS`].
pub async fn audit(queue: &Queue, now: &ZkTime, repair: bool) -> Result<Audit> {
    let turn = (now.now_ms() / 1_000).max(0) as usize;
    let mut audit = Audit::default();
    children(queue, turn, repair, &mut audit).await?;
    locks(queue, turn, repair, &mut audit).await?;
    let before = last_record(queue)
        .await?
        .map_or_else(Vec::new, |r| r.suspects);
    slots(queue, turn, now.now_ms(), &before, &mut audit).await?;
    for stuck in &audit.stuck {
        tracing::warn!(finding = %stuck.line(), repaired = stuck.repaired(), "stuck state found");
    }
    Ok(audit)
}

/// The children of `path` (none when it is missing, or when it has more than [`LIST_MAX`]:
/// their listing would near ZooKeeper's 1 MB answer, and they are not audited this run).
async fn list(queue: &Queue, path: &str) -> Result<Vec<String>> {
    let Some((_, stat)) = queue.read_path(path).await? else {
        return Ok(Vec::new());
    };
    if stat.num_children as usize > LIST_MAX {
        tracing::warn!(
            path,
            children = stat.num_children,
            "too many to audit: not looked at"
        );
        return Ok(Vec::new());
    }
    match queue.client().list_children(path).await {
        Ok(mut names) => {
            names.sort_unstable();
            Ok(names)
        }
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Error::zk("list", path, e)),
    }
}

/// At most [`AUDIT_PER_RUN`] of `names`, starting at the `turn`-th (wrapping).
fn sample(names: Vec<String>, turn: usize) -> Vec<String> {
    taken_in_turn(names, turn, AUDIT_PER_RUN)
}

/// At most `most` of `items`, starting at the `turn`-th (wrapping).
fn taken_in_turn<T>(mut items: Vec<T>, turn: usize, most: usize) -> Vec<T> {
    if items.len() > most {
        let start = turn % items.len();
        items.rotate_left(start);
        items.truncate(most);
    }
    items
}

/// `paths` read, [`READ_BATCH`] to a request.
async fn read_all(queue: &Queue, paths: &[String]) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    let mut reads = Vec::with_capacity(paths.len());
    for chunk in paths.chunks(READ_BATCH) {
        reads.extend(queue.read_paths(chunk).await?);
    }
    Ok(reads)
}

/// Whether the znode read as `before` still is (same `mzxid`: nothing wrote it since).
async fn unchanged(queue: &Queue, path: &str, before: &zk::Stat) -> Result<bool> {
    Ok(queue
        .read_path(path)
        .await?
        .is_some_and(|(_, stat)| stat.mzxid == before.mzxid && stat.czxid == before.czxid))
}

/// A blocked child waiting for one of its parents, as the audit read it.
struct Waiting {
    child: String,
    parent: String,
    /// The child's node, and its stat when read.
    path: String,
    stat: zk::Stat,
}

/// Blocked children naming a parent under whose marker they have no entry, or a parent gone
/// from the queue without an end (taken as completed when `repair` and `GONE_PARENTS` say so).
async fn children(queue: &Queue, turn: usize, repair: bool, audit: &mut Audit) -> Result<()> {
    let layout = queue.layout();
    let ids = sample(list(queue, &layout.after()).await?, turn);
    let paths: Vec<String> = ids
        .iter()
        .map(|id| layout.blocked(&decode_segment(id)))
        .collect();
    let mut pairs = Vec::new();
    for ((id, path), read) in ids.iter().zip(&paths).zip(read_all(queue, &paths).await?) {
        let Some((body, stat)) = read else { continue };
        audit.looked_at += 1;
        if let Body::Envelope(envelope) = task::parse(&body) {
            for parent in envelope.waiting_on {
                pairs.push(Waiting {
                    child: decode_segment(id),
                    parent,
                    path: path.clone(),
                    stat,
                });
            }
        }
    }
    let entries: Vec<String> = (pairs.iter())
        .map(|w| layout.dependent(&w.parent, &w.child))
        .collect();
    let mut registered = Vec::new();
    for (waiting, entry) in pairs.into_iter().zip(read_all(queue, &entries).await?) {
        match entry {
            Some((data, _)) => registered.push((waiting, ChildEntry::parse(&data))),
            None if unchanged(queue, &waiting.path, &waiting.stat).await? => {
                audit.stuck.push(Stuck::Orphan {
                    child: waiting.child,
                    parent: waiting.parent,
                });
            }
            None => {}
        }
    }
    gone_parents(queue, turn, repair, registered, audit).await
}

/// Children whose parent is gone from the queue without an end. Of the parents whose marker is
/// unsettled, each is looked for where its child's entry saw it (a few reads); those not
/// there are looked for by id, a walk of the queue each (see `queue::parents::gone`), at most
/// [`PARENTS_LOOKED_FOR`] a run, taken in turn. A gone parent is taken as completed when
/// `repair` and `GONE_PARENTS=completed` say so.
async fn gone_parents(
    queue: &Queue,
    turn: usize,
    repair: bool,
    registered: Vec<(Waiting, Option<ChildEntry>)>,
    audit: &mut Audit,
) -> Result<()> {
    let mut parents: Vec<(&str, Option<&ChildEntry>)> = Vec::new();
    for (waiting, entry) in &registered {
        match parents.iter_mut().find(|(p, _)| *p == waiting.parent) {
            Some((_, seen)) => *seen = seen.or(entry.as_ref()),
            None => parents.push((&waiting.parent, entry.as_ref())),
        }
    }
    let markers: Vec<String> = (parents.iter())
        .map(|(p, _)| queue.layout().dependents_of(p))
        .collect();
    let deps = queue.dependencies();
    let mut unseen = Vec::new();
    for ((parent, entry), marker) in parents.into_iter().zip(read_all(queue, &markers).await?) {
        // No marker: the entries say the rest. Ended: the reaper's sweep sees to its children.
        let unsettled = marker.is_some_and(|(data, _)| ParentEnd::parse(&data).is_none());
        if unsettled && !deps.seen_where_it_was(parent, entry).await? {
            unseen.push(parent);
        }
    }
    let mut gone = Vec::new();
    for parent in taken_in_turn(unseen, turn, PARENTS_LOOKED_FOR) {
        if let ParentLook::Gone { marker_version } = deps.look_for_parent(parent).await? {
            gone.push((parent.to_string(), marker_version));
        }
    }
    for (parent, marker_version) in gone {
        let children: Vec<&Waiting> = (registered.iter().map(|(w, _)| w))
            .filter(|w| w.parent == parent)
            .collect();
        let mut confirmed = Vec::new();
        for waiting in children {
            if unchanged(queue, &waiting.path, &waiting.stat).await? {
                confirmed.push(waiting.child.clone());
            }
        }
        let repaired = !confirmed.is_empty()
            && repair
            && queue.settings().gone_parents == GoneParents::Completed
            && (deps.take_as_ended(&parent, marker_version, TakenAs::Completed))
                .await?
                .is_some();
        (audit.stuck).extend(confirmed.into_iter().map(|child| Stuck::ParentGone {
            child,
            parent: parent.clone(),
            repaired,
        }));
    }
    Ok(())
}

/// Group locks whose task is not where they say.
async fn locks(queue: &Queue, turn: usize, repair: bool, audit: &mut Audit) -> Result<()> {
    let layout = queue.layout();
    let groups = sample(list(queue, &layout.groups()).await?, turn);
    let paths: Vec<String> = (groups.iter())
        .map(|g| format!("{}/{g}", layout.groups()))
        .collect();
    let reads = read_all(queue, &paths).await?;
    let mut held = Vec::new();
    for ((group, path), read) in groups.iter().zip(paths).zip(reads) {
        let Some((data, stat)) = read else { continue };
        audit.looked_at += 1;
        let Ok(lock) = serde_json::from_slice::<GroupLock>(&data) else {
            continue;
        };
        if lock.paused.is_some() || lock.moved {
            continue;
        }
        let at = match &lock.waiting {
            Some(waiting) => format!("{}/{waiting}", layout.delayed()),
            None => layout.task(&lock.task),
        };
        held.push((decode_segment(group), path, stat, lock, at));
    }
    let places: Vec<String> = held.iter().map(|h| h.4.clone()).collect();
    for ((group, path, stat, lock, _), found) in
        held.into_iter().zip(read_all(queue, &places).await?)
    {
        if found.is_some() || !unchanged(queue, &path, &stat).await? {
            continue;
        }
        let repaired = repair && delete(queue, &path, stat.version).await?;
        audit.stuck.push(Stuck::HeadGone {
            group,
            task: lock.task,
            id: lock.id,
            repaired,
        });
    }
    Ok(())
}

/// Slots none of whose claim's leases stands.
async fn slots(
    queue: &Queue,
    turn: usize,
    now_ms: i64,
    before: &[Suspect],
    audit: &mut Audit,
) -> Result<()> {
    let gates = gates(queue, turn).await?;
    // Suspects in gates outside this run's sample are carried as they were.
    let sampled = |path: &str| gates.iter().any(|g| path.starts_with(&format!("{g}/")));
    let unsampled: Vec<Suspect> = (before.iter())
        .filter(|s| !sampled(&s.path))
        .cloned()
        .collect();
    carry(queue, unsampled, now_ms, audit).await?;
    let mut paths = Vec::new();
    for gate in &gates {
        for name in list(queue, gate).await? {
            paths.push(format!("{gate}/{name}"));
        }
    }
    if paths.is_empty() {
        return Ok(());
    }
    let reads = read_all(queue, &paths).await?;
    // Read after the slots: a claim since made both its slot and its leases after them.
    let tokens = lease_tokens(queue).await?;
    for (path, read) in paths.into_iter().zip(reads) {
        let Some((data, stat)) = read else { continue };
        audit.looked_at += 1;
        if tokens.contains(&claim_token(&data, stat.czxid)) {
            continue;
        }
        if !unchanged(queue, &path, &stat).await? {
            continue;
        }
        let since_ms = (before.iter())
            .find(|s| s.path == path && s.czxid == stat.czxid)
            .map_or(now_ms, |s| s.since_ms);
        watch(
            audit,
            Suspect {
                path,
                czxid: stat.czxid,
                since_ms,
            },
            now_ms,
        );
    }
    Ok(())
}

/// Keeps watching `suspect`, a slot no lease holds, and counts it stuck once it has been so
/// for [`SLOT_GRACE_MS`]. A stuck slot stays among the suspects too, so that the next run
/// knows since when: once stuck, it stays counted until it is gone.
fn watch(audit: &mut Audit, suspect: Suspect, now_ms: i64) {
    if now_ms - suspect.since_ms >= SLOT_GRACE_MS {
        let mut parts = suspect.path.rsplit('/');
        let (slot, gate) = (parts.next().unwrap_or_default(), parts.next());
        audit.stuck.push(Stuck::SlotHeld {
            gate: gate.unwrap_or_default().to_string(),
            slot: slot.to_string(),
        });
    }
    audit.suspects.push(suspect);
}

/// The suspects of the last record in gates this run does not sample: each one whose slot
/// still stands as it was (the same `czxid`: its claim's leases never come back) is watched
/// on; one that is gone is dropped.
async fn carry(
    queue: &Queue,
    suspects: Vec<Suspect>,
    now_ms: i64,
    audit: &mut Audit,
) -> Result<()> {
    let paths: Vec<String> = suspects.iter().map(|s| s.path.clone()).collect();
    for (suspect, read) in suspects.into_iter().zip(read_all(queue, &paths).await?) {
        if read.is_some_and(|(_, stat)| stat.czxid == suspect.czxid) {
            watch(audit, suspect, now_ms);
        }
    }
    Ok(())
}

/// The last audit's record, if it kept one.
async fn last_record(queue: &Queue) -> Result<Option<AuditRecord>> {
    let path = queue.layout().audit();
    match queue.read_path(&path).await? {
        Some((data, _)) => Ok(Some(AuditRecord::parse(&path, &data)?)),
        None => Ok(None),
    }
}

/// The gates of limited routes and of concurrency keys, at most [`AUDIT_PER_RUN`].
async fn gates(queue: &Queue, turn: usize) -> Result<Vec<String>> {
    let layout = queue.layout();
    let mut gates: Vec<String> = (list(queue, &layout.limits()).await?.into_iter())
        .map(|route| layout.limit_gate(&route))
        .collect();
    for route in list(queue, &layout.concurrency()).await? {
        let dir = layout.key_gates(&route);
        gates.extend(
            list(queue, &dir)
                .await?
                .into_iter()
                .map(|k| format!("{dir}/{k}")),
        );
    }
    Ok(sample(gates, turn))
}

/// The fencing tokens (`czxid`) of the leases standing now.
async fn lease_tokens(queue: &Queue) -> Result<std::collections::HashSet<i64>> {
    let dir = queue.layout().leases();
    let paths: Vec<String> = (list(queue, &dir).await?.into_iter())
        .map(|n| format!("{dir}/{n}"))
        .collect();
    Ok((read_all(queue, &paths).await?.into_iter())
        .flatten()
        .map(|(_, stat)| stat.czxid)
        .collect())
}

/// Deletes `path` at `version`; `false` when it changed or went meanwhile.
async fn delete(queue: &Queue, path: &str, version: i32) -> Result<bool> {
    match queue.client().delete(path, Some(version)).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode | zk::Error::BadVersion | zk::Error::NotEmpty) => Ok(false),
        Err(e) => Err(Error::zk("delete", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_wraps_round_from_where_the_turn_starts_it() {
        let names: Vec<String> = (0..100).map(|i| format!("n{i:03}")).collect();
        let taken = sample(names.clone(), 90);
        assert_eq!(taken.len(), AUDIT_PER_RUN);
        assert_eq!(taken[0], "n090");
        assert_eq!(taken[10], "n000", "it wraps round");
        assert_eq!(
            sample(names[..5].to_vec(), 3).len(),
            5,
            "a short list is taken whole"
        );
    }

    #[test]
    fn every_finding_says_what_lets_it_go() {
        let gone = Stuck::HeadGone {
            group: "customer-9".into(),
            task: "task-0000000004".into(),
            id: "abc".into(),
            repaired: true,
        };
        assert!(
            gone.line().contains("its lock was deleted"),
            "{}",
            gone.line()
        );
        let slot = Stuck::SlotHeld {
            gate: "email".into(),
            slot: "1.0a0b0c0d.task-0000000001".into(),
        };
        assert!(slot.line().contains("goes with its consumer's session"));
        let held = Stuck::HeadGone {
            group: "g".into(),
            task: "task-0000000004".into(),
            id: "abc".into(),
            repaired: false,
        };
        assert!(held.line().ends_with("the next reaper run repairs it"));
        let orphan = Stuck::Orphan {
            child: "c".into(),
            parent: "p".into(),
        };
        assert!(orphan.line().contains("`cancel c`"));
        let gone = |repaired| Stuck::ParentGone {
            child: "c".into(),
            parent: "p".into(),
            repaired,
        };
        let left = gone(false).line();
        assert!(
            left.contains("`event-bridge end-parent p --as completed`"),
            "{left}"
        );
        assert!(left.contains("`cancel c`"), "{left}");
        assert!(gone(true).line().contains("taken as completed"));
    }

    #[test]
    fn parents_are_taken_in_turn_a_few_a_run() {
        assert_eq!(taken_in_turn(vec![1, 2, 3], 4, 1), vec![2]);
        assert_eq!(taken_in_turn(vec![1, 2, 3], 5, 1), vec![3]);
        assert_eq!(taken_in_turn(vec![1], 7, 1), vec![1]);
        assert_eq!(taken_in_turn(Vec::<u8>::new(), 7, 1), Vec::<u8>::new());
    }
}
