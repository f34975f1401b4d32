//! Where one task is: pending, leased, waiting out a backoff, waiting for its parents
//! (`blocked`, under `after/`), dead, completed (while its record
//! is kept, `KEEP_DONE`), not found; by its task name or by its envelope id. An id may also be
//! that of a debounced publish still pending under its key, not a task yet (`debounced`).
//!
//! By name it looks where that name can be: its number in `tasks/` (one probe), the waiting
//! nodes under `delayed/`, the dead letter of that name. A task that waited out a backoff came
//! back under a new name and keeps the old ones in `moved_from`; such a name, and any id, is
//! found by reading the pending debounced publishes (`debounce/`, first: a firing moves one from
//! there to a lane, so looking in that order cannot miss it on its way), then paging through the
//! whole queue (a window at a time), the waiting tasks and the dead letters, in bounded memory.
//!
//! Records of completed tasks are read last, so that a redriven task found pending wins over the
//! record of its first run. The places are read one after another, and a task can move back to
//! one already read (a retried task falling due to its lane while `delayed/` is read): a look that
//! finds nothing is taken again before `NotFound` is answered.
//!
//! Nothing indexes ids, so a look by id pages through the queue. An index (`ids/<id>` naming the
//! task) would make it flat, but every publish would become a multi-op and every completion,
//! retry and bury would carry one more operation, for a look an operator makes by hand; the
//! status URLs an HTTP publish answers with, and `publish`'s output, name tasks, so the flat path
//! is the one programs use.

use serde::Serialize;
use serde_json::Value;

use super::debounced::{self, DebouncedInfo};
use super::{TaskInfo, body_info, info};
use crate::clock::ZkTime;
use crate::error::Result;
use crate::layout;
use crate::queue::{DoneRecord, Queue, names_task, parse_waiting};
use crate::resume::Entry;
use crate::state::State;

/// Where a task is in its life.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// Published debounced, pending under its key until its period ends: not a task yet.
    Debounced(Box<DebouncedInfo>),
    /// In its lane, waiting for a consumer.
    Pending {
        /// The task as listed.
        task: Box<TaskInfo>,
    },
    /// Claimed: a consumer holds its lease.
    Leased {
        /// The task as listed, its lease included.
        task: Box<TaskInfo>,
    },
    /// Waiting out a retry's backoff or a producer's delay under `delayed/`.
    Waiting {
        /// The task as listed.
        task: Box<TaskInfo>,
    },
    /// A resumable task asleep under `delayed/` (its record's last entry says until when).
    Sleeping {
        /// The task as listed.
        task: Box<TaskInfo>,
    },
    /// A resumable task waiting under `delayed/` for a signal (its record's last entry says
    /// for which keys, and until when).
    AwaitingSignal {
        /// The task as listed.
        task: Box<TaskInfo>,
    },
    /// Waiting for its parents under `after/` (its envelope's `waiting_on` names those it
    /// still waits for): not in a lane yet. (A grouped one that waits for nothing more waits
    /// for its group to reach its place.)
    Blocked {
        /// The task as listed.
        task: Box<TaskInfo>,
    },
    /// A place in a lane (asked for by its name): the turn in its group of the task it stands
    /// for (`task.place`; `task.id` is that task's, or its debounced publish's), which waits
    /// elsewhere. Never run itself.
    Place {
        /// The place as listed.
        task: Box<TaskInfo>,
    },
    /// In the dead letters.
    Dead {
        /// The dead letter's name.
        name: String,
        /// Its record as stored (JSON).
        record: Value,
    },
    /// Completed, with its completion record (kept for `KEEP_DONE`).
    Completed {
        /// The completion record.
        record: Box<DoneRecord>,
    },
    /// Nothing goes by that name or id.
    NotFound,
}

impl Status {
    /// The task's state (see [`State`], whose names the answer's `state` carries); `None` for
    /// a place (its task's state is its own: `status` of its id) and for nothing found.
    pub fn state(&self) -> Option<State> {
        Some(match self {
            Status::Debounced(_) => State::Debounced,
            Status::Pending { .. } => State::Pending,
            Status::Leased { .. } => State::Leased,
            Status::Waiting { .. } => State::Waiting,
            Status::Sleeping { .. } => State::Sleeping,
            Status::AwaitingSignal { .. } => State::AwaitingSignal,
            Status::Blocked { .. } => State::Blocked,
            Status::Dead { .. } => State::Dead,
            Status::Completed { .. } => State::Completed,
            Status::Place { .. } | Status::NotFound => return None,
        })
    }
}

impl Status {
    /// A task under `delayed/`: asleep or waiting for a signal when its record says it
    /// suspended until its due time, waiting (a backoff, a delay) otherwise.
    pub fn delayed(task: Box<TaskInfo>) -> Status {
        match task.envelope.as_ref().map_or(State::Waiting, delayed_state) {
            State::Sleeping => Status::Sleeping { task },
            State::AwaitingSignal => Status::AwaitingSignal { task },
            _ => Status::Waiting { task },
        }
    }
}

/// The state of a task under `delayed/` with `envelope`: asleep or waiting for a signal when
/// its record says it suspended until its due time, waiting (a backoff, a delay) otherwise.
pub fn delayed_state(envelope: &crate::task::Envelope) -> State {
    let suspended = envelope.resume.as_ref().and_then(|r| r.suspended_in());
    match suspended {
        Some(Entry::Sleep { until_ms }) if envelope.retry_at == Some(*until_ms) => State::Sleeping,
        Some(Entry::Wait { until_ms, .. }) if envelope.retry_at == Some(*until_ms) => {
            State::AwaitingSignal
        }
        _ => State::Waiting,
    }
}

/// Dead letters read in one request.
const DEAD_PAGE: usize = 32;

/// One task's state, by task name or by envelope id; a pending or waiting task is marked
/// paused when its event type is.
///
/// # Notable behaviors
/// The task's places are read one after another, so a task that moves back to one already
/// read (a waiting task falling due to its lane, a released one to its lane's tail) can be
/// missed by one look. `NotFound` is answered only when a second look misses it too.
pub async fn status(queue: &Queue, now: &ZkTime, key: &str) -> Result<Status> {
    let mut status = look(queue, now, key).await?;
    if status == Status::NotFound {
        status = look(queue, now, key).await?;
    }
    let waits = matches!(
        status,
        Status::Pending { .. }
            | Status::Waiting { .. }
            | Status::Sleeping { .. }
            | Status::AwaitingSignal { .. }
    );
    if !waits {
        return Ok(status);
    }
    let seen = queue.read_features().await?;
    let marked = |task: Box<TaskInfo>| Box::new(task.marked(queue.features(), &seen, now.now_ms()));
    Ok(match status {
        Status::Pending { task } => Status::Pending { task: marked(task) },
        Status::Waiting { task } => Status::Waiting { task: marked(task) },
        Status::Sleeping { task } => Status::Sleeping { task: marked(task) },
        Status::AwaitingSignal { task } => Status::AwaitingSignal { task: marked(task) },
        other => other,
    })
}

/// One look through the places task `key` may be in, in the order a task moves through them
/// (waiting for its parents, its debounce key, its lane, `delayed/`, the dead letters, the
/// records of completed tasks).
async fn look(queue: &Queue, now: &ZkTime, key: &str) -> Result<Status> {
    let found = match layout::sequence(key) {
        Some(_) => by_name(queue, now, key).await?,
        None => blocked(queue, now, key).await?,
    };
    let status = match found {
        Some(found) => found,
        None => scan(queue, now, key).await?,
    };
    if status == Status::NotFound
        && let Some(record) = find_done(queue, key).await?
    {
        return Ok(Status::Completed {
            record: Box::new(record),
        });
    }
    Ok(status)
}

/// The completion record of the task named `key` (a task name) or with envelope id `key`,
/// newest first, if one is kept (`KEEP_DONE`, see [`crate::done_record`]).
pub async fn find_done(queue: &Queue, key: &str) -> Result<Option<DoneRecord>> {
    crate::done_record::find(&queue.site(), key).await
}

/// Where task `name` is under that very name, if anywhere.
async fn by_name(queue: &Queue, now: &ZkTime, name: &str) -> Result<Option<Status>> {
    let number = layout::sequence(name).expect("a task name");
    let lane = crate::lane::Lane::of_name(name);
    let probe = queue.probes().probe_in(&lane, &[], number, 1).await?;
    if let Some(probed) = probe.found.first() {
        return Ok(Some(classify(info(queue, probed, now).await?)));
    }
    if let Some(waiting) =
        waiting(queue, now, Some(name), &|node_name, _| node_name == name).await?
    {
        return Ok(Some(waiting));
    }
    Ok(crate::dead::show(queue, name)
        .await?
        .map(|record| Status::Dead {
            name: name.to_string(),
            record,
        }))
}

/// The task waiting for its parents that `key` names: by its id, or by `after-` and its id
/// encoded (the name it would have among the dead letters).
async fn blocked(queue: &Queue, now: &ZkTime, key: &str) -> Result<Option<Status>> {
    let id = match key.strip_prefix(layout::BLOCKED_PREFIX) {
        Some(encoded) => layout::decode_segment(encoded),
        None => key.to_string(),
    };
    let Some((body, stat)) = queue.read_path(&queue.layout().blocked(&id)).await? else {
        return Ok(None);
    };
    let name = layout::Layout::blocked_name(&id);
    let task = Box::new(body_info(&name, &body, &stat, now));
    Ok(Some(Status::Blocked { task }))
}

/// Looks through the pending debounced publishes, then pages through pending tasks, waiting
/// tasks and dead letters for the one `key` names: its id, a name it had, or its dead letter's
/// task.
async fn scan(queue: &Queue, now: &ZkTime, key: &str) -> Result<Status> {
    if let Some(pending) = queue.debounce().find_debounced(key).await? {
        return Ok(Status::Debounced(Box::new(debounced::info(pending, now))));
    }
    if let Some(probed) = queue.find_in_lanes(key).await? {
        return Ok(classify(info(queue, &probed, now).await?));
    }
    let wanted = |name: &str, body: &[u8]| names_task(key, name, body);
    if let Some(found) = waiting(queue, now, None, &wanted).await? {
        return Ok(found);
    }
    dead(queue, key).await
}

/// The first waiting task `wanted` picks (by its name and body); only those named `named`,
/// when given, are read.
async fn waiting(
    queue: &Queue,
    now: &ZkTime,
    named: Option<&str>,
    wanted: &(dyn Fn(&str, &[u8]) -> bool + Sync),
) -> Result<Option<Status>> {
    for bucket in queue.delays().buckets().await? {
        for (_, node) in queue.delays().waiting_in(bucket).await? {
            let name = parse_waiting(&node).map_or(node.as_str(), |(_, name)| name);
            if named.is_some_and(|named| named != name) {
                continue;
            }
            let path = format!("{}/{node}", queue.layout().delay_bucket(bucket));
            let Some((body, stat)) = queue.read_path(&path).await? else {
                continue;
            };
            if wanted(name, &body) {
                let task = Box::new(body_info(name, &body, &stat, now));
                return Ok(Some(Status::delayed(task)));
            }
        }
    }
    Ok(None)
}

/// The dead letter whose task, id or earlier name is `key`, read a page at a time.
async fn dead(queue: &Queue, key: &str) -> Result<Status> {
    let names = crate::dead::names(queue).await?;
    for page in names.chunks(DEAD_PAGE) {
        for (name, record) in crate::dead::read_page(queue, page).await? {
            let body = record.get("body");
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
            let moved = body
                .and_then(|b| b.get("moved_from"))
                .and_then(Value::as_array)
                .is_some_and(|m| m.iter().any(|n| n.as_str() == Some(key)));
            let hit = name == key
                || text(record.get("task")).as_deref() == Some(key)
                || text(body.and_then(|b| b.get("id"))).as_deref() == Some(key)
                || moved;
            if hit {
                return Ok(Status::Dead { name, record });
            }
        }
    }
    Ok(Status::NotFound)
}

fn classify(info: TaskInfo) -> Status {
    if info.place.is_some() {
        Status::Place {
            task: Box::new(info),
        }
    } else if info.lease.is_some() {
        Status::Leased {
            task: Box::new(info),
        }
    } else {
        Status::Pending {
            task: Box::new(info),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    fn task() -> Box<TaskInfo> {
        suspended(None)
    }

    /// A task whose record's last entry is `last`, due when that ends.
    fn suspended(last: Option<Entry>) -> Box<TaskInfo> {
        let stat = zookeeper_client::Stat {
            czxid: 1,
            mzxid: 1,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children: 0,
            pzxid: 1,
        };
        let mut envelope = Envelope::new("a", Value::Null);
        if let Some(last) = last {
            envelope.retry_at = match &last {
                Entry::Sleep { until_ms } | Entry::Wait { until_ms, .. } => Some(*until_ms),
                _ => None,
            };
            envelope.resume = Some(crate::resume::Record {
                done: vec![last],
                ..Default::default()
            });
        }
        let body = envelope.to_bytes().unwrap();
        Box::new(body_info("task-0000000001", &body, &stat, &ZkTime::at(0)))
    }

    /// What `status` answers names its state as [`State`] does.
    #[test]
    fn every_answer_names_its_state_as_the_enum_does() {
        let record: DoneRecord = serde_json::from_value(serde_json::json!({
            "task": "task-0000000001", "id": "i", "type": "a", "time": "2026-11-27T00:00:00Z",
            "completed_at_ms": 0, "kept_until_ms": 0, "attempts": 1, "fencing_token": 1
        }))
        .unwrap();
        let debounced = DebouncedInfo {
            key: "k".into(),
            id: "i".into(),
            event_type: "a".into(),
            due_at_ms: 0,
            due_in_ms: 0,
            max_wait_until_ms: None,
            envelope: Envelope::new("a", Value::Null),
        };
        let answers = [
            Status::Debounced(Box::new(debounced)),
            Status::Pending { task: task() },
            Status::Leased { task: task() },
            Status::Waiting { task: task() },
            Status::delayed(suspended(Some(Entry::Sleep { until_ms: 5 }))),
            Status::delayed(suspended(Some(Entry::Wait {
                keys: vec!["k".into()],
                until_ms: 5,
                outcome: None,
            }))),
            Status::Blocked { task: task() },
            Status::Dead {
                name: "task-0000000001".into(),
                record: Value::Null,
            },
            Status::Completed {
                record: Box::new(record),
            },
        ];
        let mut named = Vec::new();
        for answer in answers {
            let state = answer.state().expect("a task's state");
            let json = serde_json::to_value(&answer).unwrap();
            assert_eq!(json["state"], state.name(), "{answer:?}");
            named.push(state);
        }
        named.sort();
        assert_eq!(named, State::ALL, "every state is an answer");
        assert_eq!(Status::NotFound.state(), None);
    }
}
