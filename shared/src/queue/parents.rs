//! Publishing a task that runs after others (`after`): each parent is found by its task name
//! or envelope id, and the child is published according to what they are.
//!
//! - Every parent completed (or dead, for a child that runs anyway): the child goes to its
//!   lane at once, as any task.
//! - A parent dead, for a child that fails with it: the child goes straight to the dead
//!   letters (as `after-<id>`), with a reason that names the parent.
//! - Otherwise it waits under `after/<id>`, with the parents it waits for in `waiting_on`. One
//!   multi-op: the child's node; for each unsettled parent, its znode checked where it is, its
//!   marker (`dependents/<parent id>`) created or checked at the version read, the child's
//!   entry created under it. A parent settled (or moved) since it was read fails it, and the
//!   parents are found again.
//!
//! Which of the three is a [`ChildPlan`], made before anything is written; the batch publish
//! (`batch`) writes it in its multi-op with the other items, and a child published alone is
//! such a batch of one. A child may name an earlier item of the same publish by its id
//! ([`Earlier`]): a task made in the same multi-op is unsettled by construction, so it is not
//! checked, and its marker is created there (once, however many children name it).
//!
//! A parent is found by name where that name can be (its lane, `delayed/`, the dead letters,
//! the completion records) and by id under `after/`, among the settled markers and the
//! completion records; an id of a pending task, or a name it had before a retry moved it,
//! costs a walk of the queue (as `status` by id does). A completed task is found only while
//! its completion record is kept (`KEEP_DONE`): without one it cannot be told from a task that
//! never was, and the publish is refused.

mod find;
mod gone;

pub use gone::{GoneEnd, ParentLook, TAKEN_AS_DEAD, TakenAs};

use crate::queue::Dependencies;
use std::collections::{HashMap, HashSet};

use super::delay::parse_waiting;
use super::idempotency_keys::Published;
use super::ops::{Multi, Op, Part};
use super::place::PlaceWrite;
use super::record::DeadLetter;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::task::after::{ChildEntry, ParentEnd};
use crate::task::{self, Body, Envelope, OnParentDead, StandsFor};

/// Why a debounced publish cannot be a parent.
const DEBOUNCED: &str = "a debounced publish is not a task until its period ends";

/// Why a parent made by the same publish cannot have its marker: it is there already.
const MARKER_TAKEN: &str = "another task with this id has children waiting for it (or had, and \
                            they are not seen to yet; was this publish sent before?): a parent \
                            needs an id of its own";

/// A parent as a child's publish finds it.
#[derive(Clone, Debug)]
enum Parent {
    /// Unsettled, at `path`; its marker's version when it has one (other children wait).
    Pending {
        id: String,
        path: String,
        marker: Option<i32>,
    },
    /// Made by the same multi-op as the child (an earlier item of its publish): unsettled.
    Along {
        id: String,
    },
    Settled {
        id: String,
        settled: ParentEnd,
    },
}

impl Parent {
    fn id(&self) -> &str {
        match self {
            Parent::Pending { id, .. } | Parent::Along { id } | Parent::Settled { id, .. } => id,
        }
    }

    /// What registering the child `child` (an envelope id) writes for this parent; `None`
    /// for a settled one, which keeps no child waiting.
    fn write(&self, layout: &Layout, child: &str) -> Option<ParentWrite> {
        let (id, check, version) = match self {
            Parent::Pending { id, path, marker } => (id, Some(path.clone()), *marker),
            Parent::Along { id } => (id, None, None),
            Parent::Settled { .. } => return None,
        };
        let found_as = check.as_deref().and_then(|path| task_at(layout, path));
        Some(ParentWrite {
            id: id.clone(),
            check,
            marker: layout.dependents_of(id),
            version,
            entry: layout.dependent(id, child),
            entry_data: found_as.map_or_else(Vec::new, |parent_task| {
                ChildEntry { parent_task }.to_bytes()
            }),
        })
    }
}

/// The task name of the parent found at `path`: in its lane, or waiting under `delayed/`;
/// `None` for one waiting for its own parents under `after/` (found by its id there).
fn task_at(layout: &Layout, path: &str) -> Option<String> {
    if path.starts_with(&format!("{}/", layout.after())) {
        return None;
    }
    let last = path.rsplit('/').next()?;
    Some(
        parse_waiting(last)
            .map_or(last, |(_, name)| name)
            .to_string(),
    )
}

/// An earlier item of the same publish, as a child that names it by its id takes it.
#[derive(Clone, Debug)]
pub(super) enum Earlier {
    /// A task made by the same multi-op (to its lane, or waiting for its own parents), with
    /// this envelope id (the first item's, for an idempotency key given twice).
    Made(String),
    /// Sent to the dead letters by the same multi-op, as it was settled.
    Dead(ParentEnd),
    /// Nothing made (its idempotency key was taken): the task that has the key, by its name
    /// (or id, when its name was never written), found as any parent.
    Elsewhere(String),
    /// A debounced publish: not a task until its period ends.
    Debounced,
}

/// What publishing a child writes, decided from its parents as they were found.
pub(super) enum ChildPlan {
    /// No parent keeps it waiting: its body, to the tail of its lane as any task.
    Lane(Vec<u8>),
    /// A parent is dead and the child fails with it: straight to the dead letters.
    Dead(Box<DeadLetter>),
    /// It waits for its unsettled parents under `after/<id>`.
    Wait(WaitingChild),
}

/// A child that waits for its parents: their writes, and its own node.
pub(super) struct WaitingChild {
    parents: Vec<ParentWrite>,
    /// `after/<id>`, with its envelope (`waiting_on` set) as data.
    path: String,
    body: Vec<u8>,
    /// The parents (ids) it waits for.
    pub(super) waiting_on: Vec<String>,
    /// `dependents/`, set (any version) so that a settlement that checked it saw no marker
    /// fails (see `dependents`).
    dir: String,
    /// For a grouped child, its place in its lane, which keeps its turn (see `place`).
    place: Option<PlaceWrite>,
}

/// What a waiting child writes for one unsettled parent (with envelope id `id`).
struct ParentWrite {
    id: String,
    /// The parent's znode, checked where it was found; none for one of the same multi-op.
    check: Option<String>,
    /// Its marker, checked at `version` when it was read, else created.
    marker: String,
    version: Option<i32>,
    /// The child's entry under the marker, and its data: where the parent was found.
    entry: String,
    entry_data: Vec<u8>,
}

impl ChildPlan {
    /// What this plan makes of the child (envelope id `id`) for a later item that names it.
    pub(super) fn as_earlier(&self, id: &str) -> Earlier {
        match self {
            ChildPlan::Dead(dead) => Earlier::Dead(ParentEnd::Dead {
                task: dead.name.clone(),
                reason: dead.reason.clone(),
            }),
            ChildPlan::Lane(_) | ChildPlan::Wait(_) => Earlier::Made(id.to_string()),
        }
    }

    /// Why the publish is refused when creating the marker at `path` failed (it exists), if
    /// that is the marker of a parent made by the same multi-op: another task with the
    /// parent's id has (or had) children, and a settlement of either would be taken for the
    /// other's. `None` for any other marker (a child registered meanwhile: try again).
    pub(super) fn marker_taken(&self, path: &str) -> Option<Error> {
        let ChildPlan::Wait(wait) = self else {
            return None;
        };
        let along = (wait.parents.iter()).find(|p| p.check.is_none() && p.marker == path)?;
        Some(parent_error(&along.id, MARKER_TAKEN))
    }
}

impl WaitingChild {
    /// Adds its writes to `multi`, tagged with item `i`: the child's node; then for each
    /// parent, its check, its marker's check or create, the child's entry. The node goes first,
    /// so a child whose id waits already (a publish sent again) fails on it, not on an entry it
    /// made then. A marker in `created` (made by an earlier child of the same multi-op) is not
    /// created again, and one this adds goes into it.
    pub(super) fn push<'a>(
        &'a self,
        multi: &mut Multi<'a, (usize, Part)>,
        i: usize,
        created: &mut HashSet<&'a str>,
    ) {
        multi
            .push((i, Part::Blocked), Op::Create(&self.path, &self.body))
            .push((i, Part::Parent), Op::Set(&self.dir, b"", -1));
        if let Some(place) = &self.place {
            place.push(multi, (i, Part::Place));
        }
        for write in &self.parents {
            multi.push_some(
                (i, Part::Parent),
                write.check.as_deref().map(|p| Op::Check(p, -1)),
            );
            match write.version {
                Some(version) => {
                    multi.push((i, Part::Parent), Op::Check(&write.marker, version));
                }
                None if created.insert(&write.marker) => {
                    multi.push((i, Part::Parent), Op::Create(&write.marker, b""));
                }
                None => {}
            }
            multi.push(
                (i, Part::Parent),
                Op::Create(&write.entry, &write.entry_data),
            );
        }
    }
}

/// An error naming the parent `key` a publish could not wait for.
fn parent_error(key: &str, problem: impl Into<String>) -> Error {
    Error::Parent {
        parent: key.to_string(),
        problem: problem.into(),
    }
}

/// Why `child` dies at once: the first dead parent's settlement, when it fails with it.
fn dead_reason(child: &Envelope, parents: &[Parent]) -> Option<String> {
    if child.on_parent_dead.unwrap_or_default() != OnParentDead::Fail {
        return None;
    }
    parents.iter().find_map(|p| match p {
        Parent::Settled { id, settled } => settled.child_reason(id),
        _ => None,
    })
}

impl Dependencies<'_> {
    /// Publishes `envelope`, whose `after` names its parents (see the module documentation):
    /// an all-or-nothing batch of one.
    pub(super) async fn publish_child(self, envelope: &Envelope) -> Result<Published> {
        // Sent again (its first try's reply lost): the child that waits, or died, already.
        if let Some(published) = self.child_published(&envelope.id).await? {
            return Ok(published);
        }
        match self
            .all_or_nothing()
            .try_batch(std::slice::from_ref(envelope))
            .await?
        {
            Some(mut one) => Ok(one.remove(0)),
            None => Err(parent_error(
                &envelope.after.join(","),
                "the parents kept changing while the task was published; try again",
            )),
        }
    }

    /// The child with envelope id `id` as an earlier publish left it: waiting under `after/`, or
    /// dead with a parent (its letter's reason names one); `None` otherwise.
    async fn child_published(self, id: &str) -> Result<Option<Published>> {
        Ok(self.child_found(id).await?.filter(|found| match found {
            Published::Buried { reason, .. } => reason.starts_with("parent "),
            _ => true,
        }))
    }

    /// The child with envelope id `id`: waiting under `after/`, or among the dead letters
    /// under its blocked name (for any reason); `None` otherwise.
    pub(super) async fn child_found(self, id: &str) -> Result<Option<Published>> {
        if let Some((body, _)) = self.read_path(&self.layout().blocked(id)).await? {
            let waiting_on = match task::parse(&body) {
                Body::Envelope(e) => e.waiting_on,
                _ => Vec::new(),
            };
            return Ok(Some(Published::Blocked {
                id: id.to_string(),
                waiting_on,
            }));
        }
        let name = Layout::blocked_name(id);
        let Some((data, _)) = self.read_path(&self.layout().dead_letter(&name)).await? else {
            return Ok(None);
        };
        let record: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
        let reason = record["reason"].as_str().unwrap_or_default().to_string();
        Ok(Some(Published::Buried {
            id: id.to_string(),
            dead_letter: name,
            reason,
        }))
    }

    /// What publishing `envelope` (whose `after` names its parents) writes, from its parents
    /// as they are now. `earlier` has the items before it in the same publish, by envelope id:
    /// one it names is taken as it is there, any other parent is found in the queue. A parent
    /// it cannot wait for is an [`Error::Parent`]; nothing is written here.
    pub(super) async fn plan_child(
        self,
        envelope: &Envelope,
        earlier: &HashMap<String, Earlier>,
    ) -> Result<ChildPlan> {
        let parents = self.find_parents(envelope, earlier).await?;
        let mut child = envelope.clone();
        child.after = parents.iter().map(|p| p.id().to_string()).collect();
        if let Some(reason) = dead_reason(&child, &parents) {
            return self.dead_child(&child, reason).map(ChildPlan::Dead);
        }
        if parents.iter().all(|p| matches!(p, Parent::Settled { .. })) {
            return Ok(ChildPlan::Lane(child.to_bytes()?));
        }
        let writes: Vec<ParentWrite> = (parents.iter())
            .filter_map(|p| p.write(self.layout(), &child.id))
            .collect();
        child.waiting_on = (parents.iter())
            .filter(|p| !matches!(p, Parent::Settled { .. }))
            .map(|p| p.id().to_string())
            .collect();
        // A grouped child keeps its turn in its group while it waits.
        let place = self
            .groups()
            .place_write(&child, &child.id, StandsFor::Parents);
        child.placed = place.as_ref().map(|_| child.id.clone());
        Ok(ChildPlan::Wait(WaitingChild {
            place,
            parents: writes,
            path: self.layout().blocked(&child.id),
            body: child.to_bytes()?,
            waiting_on: child.waiting_on,
            dir: self.layout().dependents(),
        }))
    }

    /// The parents `envelope`'s `after` names, each once (by its id) in the order named.
    async fn find_parents(
        self,
        envelope: &Envelope,
        earlier: &HashMap<String, Earlier>,
    ) -> Result<Vec<Parent>> {
        let mut parents: Vec<Parent> = Vec::with_capacity(envelope.after.len());
        for (n, key) in envelope.after.iter().enumerate() {
            if envelope.after[..n].contains(key) {
                continue;
            }
            let parent = match earlier.get(key) {
                Some(item) => self.earlier_parent(key, item).await?,
                None => self.known_parent(key).await?,
            };
            if !parents.iter().any(|p| p.id() == parent.id()) {
                parents.push(parent);
            }
        }
        Ok(parents)
    }

    /// The parent `key` names, or an error saying there is none.
    async fn known_parent(self, key: &str) -> Result<Parent> {
        // Twice: a task that moved while it was looked for (from `delayed/` back to a lane,
        // between the look at the lanes and the look at `delayed/`) is found the second time.
        let found = match self.find_parent(key).await? {
            Some(found) => Some(found),
            None => self.find_parent(key).await?,
        };
        found.ok_or_else(|| {
            parent_error(
                key,
                "no such task: not pending, not dead, and no completion record \
                 (a completed task is found only while KEEP_DONE keeps its record)",
            )
        })
    }

    /// The parent an earlier item of the same publish (with id `key`) is. One made by the
    /// same multi-op gets its marker created there ([`ChildPlan::marker_taken`] when one is
    /// there already).
    async fn earlier_parent(self, key: &str, item: &Earlier) -> Result<Parent> {
        match item {
            Earlier::Made(id) => Ok(Parent::Along { id: id.clone() }),
            Earlier::Dead(settled) => Ok(Parent::Settled {
                id: key.to_string(),
                settled: settled.clone(),
            }),
            Earlier::Elsewhere(name) => self.known_parent(name).await,
            Earlier::Debounced => Err(parent_error(key, DEBOUNCED)),
        }
    }

    /// `child` on its way to the dead letters with the reason its parent gives.
    fn dead_child(&self, child: &Envelope, reason: String) -> Result<Box<DeadLetter>> {
        let name = Layout::blocked_name(&child.id);
        let body = serde_json::to_vec(child)?;
        Ok(Box::new(
            self.dead_letter_of(&name, &body, &reason, 0, None),
        ))
    }
}

/// Refuses a publish where a task waits for itself or for one published after it (only a
/// task published before can be a parent, so dependencies can form no cycle); names the item.
pub(super) fn check_order(envelopes: &[Envelope]) -> Result<()> {
    let at: HashMap<&str, usize> = (envelopes.iter().enumerate())
        .map(|(i, e)| (e.id.as_str(), i))
        .collect();
    for (i, envelope) in envelopes.iter().enumerate() {
        for parent in &envelope.after {
            if let Some(&j) = at.get(parent.as_str()).filter(|&&j| j >= i) {
                return Err(Error::Unpublishable {
                    item: i + 1,
                    problem: format!(
                        "\"after\" names {}, the id of item {}: a task waits only for \
                         tasks published before it, so dependencies cannot form a cycle",
                        crate::task::clipped(parent),
                        j + 1
                    ),
                });
            }
        }
    }
    Ok(())
}
