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
            let stepped = with_step_znodes(&batch);
            self.jobs.push(Box::pin(async move {
                let complete = |queue: Queue| {
                    let batch = batch.clone();
                    async move { queue.complete_many(batch).await }
                };
                let sent = run.settle(complete).await;
                match &sent {
                    Ok(Sent::Answered(settled, resent)) => {
                        drop_steps(run.queue(), &stepped, settled, *resent).await;
                    }
                    _ => run.queue().gates().free_slots(&slots).await,
                }
                Event::Completed(names, sent)
            }));
        }
    }
}

/// The tasks of `batch` whose records keep entries in step znodes: their names and ids.
fn with_step_znodes(batch: &[Lease]) -> Vec<(String, String)> {
    (batch.iter())
        .filter(|l| l.task.steps.stored() > 0)
        .map(|l| (l.task.name.clone(), l.task.envelope.id.clone()))
        .collect()
}

/// Deletes the step znodes of each task of `stepped` whose completion took effect (or whose
/// first try did, its reply lost: `resent`). One that is not deleted stays: a completed task's
/// step znodes are read by nobody, and `event-bridge` names none as stuck.
async fn drop_steps(
    queue: Queue,
    stepped: &[(String, String)],
    settled: &[(String, Settled)],
    resent: bool,
) {
    for (name, id) in stepped {
        let ended = settled
            .iter()
            .any(|(n, s)| n == name && (*s == Settled::Done || (resent && *s == Settled::Gone)));
        if !ended {
            continue;
        }
        match queue.drop_steps(id).await {
            Ok(deleted) => tracing::debug!(task = %name, deleted, "step znodes deleted"),
            Err(error) => {
                tracing::warn!(task = %name, %error, "step znodes not deleted: left behind");
            }
        }
    }
}
