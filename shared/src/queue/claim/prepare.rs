//! What a claim of a task just read comes to, short of taking it: a task that can never run
//! (poison, out of attempts, a concurrency key no gate can be named after, one a feature's
//! claim hook refuses) or was cancelled is buried here; one in backoff or that a feature leaves (paused) is answered, as is one whose group is busy when
//! its lock is read first; the rest is rewritten with this attempt counted, ready for the
//! claim's multi-op (which finds out whether a grouped task's group is busy otherwise).

use zookeeper_client as zk;

use super::{Restraints, Take};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::feature::AtClaim;
use crate::queue::Queue;
use crate::queue::TaskOutcome;
use crate::queue::bury::Burial;
use crate::queue::group_lock::LockDecision;
use crate::queue::held::Settled;
use crate::queue::place::PlaceTaken;
use crate::queue::record::CANCELLED;
use crate::task::{self, Body, Envelope, OnDead, Place, json};

/// What a claim of a task just read comes to, short of taking it.
#[allow(clippy::large_enum_variant)]
pub(super) enum Prepared {
    Take(Take),
    Decided(TaskOutcome),
}

/// A task as a claim just read it: its name, its body, its znode's version.
#[derive(Clone, Copy)]
struct Read<'a> {
    name: &'a str,
    body: &'a [u8],
    version: i32,
}

/// How a task a claim buries goes to the dead letters: the attempts it had, what its group
/// does, and whether it was cancelled (the claim answers so).
struct Fate {
    attempts: u32,
    on_dead: OnDead,
    cancelled: bool,
}

impl Fate {
    /// Buried with `attempts`, its group going on as `on_dead` says.
    fn dead(attempts: u32, on_dead: OnDead) -> Self {
        let cancelled = false;
        Fate {
            attempts,
            on_dead,
            cancelled,
        }
    }

    /// Cancelled, with `attempts`: its group goes on.
    fn cancelled(attempts: u32) -> Self {
        let (on_dead, cancelled) = (OnDead::Continue, true);
        Fate {
            attempts,
            on_dead,
            cancelled,
        }
    }
}

impl Queue {
    /// Buries a task just read that can never run (or was cancelled: the reason is
    /// [`CANCELLED`]): the claim's decision for it.
    async fn bury_read(
        &self,
        Read {
            name,
            body,
            version,
        }: Read<'_>,
        Fate {
            attempts,
            on_dead,
            cancelled,
        }: Fate,
        reason: String,
        last_error: Option<String>,
    ) -> Result<Prepared> {
        let task = Burial::Unclaimed {
            name,
            body,
            version,
            attempts,
            on_dead,
            by_claim: true,
        };
        let outcome = match self.bury(task, &reason, last_error).await? {
            Settled::Done if cancelled => TaskOutcome::Cancelled,
            Settled::Done => TaskOutcome::DeadLettered { reason },
            Settled::Gone => TaskOutcome::Gone,
            _ => TaskOutcome::Taken,
        };
        Ok(Prepared::Decided(outcome))
    }

    /// Decides what a claim of a task just read comes to, short of taking it: a poison body
    /// or one out of attempts or cancelled is buried here, one in backoff or paused is
    /// reported.
    pub(super) async fn prepare(
        &self,
        name: &str,
        body: &[u8],
        stat: &zk::Stat,
        now: &ZkTime,
        restraints: &Restraints,
    ) -> Result<Prepared> {
        let read = Read {
            name,
            body,
            version: stat.version,
        };
        let envelope = match task::parse(body) {
            Body::Envelope(envelope) => envelope,
            Body::Place(place) => {
                return self
                    .prepare_place(name, &place, stat, now, restraints)
                    .await;
            }
            // Its envelope nests it one level deeper: past the limit it could not be read back.
            Body::Plain(_) if json::depth(body) >= json::MAX_DEPTH => {
                let reason = format!(
                    "body is nested {} levels deep: in its envelope it would pass the limit of {}",
                    json::depth(body),
                    json::MAX_DEPTH
                );
                return self
                    .bury_read(read, Fate::dead(0, OnDead::Continue), reason, None)
                    .await;
            }
            Body::Plain(value) => Envelope::from_plain(name, value, stat.ctime),
            Body::Poison(reason) => {
                return self
                    .bury_read(read, Fate::dead(0, OnDead::Continue), reason, None)
                    .await;
            }
        };
        self.prepare_envelope(read, envelope, now, restraints).await
    }

    /// A claim that met a place (see `place`): the task it stands for, written into it when
    /// ready, prepared as any task read there.
    async fn prepare_place(
        &self,
        name: &str,
        place: &Place,
        stat: &zk::Stat,
        now: &ZkTime,
        restraints: &Restraints,
    ) -> Result<Prepared> {
        // A feature that leaves tasks of its type where they are (a pause) leaves the place:
        // asked about the task as far as the place tells it (its id and type). What would
        // bury the task is asked once the task is in its place.
        let mut stand_in = Envelope::new(&place.event_type, serde_json::Value::Null);
        stand_in.id.clone_from(&place.id);
        let found = &restraints.found;
        if (self.features()).any_leaves(&stand_in, now.latest_ms(), found) {
            return Ok(Prepared::Decided(TaskOutcome::Paused));
        }
        let on_dead = restraints
            .on_dead
            .for_type(place.on_dead, &place.event_type);
        let taken = self
            .groups()
            .take_place(name, place, stat.version, now.now_ms(), on_dead);
        let outcome = match taken.await? {
            PlaceTaken::Filled(envelope, body, stat) => {
                let read = Read {
                    name,
                    body: &body[..],
                    version: stat.version,
                };
                return self
                    .prepare_envelope(read, *envelope, now, restraints)
                    .await;
            }
            PlaceTaken::NotReady => TaskOutcome::InPlace,
            PlaceTaken::Ended { paused: false } => TaskOutcome::Gone,
            PlaceTaken::Ended { paused: true } => TaskOutcome::GroupBusy { owner: None },
            PlaceTaken::GroupBusy(owner) => TaskOutcome::GroupBusy { owner: Some(owner) },
            PlaceTaken::Taken => TaskOutcome::Taken,
        };
        Ok(Prepared::Decided(outcome))
    }

    /// [`Queue::prepare`] of the task `read` whose body is `envelope`.
    async fn prepare_envelope(
        &self,
        read: Read<'_>,
        mut envelope: Envelope,
        now: &ZkTime,
        restraints: &Restraints,
    ) -> Result<Prepared> {
        let name = read.name;
        // A feature that says the task never runs (see `crate::feature`): buried, whatever
        // else holds the task back (the list asks those first): malformed (a concurrency key
        // no gate can be named after), cancelled (its cancel mark seen), or with its reason.
        // One that says not now (a pause) leaves it where it is.
        // At the latest the time may be: what a feature refuses from a moment on (an expiry)
        // is refused once that moment may have come, never after.
        let answer = (self.features()).at_claim(&envelope, now.latest_ms(), &restraints.found);
        if answer == AtClaim::Leave {
            return Ok(Prepared::Decided(TaskOutcome::Paused));
        }
        if let Some((fate, reason, last)) = burial(answer, &envelope, restraints) {
            return self.bury_read(read, fate, reason, last).await;
        }
        if let Some(until_ms) = envelope.retry_at.filter(|at| *at > now.now_ms()) {
            return Ok(Prepared::Decided(TaskOutcome::Backoff { until_ms }));
        }
        let on_dead = restraints.on_dead.for_task(&envelope);
        if envelope.attempts >= self.settings().max_attempts {
            let reason = format!("gave up after {} attempts", envelope.attempts);
            let (attempts, last) = (envelope.attempts, envelope.last_error.clone());
            return self
                .bury_read(read, Fate::dead(attempts, on_dead), reason, last)
                .await;
        }
        let lock = match &envelope.group {
            None => None,
            Some(group) => {
                let key = envelope.concurrency_key.as_deref();
                let gated =
                    self.gates()
                        .goes_through_gate(&envelope.event_type, key, &restraints.limits);
                match self
                    .groups()
                    .lock_for_claim(group, name, &envelope, gated)
                    .await?
                {
                    LockDecision::Free(op) => Some(op),
                    LockDecision::Busy(owner) => {
                        return Ok(Prepared::Decided(TaskOutcome::GroupBusy { owner }));
                    }
                }
            }
        };
        envelope.attempts += 1;
        envelope.retry_at = None;
        match envelope.to_bytes() {
            Ok(rewritten) => Ok(Prepared::Take(Take {
                name: name.to_string(),
                envelope,
                body: rewritten,
                read_version: read.version,
                slots: Vec::new(),
                lock,
            })),
            // A body near ZooKeeper's limit (a plain body grows when wrapped) cannot be
            // rewritten, so it can never be claimed: it is poison.
            Err(Error::TooLarge { size, limit }) => {
                let reason = format!(
                    "task too large to claim: {size} bytes with its envelope, over {limit}"
                );
                let how = Fate::dead(envelope.attempts - 1, on_dead);
                self.bury_read(read, how, reason, None).await
            }
            Err(e) => Err(e),
        }
    }
}

/// How a task a feature refuses at claim (`answer`) goes to the dead letters: its fate, the
/// reason and its last error; `None` when the feature takes it.
fn burial(
    answer: AtClaim,
    envelope: &Envelope,
    restraints: &Restraints,
) -> Option<(Fate, String, Option<String>)> {
    let (attempts, last) = (envelope.attempts, envelope.last_error.clone());
    Some(match answer {
        AtClaim::Take | AtClaim::Leave => return None,
        AtClaim::Malformed { problem } => {
            let reason = format!("malformed {} envelope: {problem}", task::FORMAT);
            (Fate::dead(attempts, OnDead::Continue), reason, None)
        }
        AtClaim::Cancel => (Fate::cancelled(attempts), CANCELLED.into(), last),
        AtClaim::Bury { reason } => {
            let on_dead = restraints.on_dead.for_task(envelope);
            (Fate::dead(attempts, on_dead), reason, last)
        }
    })
}
