//! Step 4 of a pass: the tasks that succeeded completed together, a batch to a multi-op, and
//! what the answers teach the pass (numbers gone, groups whose next task may go).

use super::{COMPLETE_BATCH, Event, Pass};
use crate::handler::Handler;
use crate::process::send::Sent;
use crate::queue::TaskOutcome;
use crate::queue::{Lease, Queue, Settled, SlotShare};

impl<H: Handler> Pass<'_, '_, H> {
    /// Accounts for a batch of completions.
    pub(super) fn completed(&mut self, names: Vec<String>, sent: Sent<Vec<(String, Settled)>>) {
        match sent {
            Sent::Answered(settled, resent) => {
                let gone = self.report.count_completions(settled, resent);
                for name in names.iter().filter(|n| !gone.contains(n)) {
                    let _ = self.groups.stopped(name, None);
                }
                for name in gone {
                    self.mark_gone(&name);
                    // The group's next task, if this pass saw it, goes first.
                    if let Some(next) = self.groups.completed(&name) {
                        self.ready.push_front(next);
                    }
                }
            }
            Sent::Unsettled => {
                for name in names {
                    let _ = self.groups.stopped(&name, None);
                    tracing::warn!(task = %name, "not completed before the deadline: left to the reaper");
                    self.report.count(&TaskOutcome::Unsettled);
                }
            }
        }
    }

    /// Step 4: completes the tasks that succeeded together, up to [`COMPLETE_BATCH`] to a
    /// multi-op.
    pub(super) fn complete(&mut self, mut succeeded: Vec<Lease>) {
        let run = self.run;
        while !succeeded.is_empty() {
            let batch: Vec<Lease> = succeeded
                .drain(..succeeded.len().min(COMPLETE_BATCH))
                .collect();
            let names = batch.iter().map(|l| l.task.name.clone()).collect();
            // The slots the batch holds go with its completion; one that does not happen
            // (the deadline came first, an error) frees them here.
            let slots: Vec<SlotShare> = batch.iter().flat_map(|l| l.slots().to_vec()).collect();
            self.jobs.push(Box::pin(async move {
                let complete = |queue: Queue| {
                    let batch = batch.clone();
                    async move { queue.complete_many(batch).await }
                };
                let sent = run.settle(complete).await;
                if !matches!(sent, Ok(Sent::Answered(..))) {
                    run.queue().gates().free_slots(&slots).await;
                }
                Event::Completed(names, sent)
            }));
        }
    }
}
