//! Why a task is where it is, and what would let it go (`explain`): a line for each reason,
//! and the reasons as data. Every state of [`State`] has its explanation here, in one match
//! with no catch-all, so a state added to the core does not build without one.
//!
//! It starts from [`status()`], then asks each feature that can hold a pending task back
//! whether it does: each registered feature's hook, with what the features' start read finds
//! (a reason that holds it back, such as a pause or a cancel mark, or a line beside the others,
//! for a task in any state short of its end: [`crate::feature::Feature::explain`]), the
//! task's due time, what goes first in its group (see `ahead`: its lock, else the first task
//! of its group in its lane, with what holds that one back), the gates of its route and
//! concurrency key. A waiting child's parents:
//! [`explain`] (the command) looks each up by id (the first [`PARENTS_LOOKED_UP`]; a look by id
//! may page through the queue); [`status_and_why`] (the HTTP status answer, the dashboard)
//! reads only what costs the same at any depth: each parent's marker (completed or dead, once
//! settled) and whether it waits for parents of its own, and at most [`AHEAD_WINDOWS_FLAT`]
//! windows of a grouped task's lane.

use serde::Serialize;
use serde_json::{Map, Value};

mod lines;

use lines::line;

use super::ahead::{Ahead, Grouped, ahead};
use super::{DebouncedInfo, Status, TaskInfo, status};
use crate::clock::ZkTime;
use crate::error::Result;
use crate::feature::{Asked, Found};
use crate::queue::{DoneRecord, GateLoad, ParentLook, Queue};
use crate::resume::Entry;
use crate::state::State;
use crate::task::StandsFor;
use crate::task::after::ParentEnd;

/// Parents of a waiting child whose state is looked up; the rest are named by id only.
pub const PARENTS_LOOKED_UP: usize = 3;

/// Why a task is where it is: its state, and each reason with its line.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Explanation {
    /// Its state; absent for a place (its task's state is its own) and for nothing found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// One line per reason: what it waits for, or how it ended, and what would let it go.
    pub lines: Vec<String>,
    /// The same reasons as data, in the same order as `lines`.
    pub reasons: Vec<Reason>,
}

impl Explanation {
    /// The lines as one text.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// One reason a task is where it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// A debounced publish: fires when its key's period ends (or its longest wait passes).
    Debounced {
        /// The debounce key.
        key: String,
        /// When it fires (ZooKeeper ms).
        due_at_ms: i64,
        /// When its longest wait ends (ZooKeeper ms), if the publish set one.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_wait_until_ms: Option<i64>,
    },
    /// A child waiting for these parents (each with its state when looked up and found).
    Parents {
        /// The parents it still waits for.
        waiting_on: Vec<Parent>,
    },
    /// A grouped child whose parents are done: it waits for its group to reach its place.
    GroupTurn {
        /// The group.
        group: String,
    },
    /// Not due yet: a retry's backoff, or its producer's delay.
    NotDue {
        /// When it is due (ZooKeeper ms).
        due_at_ms: i64,
        /// Attempts counted so far.
        attempts: u32,
        /// The error of its last failed attempt, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
    },
    /// A resumable task asleep until `until_ms`, after `steps_done` steps.
    Sleeping {
        /// When it wakes (ZooKeeper ms).
        until_ms: i64,
        /// Steps it has completed.
        steps_done: usize,
    },
    /// A resumable task waiting for any one of `keys` until `until_ms` (then its wait ends
    /// with a timeout), after `steps_done` steps.
    AwaitingSignal {
        /// The signal keys it waits for.
        keys: Vec<String>,
        /// When its wait times out (ZooKeeper ms).
        until_ms: i64,
        /// Steps it has completed.
        steps_done: usize,
    },
    /// Its group runs another task first (`holder`, with its state when found, and what holds
    /// it back in turn: a pending task's reasons, a place's).
    GroupBehind {
        /// The group.
        group: String,
        /// The task the group runs first.
        holder: String,
        /// That task's state, when found.
        #[serde(skip_serializing_if = "Option::is_none")]
        holder_state: Option<State>,
        /// What holds that task back in turn.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        holder_why: Vec<Reason>,
    },
    /// Its lane was read for the first task of its group only so far (a flat look): `numbers`
    /// numbers of it before the task were not.
    GroupUnread {
        /// The group.
        group: String,
        /// How many numbers before the task were not read.
        numbers: i64,
    },
    /// Its group is paused at `task`, which died.
    GroupPaused {
        /// The group.
        group: String,
        /// The task it is paused at.
        task: String,
        /// Why that task died.
        why: String,
    },
    /// A gate it goes through has as many tasks in flight as it lets.
    AtCap {
        /// The gate and its load.
        gate: GateLoad,
    },
    /// A gate it goes through has used its rate's tokens: the next comes at
    /// `gate.next_token_at_ms`.
    RateLimited {
        /// The gate and its load.
        gate: GateLoad,
    },
    /// Its body cannot run: it goes to the dead letters when claimed.
    Poison {
        /// Why its body cannot run.
        problem: String,
    },
    /// Nothing holds it back: the next run claims it.
    Ready,
    /// A consumer holds it.
    Held {
        /// The holder's consumer id, if its lease says.
        #[serde(skip_serializing_if = "Option::is_none")]
        consumer_id: Option<String>,
        /// The claim's fencing token (the lease's `czxid`).
        fencing_token: i64,
        /// Time until the reaper may free the lease (negative: overdue), by ZooKeeper's clock.
        expires_in_ms: i64,
    },
    /// In the dead letters.
    Dead {
        /// The dead letter's name.
        name: String,
        /// The reason it was buried.
        why: String,
    },
    /// Completed (its record kept).
    Completed {
        /// The task's name when it completed.
        task: String,
        /// When it completed (ZooKeeper ms).
        completed_at_ms: i64,
        /// Attempts it took.
        attempts: u32,
    },
    /// A place: the turn in its group of another task, which waits elsewhere.
    Place {
        /// The group.
        group: String,
        /// The envelope id of the task it stands for.
        task_id: String,
        /// Where that task waits, or that it died.
        stands_for: StandsFor,
    },
    /// What a feature says of the task (see [`crate::feature::Feature::explain`]).
    Feature {
        /// The feature's name.
        feature: String,
        /// Its line.
        says: String,
    },
    /// Nothing goes by that name or id.
    NotFound,
    /// A feature holds it back (a pause: `{"reason": "paused", "event_type": …, "since_ms":
    /// …}`): its reason as the feature gives it, whose `reason` field names it (see
    /// [`crate::feature::Feature::explain`]).
    #[serde(untagged)]
    HeldBy(FeatureReason),
}

/// A reason a feature gives for holding a task back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeatureReason {
    /// The feature's name.
    #[serde(skip)]
    pub feature: String,
    /// Its line.
    #[serde(skip)]
    pub line: String,
    /// The reason as data: a JSON object whose `reason` field names it.
    #[serde(flatten)]
    pub data: Map<String, Value>,
}

impl Reason {
    /// This reason as JSON, as `explain --json` writes it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a reason is JSON")
    }
}

/// A parent a child waits for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parent {
    /// The parent's envelope id (or task name), as the child names it.
    pub id: String,
    /// Its state, when looked up and found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Set when it is gone from the queue without an end: it never releases the child.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

/// How far an explanation looks: what `explain` reads, or only what costs the same at any
/// depth of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Depth {
    /// A waiting child's parents by id, wherever they are, and a grouped task's lane from its
    /// head up to it (either may page through the queue).
    Full,
    /// A waiting child's parents by their markers and `after/` only, and a grouped task's lane
    /// [`AHEAD_WINDOWS_FLAT`] windows from its head at most.
    Flat,
}

/// Windows of its lane a flat look reads ahead of a grouped task for the first task of its
/// group (32 numbers each).
pub const AHEAD_WINDOWS_FLAT: usize = 8;

impl Depth {
    /// Windows of a lane read ahead of a grouped task (`None`: as far as the task).
    fn ahead_windows(self) -> Option<usize> {
        match self {
            Depth::Full => None,
            Depth::Flat => Some(AHEAD_WINDOWS_FLAT),
        }
    }
}

/// Why the task `key` names (a task name, a name it had, or an envelope id) is where it is.
pub async fn explain(queue: &Queue, now: &ZkTime, key: &str) -> Result<Explanation> {
    let found = status(queue, now, key).await?;
    explained(queue, now, &found, Depth::Full).await
}

/// The status of the task `key` names, and why it is there, as of ZooKeeper's time now: what
/// the HTTP status answer and the dashboard's task page show.
pub async fn status_and_why(queue: &Queue, key: &str) -> Result<(Status, Explanation)> {
    let now = queue.server_time().await?;
    let found = status(queue, &now, key).await?;
    let why = explained(queue, &now, &found, Depth::Flat).await?;
    Ok((found, why))
}

/// Why a task whose status is `found` is where it is (its parents by id, as [`explain`]).
pub async fn explain_status(queue: &Queue, now: &ZkTime, found: &Status) -> Result<Explanation> {
    explained(queue, now, found, Depth::Full).await
}

async fn explained(
    queue: &Queue,
    now: &ZkTime,
    found: &Status,
    depth: Depth,
) -> Result<Explanation> {
    let state = found.state();
    // What the features' start read finds, as a claim would: what holds a task back.
    let seen = match state {
        Some(_) => queue.read_features().await?,
        None => Found::default(),
    };
    let reasons = match (state, found) {
        (Some(state), _) => of_state(queue, now, &seen, state, found, depth).await?,
        (None, Status::Place { task }) => vec![place(task)],
        (None, _) => vec![Reason::NotFound],
    };
    let now_ms = now.now_ms();
    Ok(Explanation {
        state,
        lines: reasons.iter().map(|r| line(r, now_ms)).collect(),
        reasons,
    })
}

/// The reasons of a task in `state` (its status `found`): every state, and no other arm.
async fn of_state(
    queue: &Queue,
    now: &ZkTime,
    seen: &Found,
    state: State,
    found: &Status,
    depth: Depth,
) -> Result<Vec<Reason>> {
    Ok(match (state, found) {
        (State::Debounced, Status::Debounced(info)) => vec![debounced(info)],
        (State::Blocked, Status::Blocked { task }) => {
            let reasons = blocked(queue, now, task, depth).await?;
            features_say(queue, now, seen, task, state).after(reasons)
        }
        (State::Pending, Status::Pending { task }) => {
            let mut reasons = held_back(queue, now, seen, task, Some(depth)).await?;
            // A feature's line is said beside the others: it holds nothing back itself.
            if (reasons.iter()).all(|r| matches!(r, Reason::Feature { .. })) {
                reasons.insert(0, Reason::Ready);
            }
            reasons
        }
        (State::Leased, Status::Leased { task }) => {
            let says = features_say(queue, now, seen, task, state);
            // Its cancel mark right after its holder, as a held task's fate.
            let mut reasons = leased(task);
            reasons.extend(says.holds.into_iter().chain(says.last).chain(says.lines));
            reasons
        }
        (State::Waiting, Status::Waiting { task }) => {
            features_say(queue, now, seen, task, state).after(waiting(task))
        }
        (State::Sleeping, Status::Sleeping { task })
        | (State::AwaitingSignal, Status::AwaitingSignal { task }) => {
            let reasons = suspended(task).into_iter().collect::<Vec<_>>();
            features_say(queue, now, seen, task, state).after(reasons)
        }
        (State::Dead, Status::Dead { name, record }) => vec![dead(name, record)],
        (State::Completed, Status::Completed { record }) => vec![completed(record)],
        (
            State::Debounced
            | State::Blocked
            | State::Pending
            | State::Leased
            | State::Waiting
            | State::Sleeping
            | State::AwaitingSignal
            | State::Dead
            | State::Completed,
            _,
        ) => unreachable!("a status names its own state"),
    })
}

fn debounced(info: &DebouncedInfo) -> Reason {
    Reason::Debounced {
        key: info.key.clone(),
        due_at_ms: info.due_at_ms,
        max_wait_until_ms: info.max_wait_until_ms,
    }
}

/// A child: its parents, or its group's turn once they are done.
async fn blocked(
    queue: &Queue,
    now: &ZkTime,
    task: &TaskInfo,
    depth: Depth,
) -> Result<Vec<Reason>> {
    let Some(envelope) = &task.envelope else {
        return Ok(vec![Reason::Parents {
            waiting_on: Vec::new(),
        }]);
    };
    if envelope.waiting_on.is_empty()
        && let Some(group) = &envelope.group
    {
        return Ok(vec![Reason::GroupTurn {
            group: group.clone(),
        }]);
    }
    let looked_up = &envelope.waiting_on[..envelope.waiting_on.len().min(PARENTS_LOOKED_UP)];
    let mut parents = match depth {
        Depth::Full => found(queue, now, looked_up).await?,
        Depth::Flat => (looked_up.iter().zip(marked(queue, looked_up).await?))
            .map(|(id, state)| Parent {
                id: id.clone(),
                state,
                gone: false,
            })
            .collect(),
    };
    parents.extend(
        envelope.waiting_on[looked_up.len()..]
            .iter()
            .map(|id| Parent {
                id: id.clone(),
                state: None,
                gone: false,
            }),
    );
    Ok(vec![Reason::Parents {
        waiting_on: parents,
    }])
}

/// Parents `ids` looked up by id, wherever they are: each with its state, and one found
/// nowhere looked for as the audit does, which says whether it is gone without an end.
async fn found(queue: &Queue, now: &ZkTime, ids: &[String]) -> Result<Vec<Parent>> {
    let mut parents = Vec::with_capacity(ids.len());
    for id in ids {
        let state = status(queue, now, id).await?.state();
        let gone = state.is_none()
            && matches!(
                queue.dependencies().look_for_parent(id).await?,
                ParentLook::Gone { .. }
            );
        parents.push(Parent {
            id: id.clone(),
            state,
            gone,
        });
    }
    Ok(parents)
}

/// What the markers of parents `ids` and `after/` say of their states, in one multi-read:
/// completed or dead once settled, blocked while waiting for their own parents, else not
/// known (pending, held, waiting or debounced).
async fn marked(queue: &Queue, ids: &[String]) -> Result<Vec<Option<State>>> {
    let layout = queue.layout();
    let paths: Vec<String> = (ids.iter())
        .flat_map(|id| [layout.dependents_of(id), layout.blocked(id)])
        .collect();
    let reads = queue.read_paths(&paths).await?;
    Ok((reads.chunks(2))
        .map(|pair| {
            let settled = pair[0]
                .as_ref()
                .and_then(|(marker, _)| ParentEnd::parse(marker));
            match (settled, &pair[1]) {
                (Some(ParentEnd::Completed { .. }), _) => Some(State::Completed),
                (Some(ParentEnd::Dead { .. }), _) => Some(State::Dead),
                (None, Some(_)) => Some(State::Blocked),
                (None, None) => None,
            }
        })
        .collect())
}

/// What holds a pending task back, each feature asked in turn (none: it is ready). Its group
/// is looked at to `depth` (not at all without one: the task is a group-mate another task waits
/// behind, whose group was looked at for that one).
async fn held_back(
    queue: &Queue,
    now: &ZkTime,
    seen: &Found,
    task: &TaskInfo,
    group_depth: Option<Depth>,
) -> Result<Vec<Reason>> {
    let mut reasons = Vec::new();
    if let Some(problem) = &task.poison {
        reasons.push(Reason::Poison {
            problem: problem.clone(),
        });
    }
    let says = features_say(queue, now, seen, task, State::Pending);
    reasons.extend(says.holds.into_iter().chain(says.lines));
    if let Some(envelope) = &task.envelope {
        if let Some(due_at_ms) = envelope.retry_at.filter(|at| *at > now.now_ms()) {
            reasons.push(Reason::NotDue {
                due_at_ms,
                attempts: envelope.attempts,
                last_error: envelope.last_error.clone(),
            });
        }
        if let (Some(group), Some(depth)) = (&envelope.group, group_depth) {
            let task = Grouped {
                group,
                id: &envelope.id,
                name: &task.name,
            };
            reasons.extend(group_ahead(queue, now, seen, task, depth).await?);
        }
        let key = envelope.concurrency_key.as_deref();
        let gates = queue.gates();
        for gate in gates
            .loads_for(&envelope.event_type, key, now.now_ms())
            .await?
        {
            match (gate.at_cap(), gate.next_token_at_ms) {
                (true, _) => reasons.push(Reason::AtCap { gate }),
                (false, Some(_)) => reasons.push(Reason::RateLimited { gate }),
                (false, None) => {}
            }
        }
    }
    reasons.extend(says.last);
    Ok(reasons)
}

/// What the features say of a task, by where it goes among the reasons.
#[derive(Default)]
struct Says {
    /// Reasons that hold the task back (a pause), said first.
    holds: Vec<Reason>,
    /// Lines said beside the others (when it expires).
    lines: Vec<Reason>,
    /// Reasons said last (a cancel mark: what becomes of it at its next claim).
    last: Vec<Reason>,
}

impl Says {
    /// `reasons`, then what the features say, in that order.
    fn after(self, mut reasons: Vec<Reason>) -> Vec<Reason> {
        reasons.extend(self.holds.into_iter().chain(self.lines).chain(self.last));
        reasons
    }
}

/// What each feature says of a task in `state`, not ended yet (nothing of a body that is no
/// envelope), with what their start read found (`seen`): a line beside the others, or a
/// reason that holds the task back (a pause, a cancel mark).
fn features_say(queue: &Queue, now: &ZkTime, seen: &Found, task: &TaskInfo, state: State) -> Says {
    let mut says = Says::default();
    let Some(envelope) = &task.envelope else {
        return says;
    };
    let asked = Asked {
        state,
        now_ms: now.now_ms(),
    };
    for (feature, said) in queue.features().explain(envelope, &asked, seen) {
        let feature = feature.to_string();
        match said.holds {
            Some(data) => {
                let reason = Reason::HeldBy(FeatureReason {
                    feature,
                    line: said.line,
                    data,
                });
                match said.last {
                    true => says.last.push(reason),
                    false => says.holds.push(reason),
                }
            }
            None => says.lines.push(Reason::Feature {
                feature,
                says: said.line,
            }),
        }
    }
    says
}

/// What the grouped task `task` waits behind in its group, as a run decides it (see
/// `ahead`): its group paused, another task first (with what holds that one back), or its
/// lane not read as far as it.
async fn group_ahead(
    queue: &Queue,
    now: &ZkTime,
    seen: &Found,
    task: Grouped<'_>,
    depth: Depth,
) -> Result<Vec<Reason>> {
    let group_name = task.group.to_string();
    Ok(match ahead(queue, task, depth.ahead_windows()).await? {
        Ahead::Nothing => Vec::new(),
        Ahead::Paused { task, why } => vec![Reason::GroupPaused {
            group: group_name,
            task,
            why,
        }],
        Ahead::Unread { numbers } => vec![Reason::GroupUnread {
            group: group_name,
            numbers,
        }],
        Ahead::Behind(holder) => {
            let found = status(queue, now, &holder).await?;
            vec![Reason::GroupBehind {
                group: group_name,
                holder,
                holder_state: found.state(),
                holder_why: holder_why(queue, now, seen, &found).await?,
            }]
        }
    })
}

/// What holds back the task a grouped task waits behind: for a pending one, what holds any
/// pending task back but its group (its group is the one already looked at); for a place,
/// what its task waits for; nothing for a task held or gone.
async fn holder_why(
    queue: &Queue,
    now: &ZkTime,
    seen: &Found,
    found: &Status,
) -> Result<Vec<Reason>> {
    Ok(match found {
        // Boxed: `held_back` called this, and without a group it calls nothing here again.
        Status::Pending { task } => Box::pin(held_back(queue, now, seen, task, None)).await?,
        Status::Place { task } => vec![place(task)],
        _ => Vec::new(),
    })
}

/// A held task: by whom, until when (what the features say, such as a cancel mark made
/// meanwhile, follows).
fn leased(task: &TaskInfo) -> Vec<Reason> {
    let lease = task.lease.as_ref();
    vec![Reason::Held {
        consumer_id: lease.and_then(|l| l.consumer_id.clone()),
        fencing_token: lease.map_or(0, |l| l.fencing_token),
        expires_in_ms: lease.map_or(0, |l| l.expires_in_ms),
    }]
}

/// A waiting task: when it is due (what the features say, such as the pause that will hold
/// it then, follows).
fn waiting(task: &TaskInfo) -> Vec<Reason> {
    let envelope = task.envelope.as_ref();
    vec![Reason::NotDue {
        due_at_ms: envelope.and_then(|e| e.retry_at).unwrap_or_default(),
        attempts: task.attempts,
        last_error: task.last_error.clone(),
    }]
}

/// A resumable task asleep or waiting for a signal: what its record says.
fn suspended(task: &TaskInfo) -> Option<Reason> {
    let record = task.envelope.as_ref()?.resume.as_ref()?;
    let steps_done = record.steps_done();
    Some(match record.suspended_in()? {
        Entry::Sleep { until_ms } => Reason::Sleeping {
            until_ms: *until_ms,
            steps_done,
        },
        Entry::Wait { keys, until_ms, .. } => Reason::AwaitingSignal {
            keys: keys.clone(),
            until_ms: *until_ms,
            steps_done,
        },
        _ => return None,
    })
}

fn dead(name: &str, record: &Value) -> Reason {
    let reason = record["reason"].as_str().unwrap_or("no reason kept");
    Reason::Dead {
        name: name.to_string(),
        why: reason.to_string(),
    }
}

fn completed(record: &DoneRecord) -> Reason {
    Reason::Completed {
        task: record.task.clone(),
        completed_at_ms: record.completed_at_ms,
        attempts: record.attempts,
    }
}

fn place(task: &TaskInfo) -> Reason {
    let place = task.place.as_ref().expect("a place's status carries it");
    Reason::Place {
        group: place.group.clone(),
        task_id: task.id.clone().unwrap_or_default(),
        stands_for: place.stands_for.clone(),
    }
}
