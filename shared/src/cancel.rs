//! Cancelling one task by name or id (`event-bridge cancel`): a pending or waiting task goes
//! to the dead letters with the reason `cancelled`, so nothing vanishes without a trace; a
//! held one is marked, so that its holder's completion still counts but it is not run again
//! (see [`crate::queue`]'s `cancel`). A debounced publish still pending under its key (by its
//! id) is not a task yet: it is withdrawn, its node deleted at the version read. The id of a
//! publish a later one of its key replaced is pending no more: not found.

use crate::features::cancel_marks;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::inspect::{self, Status};
use crate::queue::{Queue, TaskOutcome, parse_waiting};
use crate::task::StandsFor;

/// What a cancel did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cancelled {
    /// It was pending or waiting: it is a dead letter now, with the reason `cancelled`.
    Cancelled {
        /// The task's name.
        name: String,
    },
    /// A consumer holds it: marked, so it is buried instead of run again unless the running
    /// attempt succeeds.
    Marked {
        /// The task's name.
        name: String,
    },
    /// It finished while being cancelled.
    Finished {
        /// The task's name.
        name: String,
    },
    /// It was a dead letter already.
    Dead {
        /// The dead letter's name.
        name: String,
    },
    /// It was a debounced publish pending under `key`, not a task yet: its node is deleted,
    /// so it never runs (no dead letter: there was no task to bury).
    Withdrawn {
        /// The debounce key it waited under.
        key: String,
    },
    /// Nothing pending, held, waiting or dead goes by that name or id.
    NotFound,
}

/// Tries of a cancel that keeps meeting the task on the move.
const TRIES: usize = crate::queue::Tries::Few.most();

/// Cancels the task `key` names (a task name, a name it had, or its envelope id).
pub async fn cancel(queue: &Queue, key: &str) -> Result<Cancelled> {
    for _ in 0..TRIES {
        let now = queue.server_time().await?;
        let done = match inspect::status(queue, &now, key).await? {
            Status::Pending { task } => pending(queue, &task.name).await?,
            Status::Waiting { task }
            | Status::Sleeping { task }
            | Status::AwaitingSignal { task } => waiting(queue, &task.name).await?,
            Status::Blocked { task } => blocked(queue, &task).await?,
            Status::Place { task } => place(queue, &task).await?,
            Status::Leased { task } => {
                let id = task.id.clone().unwrap_or_else(|| task.name.clone());
                Some(held(queue, key, &id, &task.name).await?)
            }
            Status::Dead { name, .. } => Some(Cancelled::Dead { name }),
            // Completed already (its record kept): nothing to cancel.
            Status::Completed { record } => Some(Cancelled::Finished { name: record.task }),
            Status::Debounced(pending) => withdraw(queue, &pending.key, &pending.id).await?,
            Status::NotFound => Some(Cancelled::NotFound),
        };
        if let Some(done) = done {
            return Ok(done);
        }
    }
    Err(Error::Unreadable {
        path: queue.layout().root().to_string(),
        problem: format!("task {key} kept moving while it was being cancelled; try again"),
    })
}

/// Buries pending task `name`; `None` when it was claimed or moved meanwhile.
async fn pending(queue: &Queue, name: &str) -> Result<Option<Cancelled>> {
    let Some((body, stat)) = queue.read_path(&queue.layout().task(name)).await? else {
        return Ok(None);
    };
    Ok(
        match queue
            .cancels()
            .cancel_pending(name, &body, stat.version)
            .await?
        {
            TaskOutcome::DeadLettered { .. } => Some(Cancelled::Cancelled {
                name: name.to_string(),
            }),
            _ => None,
        },
    )
}

/// Buries waiting task `name`; `None` when it moved meanwhile.
async fn waiting(queue: &Queue, name: &str) -> Result<Option<Cancelled>> {
    for bucket in queue.delays().buckets().await? {
        for (_, node) in queue.delays().waiting_in(bucket).await? {
            if parse_waiting(&node).map(|(_, n)| n) != Some(name) {
                continue;
            }
            let path = format!("{}/{node}", queue.layout().delay_bucket(bucket));
            let Some((body, stat)) = queue.read_path(&path).await? else {
                return Ok(None);
            };
            let done = queue
                .cancels()
                .cancel_waiting(&path, name, &body, stat.version)
                .await?;
            return Ok(done.then(|| Cancelled::Cancelled {
                name: name.to_string(),
            }));
        }
    }
    Ok(None)
}

/// Buries the task waiting for its parents that `task` shows; `None` when it changed (a
/// parent settled) or went meanwhile.
async fn blocked(queue: &Queue, task: &crate::inspect::TaskInfo) -> Result<Option<Cancelled>> {
    let Some(id) = &task.id else {
        return Ok(None);
    };
    let Some((body, stat)) = queue.read_path(&queue.layout().blocked(id)).await? else {
        return Ok(None);
    };
    let done = queue
        .dependencies()
        .cancel_blocked(id, &body, stat.version)
        .await?;
    Ok(done.then(|| Cancelled::Cancelled {
        name: task.name.clone(),
    }))
}

/// Cancels what the place `task` shows stands for (a place is never cancelled itself: it
/// goes when its group's turn comes); `None` when that changed meanwhile.
async fn place(queue: &Queue, task: &crate::inspect::TaskInfo) -> Result<Option<Cancelled>> {
    let (Some(place), Some(id)) = (&task.place, &task.id) else {
        return Ok(None);
    };
    match &place.stands_for {
        StandsFor::Parents => {
            let Some((body, stat)) = queue.read_path(&queue.layout().blocked(id)).await? else {
                return Ok(None);
            };
            let done = queue
                .dependencies()
                .cancel_blocked(id, &body, stat.version)
                .await?;
            Ok(done.then(|| Cancelled::Cancelled {
                name: crate::layout::Layout::blocked_name(id),
            }))
        }
        StandsFor::Debounce { key } => {
            let pending = queue.read_path(&queue.layout().debounced(key)).await?;
            let Some((body, _)) = pending else {
                return Ok(None);
            };
            match serde_json::from_slice::<crate::Envelope>(&body) {
                Ok(e) if e.placed.as_deref() == Some(id) => withdraw(queue, key, &e.id).await,
                _ => Ok(None),
            }
        }
        StandsFor::Dead { letter, .. } => Ok(Some(Cancelled::Dead {
            name: letter.clone(),
        })),
    }
}

/// Withdraws the debounced publish `id` pending under `key`; `None` when a publish of the key
/// replaced it or it fired meanwhile (the caller looks again).
async fn withdraw(queue: &Queue, key: &str, id: &str) -> Result<Option<Cancelled>> {
    let withdrawn = queue.debounce().withdraw_debounced(key, id).await?;
    Ok(withdrawn.then(|| Cancelled::Withdrawn {
        key: key.to_string(),
    }))
}

/// Marks held task `name` (envelope id `id`), then looks again: a task that went to wait
/// meanwhile is buried, one that ended needs no mark.
async fn held(queue: &Queue, key: &str, id: &str, name: &str) -> Result<Cancelled> {
    cancel_marks::store::mark(queue, id, name).await?;
    let now = queue.server_time().await?;
    let after = match inspect::status(queue, &now, key).await? {
        // Held still, or a debounced publish with the same id met first: the mark stays.
        Status::Leased { .. } | Status::Debounced(_) => {
            return Ok(Cancelled::Marked {
                name: name.to_string(),
            });
        }
        // Released in place meanwhile (its holder ran out of time): no one holds it now.
        Status::Pending { task } => match pending(queue, &task.name).await? {
            Some(done) => done,
            None => {
                return Ok(Cancelled::Marked {
                    name: name.to_string(),
                });
            }
        },
        Status::Waiting { task } | Status::Sleeping { task } | Status::AwaitingSignal { task } => {
            match waiting(queue, &task.name).await? {
                Some(done) => done,
                None => Cancelled::Marked {
                    name: name.to_string(),
                },
            }
        }
        Status::Dead { name, record } => dead_after_mark(name, &record),
        // Not a state a held task goes to: as one that ended.
        Status::Blocked { .. }
        | Status::Place { .. }
        | Status::Completed { .. }
        | Status::NotFound => Cancelled::Finished {
            name: name.to_string(),
        },
    };
    if !matches!(after, Cancelled::Marked { .. }) {
        cancel_marks::store::unmark(queue, id).await?;
    }
    Ok(after)
}

/// What a cancel that marked a held task answers when the task is a dead letter by the time it
/// looks again: cancelled when the mark buried it (its holder gave it back, or a claim met the
/// mark, and buried it with the reason `cancelled`), dead for any other reason.
fn dead_after_mark(name: String, record: &serde_json::Value) -> Cancelled {
    match record["reason"].as_str() {
        Some(crate::queue::CANCELLED) => Cancelled::Cancelled { name },
        _ => Cancelled::Dead { name },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_task_the_mark_buried_was_cancelled_by_it() {
        let record = json!({"task": "task-0000000007", "reason": "cancelled"});
        assert_eq!(
            dead_after_mark("task-0000000007".into(), &record),
            Cancelled::Cancelled {
                name: "task-0000000007".into()
            }
        );
    }

    #[test]
    fn a_task_dead_for_another_reason_is_dead() {
        let record = json!({"task": "task-0000000007", "reason": "permanent failure"});
        assert_eq!(
            dead_after_mark("task-0000000007".into(), &record),
            Cancelled::Dead {
                name: "task-0000000007".into()
            }
        );
    }
}
