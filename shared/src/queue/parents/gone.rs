//! A parent gone from the queue without an end: its children wait under its marker for an end
//! that never comes. Our consumers write the marker in the multi-op that ends a task; a
//! 000-design consumer completes a task by deleting it and knows nothing of markers, and an
//! operator may delete a task's znode by hand.
//!
//! [`Dependencies::look_for_parent`] judges one parent: gone when its marker stands unsettled
//! and the look a child's publish makes for a parent (`find`: by id in its lane, under
//! `delayed/`, `after/`, among the dead letters and the completion records) finds it nowhere,
//! twice, with the marker unchanged from before the first look to after the second. A parent
//! that moved while it was looked for (from `delayed/` back to its lane's tail) is found by the
//! second look; one that ended meanwhile wrote its marker. [`Dependencies::seen_where_it_was`]
//! is the cheap look first: where the child's entry says the parent was.
//!
//! [`Dependencies::end_gone_parent`] is the repair an operator makes (`event-bridge
//! end-parent`): a person knows whether a deleted parent did its work. It sets the marker to
//! the end given (completed, or dead), at the version the look read, and sees to the children
//! as after any end: each goes on as its other parents and its `on_parent_dead` say. Where
//! only 000-design consumers delete tasks, and they delete only what succeeded,
//! `GONE_PARENTS=completed` has the reaper's audit make it (as completed) for every parent it
//! finds gone ([`Dependencies::take_as_ended`]).

use zookeeper_client as zk;

use super::Parent;
use crate::error::{Error, Result};
use crate::queue::Dependencies;
use crate::task::after::{ChildEntry, ParentEnd};

/// The reason a child that fails with a gone parent taken as dead gives, after the parent.
pub const TAKEN_AS_DEAD: &str = "it was gone from the queue without an end, and `event-bridge end-parent --as dead` took it as dead";

/// What a look for a parent with children found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParentLook {
    /// No child waits for it: it has no marker.
    NoChildren,
    /// Its marker says how it ended: its children are seen to (by the reaper's sweep, if the
    /// consumer that ended it stopped first).
    Ended,
    /// It is somewhere: where (a path below the root, or how it ended, with its record).
    Found(String),
    /// Gone: its marker, unsettled, at this version.
    Gone {
        /// The marker's version when read.
        marker_version: i32,
    },
}

/// How an operator takes a gone parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakenAs {
    /// Completed: its children go on (to their lane, once their other parents are done).
    Completed,
    /// Dead: its children fail with it, or run anyway, as their `on_parent_dead` says.
    Dead,
}

impl TakenAs {
    /// `completed` or `dead`.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        match text {
            "completed" => Ok(TakenAs::Completed),
            "dead" => Ok(TakenAs::Dead),
            other => Err(format!(
                "a parent is taken as completed or dead, not {other:?}"
            )),
        }
    }

    /// `completed` or `dead`.
    pub fn name(self) -> &'static str {
        match self {
            TakenAs::Completed => "completed",
            TakenAs::Dead => "dead",
        }
    }

    /// The end the marker of the parent with id `id` is given (its task name is not known).
    fn end(self, id: &str) -> ParentEnd {
        let task = id.to_string();
        match self {
            TakenAs::Completed => ParentEnd::Completed { task },
            TakenAs::Dead => ParentEnd::Dead {
                task,
                reason: TAKEN_AS_DEAD.to_string(),
            },
        }
    }
}

/// What ending a gone parent came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoneEnd {
    /// No child waits for it.
    NoChildren,
    /// It is not gone: where it is. Nothing was written.
    NotGone(String),
    /// Its marker says how it ended (now, or already): this many children were seen to.
    Ended {
        /// How many children were seen to.
        children: usize,
    },
}

/// How many times [`Dependencies::end_gone_parent`] looks again when the marker changed
/// between its look and its write.
const END_TRIES: usize = 3;

impl Dependencies<'_> {
    /// Whether the parent with envelope id `id` is where a child's `entry` saw it (by that task
    /// name: in its lane, waiting under `delayed/`, or ended with a dead letter or a record of
    /// that name), or waits for its own parents under `after/`: a few reads, no walk.
    pub(crate) async fn seen_where_it_was(
        self,
        id: &str,
        entry: Option<&ChildEntry>,
    ) -> Result<bool> {
        if self.read_path(&self.layout().blocked(id)).await?.is_some() {
            return Ok(true);
        }
        let Some(entry) = entry else {
            return Ok(false);
        };
        Ok(match self.parent_by_name(&entry.parent_task).await {
            Ok(Some(Parent::Pending { id: found, .. })) => found == id,
            Ok(Some(_)) => true,
            Ok(None) => false,
            // Something is there that cannot be a parent (a place, a poison body): not judged.
            Err(Error::Parent { .. }) => true,
            Err(e) => return Err(e),
        })
    }

    /// Looks for the parent with envelope id `id` as a child's publish does, twice, between
    /// two reads of its marker (see the module documentation). The looks may walk the queue.
    pub async fn look_for_parent(self, id: &str) -> Result<ParentLook> {
        let marker = self.layout().dependents_of(id);
        let Some((data, before)) = self.read_path(&marker).await? else {
            return Ok(ParentLook::NoChildren);
        };
        if ParentEnd::parse(&data).is_some() {
            return Ok(ParentLook::Ended);
        }
        for _ in 0..2 {
            match self.find_parent(id).await {
                Ok(None) => {}
                Ok(Some(found)) => return Ok(ParentLook::Found(self.where_found(&found))),
                Err(Error::Parent { problem, .. }) => return Ok(ParentLook::Found(problem)),
                Err(e) => return Err(e),
            }
        }
        Ok(match self.read_path(&marker).await? {
            None => ParentLook::NoChildren,
            Some((data, _)) if ParentEnd::parse(&data).is_some() => ParentLook::Ended,
            Some((_, after)) if after.mzxid == before.mzxid && after.czxid == before.czxid => {
                ParentLook::Gone {
                    marker_version: after.version,
                }
            }
            // Written meanwhile (not by an end, which settles it): looked at again later.
            Some(_) => ParentLook::Found("its marker changed while it was looked for".into()),
        })
    }

    /// Takes the gone parent with envelope id `id` as ended `taken_as`, and sees to its
    /// children; refuses a parent that is somewhere. A marker that says how its parent ended
    /// already (an earlier call stopped before its children) has its children seen to.
    pub async fn end_gone_parent(self, id: &str, taken_as: TakenAs) -> Result<GoneEnd> {
        for _ in 0..END_TRIES {
            let marker_version = match self.look_for_parent(id).await? {
                ParentLook::NoChildren => return Ok(GoneEnd::NoChildren),
                ParentLook::Found(at) => return Ok(GoneEnd::NotGone(at)),
                ParentLook::Ended => {
                    let children = self.see_to_children_of(id).await?;
                    return Ok(GoneEnd::Ended { children });
                }
                ParentLook::Gone { marker_version } => marker_version,
            };
            if let Some(children) = self.take_as_ended(id, marker_version, taken_as).await? {
                return Ok(GoneEnd::Ended { children });
            }
        }
        Ok(GoneEnd::NotGone(
            "its marker kept changing while it was looked for".into(),
        ))
    }

    /// Takes the parent with envelope id `id`, which a look found gone with its marker at
    /// `marker_version`, as ended `taken_as`: the marker set at that version, then the children
    /// seen to, as after any end; how many. `None`: the marker changed since the look.
    pub async fn take_as_ended(
        self,
        id: &str,
        marker_version: i32,
        taken_as: TakenAs,
    ) -> Result<Option<usize>> {
        let marker = self.layout().dependents_of(id);
        let data = taken_as.end(id).to_bytes();
        match (self.client())
            .set_data(&marker, &data, Some(marker_version))
            .await
        {
            Ok(_) => {
                let taken_as = taken_as.name();
                tracing::warn!(parent = %id, taken_as, "a parent gone without an end taken as ended");
                Ok(Some(self.see_to_children_of(id).await?))
            }
            Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(None),
            Err(e) => Err(Error::zk("set", marker, e)),
        }
    }

    /// Where a look found a parent, for a person: its znode below the root, or how it ended.
    fn where_found(&self, found: &Parent) -> String {
        let root = format!("{}/", self.layout().root());
        match found {
            Parent::Pending { path, .. } => {
                format!("at {}", path.strip_prefix(&root).unwrap_or(path))
            }
            Parent::Along { .. } => "published with its child".into(),
            Parent::Settled {
                settled: ParentEnd::Completed { task },
                ..
            } => format!("completed as {task} (its record kept)"),
            Parent::Settled {
                settled: ParentEnd::Dead { task, .. },
                ..
            } => format!("dead as {task}"),
        }
    }
}
