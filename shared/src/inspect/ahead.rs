//! What a grouped pending task waits behind in its group, as a run decides it.
//!
//! A run claims a grouped task only when two things let it (see `queue::group_lock` and
//! `process::group_order`):
//!
//! - **the group's lock**: absent, or its own (a retry come back, a task whose consumer died);
//!   a lock naming another task holds it back, and a paused one holds the whole group;
//! - **the walk's order**: a pass claims only the first task of a group its walk of the lane
//!   meets from the head, held or not, a place included (the turn of a grouped task that waits
//!   for its parents or its debounce); the group's later tasks wait until that one completed.
//!   Whatever holds the first one back (its delay, a pause of its type, a place whose task is
//!   not ready) holds them back too.
//!
//! So [`ahead`] reads the lock, and when that lets the task go, walks its lane from the head up
//! to it, as a run's walk does, for the first task of its group.

use crate::error::Result;
use crate::lane::Lane;
use crate::layout;
use crate::queue::{LaneWalk, Queue, TaskRead};
use crate::task::group_of;

/// What goes first in a grouped task's group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ahead {
    /// Nothing: the task is its group's next.
    Nothing,
    /// The group is paused at `task` (which died): `why`.
    Paused { task: String, why: String },
    /// Task (or place) `name` goes first: it holds the group's lock, or it is the first task
    /// of the group in the lane.
    Behind(String),
    /// The walk of its lane stopped `numbers` short of the task, after reading as many windows
    /// as it may: whether a task of its group comes first was not read.
    Unread { numbers: i64 },
}

/// A pending task of a group: the group, its envelope id and its name.
#[derive(Clone, Copy)]
pub(super) struct Grouped<'a> {
    pub group: &'a str,
    pub id: &'a str,
    pub name: &'a str,
}

/// What goes first in its group of the pending task `grouped`: the lock, then (when it lets the
/// task go) a walk of the task's lane of at most `windows` windows (`None`: as far as the
/// task).
pub(super) async fn ahead(
    queue: &Queue,
    Grouped { group, id, name }: Grouped<'_>,
    windows: Option<usize>,
) -> Result<Ahead> {
    if let Some(read) = queue.groups().group_lock(group).await? {
        let lock = read.lock;
        if let Some(why) = lock.paused {
            return Ok(Ahead::Paused {
                task: lock.task,
                why,
            });
        }
        // Its own lock: an earlier task of the group that a run meets first fails on it, and
        // the run claims this one instead.
        if lock.id == id {
            return Ok(Ahead::Nothing);
        }
        return Ok(Ahead::Behind(lock.task));
    }
    match layout::sequence(name) {
        Some(number) => first_in_lane(queue, group, name, number, windows).await,
        None => Ok(Ahead::Nothing),
    }
}

/// The first task of `group` a walk of the lane of task `name` (number `number`) meets before
/// it; [`Ahead::Nothing`] when it meets the task itself first (or finds it gone).
async fn first_in_lane(
    queue: &Queue,
    group: &str,
    name: &str,
    number: i64,
    windows: Option<usize>,
) -> Result<Ahead> {
    let mut walk = LaneWalk::new(Lane::of_name(name));
    let mut read = 0;
    while let Some(window) = walk.next_window(queue, &[], &[]).await? {
        for probed in window {
            if probed.number >= number {
                return Ok(Ahead::Nothing);
            }
            if of_group(&probed.read, group) {
                return Ok(Ahead::Behind(probed.name));
            }
        }
        read += 1;
        if windows.is_some_and(|most| read >= most) {
            let next = walk.contiguous_through();
            return Ok(Ahead::Unread {
                numbers: number - next,
            });
        }
    }
    Ok(Ahead::Nothing)
}

/// Whether a task read is of `group` (a place of it included).
fn of_group(read: &TaskRead, group: &str) -> bool {
    match read {
        TaskRead::Found { body, .. } => group_of(body).is_some_and(|(g, _)| g == group),
        _ => false,
    }
}
