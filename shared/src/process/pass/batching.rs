//! Step 1's arithmetic: how many tasks may start now, and which of the tasks probed go out
//! together in one claim batch, and when.

use tokio::time::Instant;

use super::Pass;
use crate::handler::Handler;
use crate::lane::Lane;
use crate::queue::{CLAIM_BATCH, CLAIM_BATCH_BYTES, TaskRead};

impl<H: Handler> Pass<'_, '_, H> {
    /// How many more tasks may start now.
    pub(super) fn room(&self) -> usize {
        let options = self.run.options;
        if *self.run.stop.borrow() || Instant::now() + options.margin >= options.deadline {
            return 0;
        }
        if self.run.queue_paused() {
            return 0;
        }
        // Tasks whose handlers are done and whose completion is on its way take no place, so
        // the next claims go out meanwhile; at most as many as the concurrency wait at once.
        let flight = &self.flight;
        if flight.completing >= options.concurrency {
            return 0;
        }
        let by_concurrency = options.concurrency.saturating_sub(flight.running);
        by_concurrency.min(self.budget())
    }

    /// Claims the cap still allows, counting those in flight.
    fn budget(&self) -> usize {
        (self.run.options.max_tasks as usize)
            .saturating_sub(self.report.claimed as usize + self.flight.running)
    }

    /// Whether the tasks ready wait for the walk's next window before they are claimed: after
    /// a key lane's window (a key's few tasks), fewer than a claim batch (and than there is
    /// room for) while the walk has more to give, once, until that window is in (a completion
    /// meanwhile does not send them alone: it did for nearly every key's last window, and a
    /// drain over 100 keys of 100 tasks sent 98 claims of 4). Key lanes' small windows then
    /// go out together, a claim multi-op for two windows instead of one each. A priority
    /// lane's tasks never wait: there a partial batch is what the room left, and waiting for
    /// a probe cost an ungrouped drain 5% of its rate.
    pub(super) fn tops_up(&self) -> bool {
        let want = self.room().min(CLAIM_BATCH);
        let bytes: usize = self.ready.iter().map(|(_, read)| body_len(read)).sum();
        if self.ready.len() >= want || bytes >= CLAIM_BATCH_BYTES {
            return false;
        }
        match &self.walk {
            // The probe sent to fill them is out (or another, which comes back as soon).
            None => self.topped_up,
            Some(walk) => !self.topped_up && !walk.ended() && matches!(walk.lane(), Lane::Key(_)),
        }
    }

    /// The next tasks to claim together: as many as there is room for, up to
    /// [`CLAIM_BATCH`] tasks and [`CLAIM_BATCH_BYTES`] of bodies (the first goes whatever
    /// its size).
    pub(super) fn next_batch(&mut self) -> Vec<(String, TaskRead)> {
        let most = self.room().min(CLAIM_BATCH);
        let mut batch = Vec::with_capacity(most);
        let mut bytes = 0;
        while batch.len() < most {
            let Some((_, read)) = self.ready.front() else {
                break;
            };
            bytes += body_len(read);
            if !batch.is_empty() && bytes > CLAIM_BATCH_BYTES {
                break;
            }
            batch.extend(self.ready.pop_front());
        }
        batch
    }
}

/// The bytes of a task's body a claim batch counts (none for one that could not be read).
fn body_len(read: &TaskRead) -> usize {
    match read {
        TaskRead::Found { body, .. } => body.len(),
        _ => 0,
    }
}
