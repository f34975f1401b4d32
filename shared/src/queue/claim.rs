//! Taking a task: the claim's multi-op (what a claim of a task just read comes to, short of
//! taking it, is in `claim/prepare.rs`; burying a task nobody can claim is in `bury`).

mod checks;
mod multi;
mod prepare;
mod shares;

pub(super) use checks::LatestChecks;
use multi::{Owner, Step, claim_multi};
use prepare::Prepared;
use shares::{SlotsInDoubt, held_slots, shares_of, slots_of};

use zookeeper_client as zk;

use super::Queue;
use super::gate::{GateWrite, Wanting};
use super::group_lock::{HeldLock, LockDecision, LockOp};
use super::held::Lease;
use super::outcome::TaskOutcome;
use super::slots::SlotShare;
use super::turns::Held;
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::feature::{ClaimCheck, Found, StartRead};
use crate::lease::LeaseData;
use crate::limit::RouteLimits;
use crate::task::{Envelope, OnDeadPolicy, Task};

/// Tasks claimed in one multi-op, at most.
pub const CLAIM_BATCH: usize = 32;

/// Bytes of task bodies claimed in one multi-op, at most (a larger task is claimed alone).
pub const CLAIM_BATCH_BYTES: usize = 256 * 1024;

/// A task checked and ready to take: its envelope with this attempt counted, rewritten.
struct Take {
    name: String,
    envelope: Envelope,
    body: Vec<u8>,
    read_version: i32,
    /// The gates that cap tasks in flight it takes a place in.
    slots: Vec<String>,
    /// For a grouped task, what the claim does to the group's lock (the next one).
    lock: Option<LockOp>,
}

impl Take {
    /// Operations of this task in the claim's multi-op.
    fn op_count(&self) -> usize {
        3 + usize::from(self.lock.is_some())
    }

    /// The lease of a task whose claim landed, from its results.
    fn taken(
        self,
        results: &[zk::MultiWriteResult],
        lease_path: &str,
        slots: Vec<SlotShare>,
    ) -> Result<TaskOutcome> {
        let (lock, claim) = results.split_at(usize::from(self.lock.is_some()));
        // The lease's `czxid` is the claim's zxid: the fencing token.
        let (lease_version, task_version, token) = match claim {
            [
                _,
                zk::MultiWriteResult::SetData { stat: l },
                zk::MultiWriteResult::SetData { stat: t },
            ] => (l.version, t.version, l.czxid),
            other => {
                let msg = format!("claim returned {other:?}");
                let e = zk::Error::UnexpectedError(msg);
                return Err(Error::zk("claim", lease_path.to_string(), e));
            }
        };
        let group_lock = self.lock.map(|op| HeldLock {
            path: op.path().to_string(),
            version: match lock {
                [zk::MultiWriteResult::SetData { stat }] => stat.version,
                _ => 0,
            },
        });
        let steps = crate::resume::Steps::resumed(self.envelope.resume.clone());
        let task = Task {
            name: self.name,
            envelope: self.envelope,
            fencing_token: token,
            progress: Default::default(),
            steps,
        };
        Ok(TaskOutcome::Claimed(Box::new(Lease {
            task,
            task_version,
            lease_version,
            group_lock,
            delivered: None,
            slots,
        })))
    }
}

/// The gates a claim goes through: their rewrites, and this process's turn at them.
struct GatePass {
    writes: Vec<GateWrite>,
    _turns: Option<Held>,
}

/// What came of a claim's multi-op: the outcomes known, and the tasks to try again, when
/// something the claim was decided on had moved.
type Taken = (Vec<(usize, TaskOutcome)>, Option<Again>);

/// Tasks a claim's multi-op left to try again, and why.
enum Again {
    /// A gate had moved since this process knew it: through the gates again, read afresh.
    Gates(Vec<(usize, Take)>),
    /// A znode a feature's answers rest on (the check at this index of the claim's checks)
    /// had moved since it was read: read again, and the feature asked again.
    Checked(usize, Vec<(usize, Take)>),
}

/// How many times one claim reads a checked znode again after it moved under the claim; the
/// tasks still untried after that are left to the caller.
const CHECK_REREADS: u32 = 3;

/// What a run must not run, as it read it: what the features' start reads found (a pause,
/// the marks of cancelled tasks), what a group does when its task dies, the routes' limits.
#[derive(Clone, Debug, Default)]
pub struct Restraints {
    /// What the run's start read found for the features (`Feature::listed_at_start`,
    /// `Feature::read_at_start`), which their claim hooks see, and the znodes every claim
    /// checks.
    pub found: Found,
    /// What a group does when a task of a type goes to the dead letters, when the task does
    /// not say (its route may).
    pub on_dead: OnDeadPolicy,
    /// The routes' limits (`max_in_flight`, `rate`).
    pub limits: RouteLimits,
}

impl Queue {
    /// Tries to claim task `name`. Losing the race is [`TaskOutcome::Taken`], not an error.
    /// For tests only (feature `testing`): programs claim with [`Queue::claim_many`].
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub async fn claim(&self, name: &str, now: &ZkTime) -> Result<TaskOutcome> {
        let path = self.layout().task(name);
        match self.client().get_data(&path).await {
            Ok((body, stat)) => {
                self.claim_read(name, &body, &stat, now, &Restraints::default())
                    .await
            }
            Err(zk::Error::NoNode) => Ok(TaskOutcome::Gone),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Claims task `name` whose body and stat were just read, unless `restraints` keep it
    /// from running. For tests only (feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub async fn claim_read(
        &self,
        name: &str,
        body: &[u8],
        stat: &zk::Stat,
        now: &ZkTime,
        restraints: &Restraints,
    ) -> Result<TaskOutcome> {
        let read = [(name.to_string(), body.to_vec(), *stat)];
        let mut outcomes = self.claim_many(&read, now, restraints).await?;
        Ok(outcomes.pop().flatten().unwrap_or(TaskOutcome::Taken))
    }

    /// Claims the tasks `reads` (name, body, stat, as just read) in one multi-op: one
    /// request for the batch however many it holds. The outcomes come back in the order of
    /// `reads`; `None` is a task not tried, because the claim of one before it lost a race,
    /// and that still looked free in the one read that followed the race (whoever won may be
    /// working through the same tasks: the caller decides whether to try again), or because
    /// a znode the features' answers rest on (`paused`) changed under the claim more times
    /// than it reads it again. Tasks a feature leaves (paused) are left as they are, as the
    /// read in `restraints` (or a newer one this process made) says and as the multi-op's
    /// check of that znode at the version read confirms ([`Found::checks`]); cancelled ones
    /// are buried. A
    /// batch is bounded by the caller: [`CLAIM_BATCH`] tasks and
    /// [`CLAIM_BATCH_BYTES`] of bodies at most, keeping the request far under ZooKeeper's
    /// 1 MB.
    pub async fn claim_many(
        &self,
        reads: &[(String, Vec<u8>, zk::Stat)],
        now: &ZkTime,
        restraints: &Restraints,
    ) -> Result<Vec<Option<TaskOutcome>>> {
        // What the features' checked znodes said when this process last read them, when
        // newer than the run's copy.
        let newer = (self.memory.checks).newer_than(&restraints.found, self.features());
        let restraints = &match newer {
            Some(found) => std::borrow::Cow::Owned(Restraints {
                found,
                ..restraints.clone()
            }),
            None => std::borrow::Cow::Borrowed(restraints),
        };
        let mut outcomes: Vec<Option<TaskOutcome>> = Vec::with_capacity(reads.len());
        let mut takes = Vec::new();
        for (index, (name, body, stat)) in reads.iter().enumerate() {
            match self.prepare(name, body, stat, now, restraints).await? {
                Prepared::Decided(outcome) => outcomes.push(Some(outcome)),
                Prepared::Take(take) => {
                    outcomes.push(None);
                    takes.push((index, take));
                }
            }
        }
        // Through the gates as this process knows them; once more, read afresh, when one of
        // them moved since (another consumer's admission). The znodes the features' answers
        // rest on are checked at the version read: when one moved, it is read again, its
        // feature told, and the tasks it now leaves (paused) left.
        let mut tried: Option<Vec<usize>> = None;
        let (mut fresh, mut rereads) = (false, 0);
        let mut found = std::borrow::Cow::Borrowed(&restraints.found);
        loop {
            let gates = (self.gate(&mut takes, &mut outcomes, now, restraints, fresh)).await?;
            tried.get_or_insert_with(|| takes.iter().map(|(i, _)| *i).collect());
            let checks = found.checks().to_vec();
            let (done, again) = self.take_many(takes, gates, !fresh, &checks).await?;
            for (index, outcome) in done {
                outcomes[index] = Some(outcome);
            }
            match again {
                Some(Again::Gates(rest)) if !rest.is_empty() => (takes, fresh) = (rest, true),
                Some(Again::Checked(c, rest)) if rereads < CHECK_REREADS => {
                    rereads += 1;
                    let (at, check) = &checks[c];
                    self.read_checked_again(*at, check, found.to_mut()).await?;
                    takes = rest;
                    takes.retain(|(index, take)| {
                        let left =
                            (self.features()).leaves(*at, &take.envelope, now.latest_ms(), &found);
                        if left {
                            outcomes[*index] = Some(TaskOutcome::Paused);
                        }
                        !left
                    });
                    if takes.is_empty() {
                        break;
                    }
                }
                _ => break,
            }
        }
        self.learn_stale(reads, &tried.unwrap_or_default(), &mut outcomes)
            .await;
        Ok(outcomes)
    }

    /// Takes `takes` through the gates of their routes (read afresh when `fresh`): those
    /// admitted get their slot (when the route caps tasks in flight) and stay; the others are
    /// answered [`TaskOutcome::Limited`] in `outcomes` and leave. Returns the gates'
    /// rewrites, whose `admitted` are indices in `outcomes`, with this process's turn at them.
    async fn gate(
        &self,
        takes: &mut Vec<(usize, Take)>,
        outcomes: &mut [Option<TaskOutcome>],
        now: &ZkTime,
        restraints: &Restraints,
        fresh: bool,
    ) -> Result<GatePass> {
        // The gates' recipe only when a route has limits.
        if restraints.limits.is_empty() {
            return Ok(GatePass {
                writes: Vec::new(),
                _turns: None,
            });
        }
        let tasks: Vec<Wanting> = takes
            .iter()
            .map(|(_, t)| {
                let envelope = &t.envelope;
                let key = envelope.concurrency_key.as_deref();
                (envelope.event_type.as_str(), t.name.as_str(), key)
            })
            .collect();
        let gated = (self
            .gates()
            .through_gates(&tasks, now, &restraints.limits, fresh))
        .await?;
        for ((_, take), slots) in takes.iter_mut().zip(gated.slots) {
            take.slots = slots;
        }
        let mut writes = gated.writes;
        for write in &mut writes {
            write.admitted = write.admitted.iter().map(|pos| takes[*pos].0).collect();
        }
        let mut refused = gated.refused;
        refused.sort_unstable();
        for (pos, retry_in_ms) in refused.into_iter().rev() {
            let (index, _) = takes.remove(pos);
            outcomes[index] = Some(TaskOutcome::Limited { retry_in_ms });
        }
        Ok(GatePass {
            writes,
            _turns: gated.turns,
        })
    }

    /// The claim's multi-op, for every task of `takes` at once: per task (for a grouped
    /// one, after creating or taking over its group's lock) its lease created and bumped to
    /// version 1, and the task rewritten at the version read. When one fails, that task's
    /// outcome is known (taken, gone, or its group busy); those before it passed ZooKeeper's
    /// checks and are sent again; those after it are left untried, unless it failed at its
    /// group's lock (see [`Queue::lock_failed`]).
    async fn take_many(
        &self,
        mut takes: Vec<(usize, Take)>,
        pass: GatePass,
        may_regate: bool,
        checks: &[(usize, ClaimCheck)],
    ) -> Result<Taken> {
        // The turns are held until the multi-op is answered.
        let GatePass {
            writes: mut gates,
            _turns,
        } = pass;
        let mut outcomes = Vec::with_capacity(takes.len());
        let lease_data = LeaseData::new(self.consumer_id()).to_bytes();
        while !takes.is_empty() {
            let paths: Vec<(String, String)> = takes
                .iter()
                .map(|(_, t)| (self.layout().task(&t.name), self.layout().lease(&t.name)))
                .collect();
            let slots = slots_of(&gates, &takes);
            let multi = claim_multi(checks, &gates, &slots, &takes, &paths, &lease_data);
            // Until the multi-op is answered, its slots are in doubt (see `SlotsInDoubt`).
            let doubt = SlotsInDoubt::new(self, &slots);
            let committed = self.commit("claim", &multi).await;
            if committed.is_err() {
                // Whether the gates' rewrites landed is not known.
                gates.iter().for_each(|g| self.memory.gates.forget(&g.path));
            } else {
                doubt.answered();
            }
            let failed = match committed? {
                Ok(results) => {
                    let takes = std::mem::take(&mut takes);
                    let results = &results[checks.len()..];
                    outcomes.extend(claimed(self, &gates, slots, results, takes, &paths)?);
                    break;
                }
                Err(failed) => failed,
            };
            let (task, step) = match failed.tag {
                // What a feature's answers rest on moved since it was read (something was
                // paused or unpaused).
                Owner::Check(c) => return Ok((outcomes, Some(Again::Checked(c, takes)))),
                // Another consumer went through the gate meanwhile: its tasks wait. (A slot
                // fails only on a name already taken, which its random tag makes as good as
                // impossible: it counts as a gate that moved.)
                Owner::Gate(g) | Owner::Slot(g) => {
                    if failed.error == zk::Error::NoNode {
                        self.gates().forget_gate_parents();
                    }
                    let gate = gates.remove(g);
                    self.memory.gates.forget(&gate.path);
                    if may_regate {
                        return Ok((outcomes, Some(Again::Gates(takes))));
                    }
                    limited(gate, &mut takes, &mut outcomes);
                    continue;
                }
                Owner::Task(task, step) => (task, step),
            };
            if step == Step::Lock {
                if self
                    .lock_failed(&mut takes, task, &failed.error, &mut outcomes)
                    .await?
                {
                    continue;
                }
                return Err(failed.unexpected("claim"));
            }
            let outcome = match (step, &failed.error) {
                (Step::Lease, zk::Error::NodeExists) | (Step::Task, zk::Error::BadVersion) => {
                    TaskOutcome::Taken
                }
                (Step::Task, zk::Error::NoNode) => TaskOutcome::Gone,
                _ => return Err(failed.unexpected("claim")),
            };
            outcomes.push((takes[task].0, outcome));
            takes.truncate(task);
        }
        Ok((outcomes, None))
    }

    /// Reads `check`'s znode again (it moved under a claim), tells the feature at index `at`,
    /// and takes its answer into `found`, and into what this process's next claims start
    /// from.
    async fn read_checked_again(
        &self,
        at: usize,
        check: &ClaimCheck,
        into: &mut Found,
    ) -> Result<()> {
        let read = self.read_path(&check.path).await?;
        let found = read.as_ref().map(|(data, stat)| (&data[..], stat));
        let path = &check.path;
        let answer = (self.features()).saw_at_start(at, &StartRead { path, found })?;
        self.memory.checks.saw(at, self.features(), &answer);
        into.learn(at, answer);
        Ok(())
    }

    /// What this process knows of `gates` after a claim's multi-op through them landed with
    /// `results`: each at its new version, with the tasks of its slot (`slots`, per gate).
    fn learn_gates(
        &self,
        gates: &[GateWrite],
        results: &[zk::MultiWriteResult],
        slots: &[(String, Vec<String>)],
    ) {
        for ((gate, result), (_, tasks)) in gates.iter().zip(results).zip(slots) {
            let version = match result {
                zk::MultiWriteResult::SetData { stat } => stat.version,
                _ => 0,
            };
            let (base, took) = (gate.base, tasks.len());
            let gates = &self.memory.gates;
            gates.admitted(&gate.path, base, version, took, gate.bucket, gate.at_ms);
        }
    }

    /// Task `task` of `takes` failed the claim's multi-op at its group's lock with `error`:
    /// a create that met a lock reads it, and takes it over when it names the task (the
    /// multi-op is sent again with the task); a busy or paused group, or a lock that moved
    /// since it was read, answers the task [`TaskOutcome::GroupBusy`] and the multi-op is
    /// sent again without it (a busy group says nothing about the tasks after it). `false`:
    /// `error` is none a lock's operation meets.
    async fn lock_failed(
        &self,
        takes: &mut Vec<(usize, Take)>,
        task: usize,
        error: &zk::Error,
        outcomes: &mut Vec<(usize, TaskOutcome)>,
    ) -> Result<bool> {
        let take = &mut takes[task].1;
        let owner = match (&take.lock, error) {
            (Some(LockOp::Create { .. }), zk::Error::NodeExists) => {
                let group = take.envelope.group.as_deref().unwrap_or_default();
                match self
                    .groups()
                    .lock_met(group, &take.name, &take.envelope)
                    .await?
                {
                    LockDecision::Free(op) => {
                        take.lock = Some(op);
                        return Ok(true);
                    }
                    LockDecision::Busy(owner) => owner,
                }
            }
            // A lock that moved since it was read, or `groups/` itself gone: busy for now.
            (Some(LockOp::TakeOver { .. }), zk::Error::BadVersion | zk::Error::NoNode)
            | (Some(LockOp::Create { .. }), zk::Error::NoNode) => None,
            _ => return Ok(false),
        };
        let (index, _) = takes.remove(task);
        outcomes.push((index, TaskOutcome::GroupBusy { owner }));
        Ok(true)
    }
}

/// The outcomes of `takes` (at `paths`), whose claim's multi-op landed with `results`:
/// each task taken, with its shares of the gates' `slots`.
fn claimed(
    queue: &Queue,
    gates: &[GateWrite],
    slots: Vec<(String, Vec<String>)>,
    results: &[zk::MultiWriteResult],
    takes: Vec<(usize, Take)>,
    paths: &[(String, String)],
) -> Result<Vec<(usize, TaskOutcome)>> {
    queue.learn_gates(gates, results, &slots);
    let held = held_slots(gates, slots);
    let slot_ops = held.iter().flatten().count();
    let mut results = &results[gates.len() + slot_ops..];
    let mut outcomes = Vec::with_capacity(takes.len());
    for ((index, take), (_, lease_path)) in takes.into_iter().zip(paths) {
        let (mine, rest) = results.split_at(take.op_count());
        results = rest;
        let shares = shares_of(gates, &held, &take);
        outcomes.push((index, take.taken(mine, lease_path, shares)?));
    }
    admitted_by_rate(gates, &outcomes);
    // Every lease of one multi-op has its zxid: the claim's token, which its slots keep.
    let token = outcomes.iter().find_map(|(_, outcome)| match outcome {
        TaskOutcome::Claimed(lease) => Some(lease.task.fencing_token),
        _ => None,
    });
    if let Some(token) = token {
        held.iter().flatten().for_each(|slot| slot.landed(token));
    }
    Ok(outcomes)
}

/// Logs each task a rate's gate admitted, with the bucket's moment it was admitted at (ZooKeeper
/// time, ms): admissions by every consumer, ordered by those moments, never outrun the rate
/// plus the burst (the contract checker reads these lines).
fn admitted_by_rate(gates: &[GateWrite], outcomes: &[(usize, TaskOutcome)]) {
    for gate in gates {
        let Some(bucket) = gate.bucket else { continue };
        for (index, outcome) in outcomes {
            if let (true, TaskOutcome::Claimed(lease)) = (gate.admitted.contains(index), outcome) {
                tracing::debug!(task = %lease.task.name, fencing_token = lease.task.fencing_token,
                    gate = %gate.path, bucket_ms = bucket.at_ms, "admitted through a rate");
            }
        }
    }
}

/// The tasks `gate` admitted that still wait in `takes` after it moved: over their limit for
/// now, worth another try soon. (Those answered already, a busy group, keep their answer.)
fn limited(
    gate: GateWrite,
    takes: &mut Vec<(usize, Take)>,
    outcomes: &mut Vec<(usize, TaskOutcome)>,
) {
    let waiting = |i: &usize| takes.iter().any(|(index, _)| index == i);
    let retry_in_ms = crate::limit::SLOT_POLL_MS;
    let limited: Vec<usize> = gate.admitted.into_iter().filter(waiting).collect();
    outcomes.extend(
        limited
            .into_iter()
            .map(|i| (i, TaskOutcome::Limited { retry_in_ms })),
    );
    takes.retain(|(index, _)| !outcomes.iter().any(|(o, _)| o == index));
}
