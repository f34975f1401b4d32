//! Cancelling tasks nobody holds: a pending or waiting task goes to the dead letters at once
//! with the reason `cancelled`. A held task gets a mark instead, which is a feature of its own
//! (`features/cancel_marks/`).
//!
//! A pending task is cancelled with the multi-op that buries poison: a guard lease created and
//! deleted (so it fails if anyone holds the task), the dead letter created, the task deleted at
//! the version read; a waiting one with `create dead/T` and `delete delayed/B/…` at its
//! version.

use super::bury::{Burial, attempts_in};
use super::held::Settled;
use super::outcome::TaskOutcome;
use super::record::CANCELLED;
use crate::error::Result;
use crate::task::OnDead;

recipe!(
    /// Cancelling a pending or waiting task (`cancels`).
    Cancels,
    cancels
);

impl Cancels<'_> {
    /// Cancels pending task `name` (read at `version`), which nobody may hold: to the dead
    /// letters with the reason `cancelled`. [`TaskOutcome::Taken`] when someone holds it now.
    pub async fn cancel_pending(
        self,
        name: &str,
        body: &[u8],
        version: i32,
    ) -> Result<TaskOutcome> {
        let task = Burial::Unclaimed {
            name,
            body,
            version,
            attempts: attempts_in(body),
            on_dead: OnDead::Continue,
            by_claim: false,
        };
        Ok(match self.bury(task, CANCELLED, None).await? {
            Settled::Done => TaskOutcome::DeadLettered {
                reason: CANCELLED.into(),
            },
            Settled::Gone => TaskOutcome::Gone,
            _ => TaskOutcome::Taken,
        })
    }

    /// Cancels a task waiting at `path` under `delayed/` (read at `version`): to the dead
    /// letters, and its group goes on. `false` when it moved or went meanwhile.
    pub async fn cancel_waiting(
        self,
        path: &str,
        name: &str,
        body: &[u8],
        version: i32,
    ) -> Result<bool> {
        let task = Burial::Waiting {
            path,
            name,
            body,
            version,
        };
        Ok(self.bury(task, CANCELLED, None).await? == Settled::Done)
    }

    /// Creates `path` (a base path of ours) when a queue made by an earlier version lacks it.
    pub(crate) async fn ensure_parent(self, path: &str) -> Result<()> {
        self.site().ensure(path).await
    }
}
