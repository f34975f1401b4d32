//! Burying: a task goes to the dead letters with a reason, in one multi-op that writes its
//! record and removes it, whoever has it: its holder (checked by the lease's version), nobody
//! (a lease created and deleted in the same multi-op fails it if someone holds the task), or
//! `delayed/` (a waiting task). Its group's lock is released or turned into the group's pause,
//! and registered features add their writes (`Feature::at_end`: its idempotency key deleted
//! when still its own, so the key may be published again; a cancelled task's cancel mark
//! deleted).
//!
//! Every caller buries through [`Queue::bury`]: a holder whose task failed for good or ran out
//! of attempts or interruptions, a claim that meets a poison body or a cancelled task, a cancel
//! of a pending or a waiting task.

use super::Queue;
use super::end::{Ending, To, Where};
use super::group_lock::{HeldLock, Release};
use super::held::Lease;
use super::held::Settled;
use crate::error::Result;
use crate::feature::{End, EndParts, EndWrite, Leaving};
use crate::lease::LeaseData;
use crate::task::{self, Body, OnDead, Place, StandsFor};

/// A task on its way to the dead letters, as its burier has it. (It lives for one call;
/// boxing the lease would buy nothing.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum Burial<'a> {
    /// Held under `lease`; `on_dead` says what its group does.
    Held {
        /// The holder's lease: its versions fence the burial.
        lease: Lease,
        /// What the task's group does now.
        on_dead: OnDead,
    },
    /// Under `tasks/` and held by nobody, read at `version`. `by_claim`: buried by the claim
    /// that met it (at its group's turn), not by a cancel before.
    Unclaimed {
        /// The task's name under `tasks/`.
        name: &'a str,
        /// Its body, as read: the dead-letter record keeps it.
        body: &'a [u8],
        /// The task znode's version when read.
        version: i32,
        /// Attempts the task had, for the record.
        attempts: u32,
        /// What the task's group does now.
        on_dead: OnDead,
        /// Whether the claim that met it buries it.
        by_claim: bool,
    },
    /// Waiting at `path` under `delayed/`, read at `version`.
    Waiting {
        /// Its path under `delayed/`.
        path: &'a str,
        /// The task's name.
        name: &'a str,
        /// Its body, as read: the dead-letter record keeps it.
        body: &'a [u8],
        /// The waiting znode's version when read.
        version: i32,
    },
}

impl From<Lease> for Burial<'_> {
    /// A held task whose group does what its envelope says.
    fn from(lease: Lease) -> Self {
        let on_dead = lease.task.envelope.on_dead.unwrap_or_default();
        Burial::Held { lease, on_dead }
    }
}

impl Burial<'_> {
    /// Whether it is buried at its group's turn (by the claim that met it), not before (a
    /// cancel of a pending task).
    fn at_turn(&self) -> bool {
        match self {
            Burial::Unclaimed { by_claim, .. } => *by_claim,
            _ => true,
        }
    }

    fn name(&self) -> &str {
        match self {
            Burial::Held { lease, .. } => &lease.task.name,
            Burial::Unclaimed { name, .. } | Burial::Waiting { name, .. } => name,
        }
    }
}

impl Queue {
    /// Moves a task to the dead letters with `reason` (see the module documentation), as an
    /// `Ending` (see `end`). [`Settled::Done`] when it went; [`Settled::Gone`] when the
    /// task was gone already; [`Settled::LeaseLost`] when our lease passed on;
    /// [`Settled::Moved`] when a task we did not hold was taken or changed since it was read.
    pub async fn bury(
        &self,
        task: impl Into<Burial<'_>>,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<Settled> {
        let (ending, parts) = self.burial(task.into(), reason, last_error).await?;
        let ended = self.end("bury", vec![ending], parts).await?;
        Ok(ended.settled.first().map_or(Settled::LeaseLost, |s| s.1))
    }

    /// The ending that buries `task` with `reason`, and the features' parts in it.
    async fn burial(
        &self,
        task: Burial<'_>,
        reason: &str,
        last_error: Option<String>,
    ) -> Result<(Ending, EndParts)> {
        let (body, attempts) = match &task {
            // The record keeps a capped copy of the body, so no size check here.
            Burial::Held { lease, .. } => (
                serde_json::to_vec(&lease.task.envelope)?,
                lease.task.attempt(),
            ),
            Burial::Unclaimed { body, attempts, .. } => (body.to_vec(), *attempts),
            Burial::Waiting { body, .. } => (body.to_vec(), attempts_in(body)),
        };
        let name = task.name().to_string();
        let letter = self.dead_letter_of(&name, &body, reason, attempts, last_error);
        let lock = self.lock_along(&task, &body, reason).await?;
        let (writes, parts) = self.dead_writes(&task, &body, reason).await?;
        // A grouped task buried before its turn leaves a place for its death, so that its
        // group pauses there if it must (see `place`).
        let tombstone = tombstone_of(&task, &body, reason).filter(|_| lock.is_none());
        let from = self.removal(task, tombstone);
        let to = To::Dead {
            letter: Box::new(letter),
        };
        let mut ending = Ending::new(name, from, to);
        ending.lock = lock;
        ending.writes = writes;
        Ok((ending, parts))
    }

    /// What registered features add to the burial of `task` (whose body is `body`) with
    /// `reason`: their writes (`Feature::at_end`) and their parts (`Feature::end_part`).
    async fn dead_writes(
        &self,
        task: &Burial<'_>,
        body: &[u8],
        reason: &str,
    ) -> Result<(Vec<(usize, EndWrite)>, EndParts)> {
        let parsed = match task {
            Burial::Held { .. } => None,
            _ => match task::parse(body) {
                Body::Envelope(envelope) => Some(envelope),
                _ => None,
            },
        };
        let id = id_of(task, body);
        let leaving = match task {
            Burial::Held { lease, .. } => Leaving {
                name: &lease.task.name,
                id: id.as_deref(),
                envelope: Some(&lease.task.envelope),
                held: Some(&lease.task),
                delivered: None,
                reason: Some(reason),
                within_another: false,
            },
            _ => Leaving {
                name: task.name(),
                id: id.as_deref(),
                envelope: parsed.as_ref(),
                held: None,
                delivered: None,
                reason: Some(reason),
                within_another: false,
            },
        };
        let (site, leaving) = (self.site(), [leaving]);
        let mut writes = self.features().at_end(&site, &leaving, End::Dead).await?;
        let parts = self
            .features()
            .end_parts(&site, &leaving, End::Dead, &self.memory.covers)
            .await?;
        Ok((writes.pop().unwrap_or_default(), parts))
    }

    /// Where `task` is taken from: checked against its holder's versions, or against a guard
    /// lease when nobody holds it (replaced by `tombstone` then, when it has one).
    fn removal(&self, task: Burial<'_>, tombstone: Option<Vec<u8>>) -> Where {
        let name = task.name().to_string();
        match task {
            Burial::Held { lease, .. } => Where::Held {
                task: self.layout().task(&name),
                lease_path: self.layout().lease(&name),
                lease: Box::new(lease),
            },
            Burial::Unclaimed { version, .. } => Where::Unclaimed {
                path: self.layout().task(&name),
                lease_path: self.layout().lease(&name),
                guard: LeaseData::new(self.consumer_id()).to_bytes(),
                version,
                tombstone,
            },
            Burial::Waiting { path, version, .. } => Where::Waiting {
                path: path.to_string(),
                version,
            },
        }
    }

    /// What burying `task` (whose body is `body`) does to its group's lock, when it holds
    /// it: released, or turned into the group's pause.
    async fn lock_along(
        &self,
        task: &Burial<'_>,
        body: &[u8],
        reason: &str,
    ) -> Result<Option<Release>> {
        match task {
            Burial::Held { lease, on_dead } => {
                let task = &lease.task;
                let Some(held) = lease.group_lock.clone() else {
                    return Ok(None);
                };
                let (id, name) = (&task.envelope.id, &task.name);
                let release = self
                    .groups()
                    .release_lock(held, id, name, *on_dead, reason)?;
                Ok(Some(release))
            }
            Burial::Unclaimed { name, on_dead, .. } => {
                let at_turn = task.at_turn();
                (self.lock_to_release(name, body, *on_dead, reason, at_turn)).await
            }
            // A waiting task keeps its group's lock while it waits (a retry keeps it): a
            // cancel releases it, so the group goes on.
            // (A cancel does not know the routes: the task's own `on_dead` decides.)
            Burial::Waiting { name, .. } => {
                (self.lock_to_release(name, body, own_on_dead(body), reason, false)).await
            }
        }
    }

    /// What burying the task in `body` (named `name`) does to its group's lock, when the
    /// task holds it: release it, or pause the group. A task `at_turn` (the claim that found
    /// it could never run) that does not hold it yet pauses a group without one.
    async fn lock_to_release(
        &self,
        name: &str,
        body: &[u8],
        on_dead: OnDead,
        reason: &str,
        at_turn: bool,
    ) -> Result<Option<Release>> {
        let Body::Envelope(envelope) = task::parse(body) else {
            return Ok(None);
        };
        let Some(group) = &envelope.group else {
            return Ok(None);
        };
        let Some(read) = self.groups().group_lock(group).await? else {
            let pause = at_turn && on_dead == OnDead::Pause;
            return Ok(pause.then(|| Release::PauseFree {
                path: self.layout().group(group),
                data: self
                    .groups()
                    .paused_lock(&envelope.id, name, reason)
                    .unwrap_or_default(),
            }));
        };
        if read.lock.id != envelope.id {
            return Ok(None);
        }
        let held = HeldLock {
            path: self.layout().group(group),
            version: read.version,
        };
        Ok(Some(self.groups().release_lock(
            held,
            &envelope.id,
            name,
            on_dead,
            reason,
        )?))
    }
}

/// What the task in `body` asks its group to do when it dies (go on, when it does not say).
fn own_on_dead(body: &[u8]) -> OnDead {
    match task::parse(body) {
        Body::Envelope(envelope) => envelope.on_dead.unwrap_or_default(),
        _ => OnDead::Continue,
    }
}

/// The place a pending grouped task leaves where it was when a cancel buries it before its
/// turn (unless it holds its group's lock, which the bury releases or pauses itself): the
/// group's turn decides there, with the routes' `on_dead`, which a cancel does not know.
/// `None` for any other burial.
fn tombstone_of(task: &Burial<'_>, body: &[u8], reason: &str) -> Option<Vec<u8>> {
    let Burial::Unclaimed { name, .. } = task else {
        return None;
    };
    if task.at_turn() {
        return None;
    }
    let Body::Envelope(envelope) = task::parse(body) else {
        return None;
    };
    let group = envelope.group.as_deref()?;
    let stands_for = StandsFor::Dead {
        letter: name.to_string(),
        reason: reason.to_string(),
    };
    Some(Place::of(&envelope, group, &envelope.id, stands_for).to_bytes())
}

/// The envelope id of the task being buried (a plain body's is its name); none for poison.
fn id_of(task: &Burial<'_>, body: &[u8]) -> Option<String> {
    match task {
        Burial::Held { lease, .. } => Some(lease.task.envelope.id.clone()),
        _ => match task::parse(body) {
            Body::Envelope(envelope) => Some(envelope.id),
            Body::Plain(_) => Some(task.name().to_string()),
            Body::Place(_) | Body::Poison(_) => None,
        },
    }
}

/// The attempts an envelope in `body` counts; 0 for any other body.
pub(super) fn attempts_in(body: &[u8]) -> u32 {
    match task::parse(body) {
        Body::Envelope(envelope) => envelope.attempts,
        _ => 0,
    }
}
