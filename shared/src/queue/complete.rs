//! Completing held tasks: task and lease deleted together, many tasks in one multi-op, with
//! what each completion writes besides (its key marked completed, its group's lock released,
//! its completion record, the slots it held in gates). Checked like every holder's write (see `holder`).

use zookeeper_client as zk;

use super::Queue;
use super::dependents::{MarkerWrite, NoChildren};
use super::done::{DoneWrite, within_request};
use super::group_lock::HeldLock;
use super::held::Lease;
use super::held::Settled;
use super::key_owner::CompletedKey;
use super::ops::{Multi, Op, Part};
use super::slots::{Shrink, SlotShare, push_rename};
use crate::error::Result;
use crate::task::Task;
use crate::task::batch::MAX_TALLY_BYTES;

/// What completing one task writes besides deleting task and lease.
struct Extras {
    key: Option<CompletedKey>,
    lock: Option<HeldLock>,
    done: Option<DoneWrite>,
    /// The places it still holds in gates: freed in the completion's multi-op (its slots
    /// renamed or deleted), so a limited task costs no request of its own to free them.
    slots: Vec<SlotShare>,
    /// Its marker's write: settled for the children waiting for it (see `dependents`).
    marker: MarkerWrite,
}

/// Re-reads of a batch a completion may make when other writers keep changing it.
const BATCH_TRIES: usize = 64;
/// Re-reads of markers a completion may make when children keep registering.
const MARKER_TRIES: usize = 64;
/// The tag index of the check that stands for every task's marker.
const COVERED: usize = usize::MAX;

/// The batches `leases`' tasks are members of, each once.
fn batch_names(leases: &[Lease]) -> Vec<String> {
    let mut names: Vec<String> = (leases.iter())
        .filter_map(|l| l.task.envelope.batch.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `leases`' tasks that are members of a batch: index and batch name.
fn members(leases: &[Lease]) -> impl Iterator<Item = (usize, &str)> {
    (leases.iter().enumerate()).filter_map(|(i, l)| Some((i, l.task.envelope.batch.as_deref()?)))
}

/// A completion's multi-op for `leases` (with their task and lease `paths`): each operation
/// tagged with the index of its lease and what it writes.
fn completion<'a>(
    leases: &'a [Lease],
    paths: &'a [(String, String)],
    extras: &'a [Extras],
    covered: Option<&'a NoChildren>,
) -> Multi<'a, (usize, Part)> {
    let mut multi = Multi::new();
    // One check of `dependents/` stands for every task's marker (see `dependents`).
    if let Some(covered) = covered {
        covered.push(&mut multi, (COVERED, Part::Dependents));
    }
    for (i, ((l, (task, lease)), extra)) in leases.iter().zip(paths).zip(extras).enumerate() {
        multi
            .push((i, Part::Task), Op::Delete(task, l.task_version))
            .push((i, Part::Lease), Op::Delete(lease, l.lease_version));
        if let Some(key) = &extra.key {
            multi
                .push(
                    (i, Part::Key),
                    Op::Set(&key.key.path, &key.data, key.key.version),
                )
                .push((i, Part::Key), Op::Create(&key.entry, b""));
        }
        if let Some(lock) = &extra.lock {
            multi.push((i, Part::Lock), Op::Delete(&lock.path, lock.version));
        }
        if covered.is_none() {
            extra.marker.push(&mut multi, (i, Part::Dependents));
        }
        if let Some(done) = &extra.done {
            multi.push((i, Part::Done), Op::Create(&done.record, &done.record_data));
            if let Some(entry) = &done.id_entry {
                multi.push((i, Part::DoneId), Op::Create(entry, &done.id_data));
            }
        }
    }
    multi
}

impl Queue {
    /// Deletes task and lease together, if the lease is still ours. For tests only (feature
    /// `testing`): programs complete with [`Queue::complete_many`].
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub async fn complete(&self, lease: Lease) -> Result<Settled> {
        let mut settled = self.complete_many(vec![lease]).await?;
        Ok(settled.pop().map_or(Settled::LeaseLost, |(_, s)| s))
    }

    /// Completes several held tasks in one multi-op, each deleting task and lease together if
    /// the lease is still ours; a task published with an idempotency key also marks its key
    /// completed and files it by when it expires; with `KEEP_DONE`, each leaves its completion
    /// record (see `done`). If one write fails, the multi-op changes
    /// nothing and names it: that lease is read again when only its version is off (and kept
    /// when it is still ours), else its task is reported lost or gone, and the rest are
    /// committed again without it. A key that is missing is left out.
    ///
    /// Completion records with large results are split over several multi-ops, so each
    /// stays within ZooKeeper's request limit (see `done::within_request`).
    pub async fn complete_many(&self, leases: Vec<Lease>) -> Result<Vec<(String, Settled)>> {
        let extras = self.completion_extras(&leases).await?;
        let pairs: Vec<(Lease, Extras)> = leases.into_iter().zip(extras).collect();
        let mut settled = Vec::with_capacity(pairs.len());
        // A member whose batch is not counted yet in the part: what its tally may add.
        let mut batches_seen = std::collections::HashSet::new();
        let weights: Vec<usize> = (pairs.iter())
            .map(|(lease, _)| match &lease.task.envelope.batch {
                Some(b) if batches_seen.insert(b.clone()) => MAX_TALLY_BYTES,
                _ => 0,
            })
            .collect();
        let weighed: Vec<((Lease, Extras), usize)> = pairs.into_iter().zip(weights).collect();
        for part in within_request(weighed, |((_, extra), tally)| {
            extra.done.as_ref().map_or(0, DoneWrite::bytes) + tally
        }) {
            let part: Vec<(Lease, Extras)> = part.into_iter().map(|(pair, _)| pair).collect();
            let (leases, extras) = part.into_iter().unzip();
            settled.extend(self.commit_completions(leases, extras).await?);
        }
        Ok(settled)
    }

    /// One completion multi-op for `leases` and their `extras`, committed again without the
    /// task or the part that failed it, until it lands.
    async fn commit_completions(
        &self,
        mut leases: Vec<Lease>,
        mut extras: Vec<Extras>,
    ) -> Result<Vec<(String, Settled)>> {
        let mut settled = Vec::with_capacity(leases.len());
        let mut reread = std::collections::HashSet::new();
        let mut batches = self.settling_batches(&batch_names(&leases)).await?;
        let prefix = self.layout().lane_prefix(&crate::lane::Lane::NORMAL);
        let mut batch_tries = 0;
        let mut marker_tries = 0;
        let mut covered = self.no_children();
        while !leases.is_empty() {
            let paths: Vec<(String, String)> = leases
                .iter()
                .map(|l| {
                    let name = &l.task.name;
                    (self.layout().task(name), self.layout().lease(name))
                })
                .collect();
            let tallies = self.completion_tallies(members(&leases), &batches);
            let mut multi = completion(&leases, &paths, &extras, covered.as_ref());
            for (i, _, tally) in &tallies {
                tally.push(&mut multi, (*i, Part::Batch), &prefix);
            }
            // The slots' renames: tagged with their index among `shrinks`.
            let shares: Vec<SlotShare> = extras.iter().flat_map(|e| e.slots.clone()).collect();
            let mut shrinks = self.shrinks(&shares).await?;
            let (renames, freeing) = self.slot_frees(&shrinks);
            for (k, rename) in renames.iter().enumerate() {
                push_rename(&mut multi, (k, Part::Slot), rename);
            }
            // On an error the caller tries again or gives up; one that gives up frees the
            // slots (the pass does, when the completion does not happen).
            let committed = self.commit("complete", &multi).await;
            let failed = match committed? {
                Ok(results) => {
                    self.gate_cache.freed(&freeing);
                    shrinks.into_iter().for_each(Shrink::done);
                    for (i, _, tally) in tallies.iter().filter(|t| !t.2.callbacks.is_empty()) {
                        let mine = multi.results_of(&results, (*i, Part::Batch));
                        self.name_callback(tally, mine).await;
                    }
                    drop(multi);
                    if covered.is_none() {
                        self.see_to_children(extras.iter().map(|e| &e.marker)).await;
                    }
                    settled.extend(leases.drain(..).map(|l| (l.task.name, Settled::Done)));
                    break;
                }
                Err(failed) => failed,
            };
            let ((at, part), error) = (failed.tag, failed.error.clone());
            // A slot gone with the session that made it (one replaced while the handler ran):
            // its tasks hold nothing any more.
            if part == Part::Slot {
                if error != zk::Error::NoNode {
                    tracing::warn!(slot = %failed.path, %error, "slot left to its session's end");
                }
                shrinks.remove(at).gone();
            }
            // Nothing of the multi-op landed: the other slots keep their names.
            shrinks.into_iter().for_each(Shrink::unchanged);
            if part == Part::Slot {
                continue;
            }
            // Another settlement or publish changed the batch: counted again from a new read.
            if part == Part::Batch && batch_tries < BATCH_TRIES {
                batch_tries += 1;
                let name = tallies.iter().find(|t| t.0 == at).map(|t| t.1.clone());
                if let Some(name) = name {
                    self.reread_batch(&mut batches, &name, batch_tries).await?;
                    continue;
                }
            }
            if part == Part::Batch {
                return Err(failed.unexpected("complete (a batch that kept changing)"));
            }
            // A child registered since `dependents/` was seen without children: read again.
            if (at, part) == (COVERED, Part::Dependents) && marker_tries < MARKER_TRIES {
                marker_tries += 1;
                drop(multi);
                covered = self.no_children_now().await?;
                continue;
            }
            // A child registered (or its marker went) meanwhile: the marker read again.
            if part == Part::Dependents && marker_tries < MARKER_TRIES {
                marker_tries += 1;
                drop(multi);
                extras[at].marker.after_failure(self, &error).await?;
                continue;
            }
            let expected = match error {
                zk::Error::BadVersion | zk::Error::NoNode => true,
                zk::Error::NodeExists => matches!(part, Part::Key | Part::Done | Part::DoneId),
                _ => false,
            };
            if !expected {
                return Err(failed.unexpected("complete"));
            }
            let name = &leases[at].task.name;
            if self.leave_out(&mut extras[at], part, (name, &failed.path), &error) {
                continue;
            }
            let lease = &mut leases[at];
            let on_lease = part == Part::Lease;
            if on_lease
                && error == zk::Error::BadVersion
                && reread.insert(lease.task.name.clone())
                && self.still_ours(lease).await?
            {
                continue;
            }
            let outcome = if !on_lease && error == zk::Error::NoNode {
                Settled::Gone
            } else {
                Settled::LeaseLost
            };
            let lost = leases.remove(at);
            self.release_slots(&mut extras[at..=at]).await;
            extras.remove(at);
            match outcome {
                Settled::Gone => {
                    tracing::info!(task = %lost.task.name, "already gone: nothing to complete")
                }
                _ => {
                    tracing::warn!(task = %lost.task.name, fencing_token = lost.task.fencing_token, "lease lost before completing; nothing changed")
                }
            }
            settled.push((lost.task.name, outcome));
        }
        Ok(settled)
    }

    /// Frees the slots of completions that will not be committed (a lost lease), as a
    /// handler's end does when its task is not completed.
    async fn release_slots(&self, extras: &mut [Extras]) {
        let shares: Vec<SlotShare> = extras.iter_mut().flat_map(|e| e.slots.drain(..)).collect();
        self.free_slots(&shares).await;
    }

    /// What completing each of `leases` writes besides deleting task and lease: its key marked
    /// completed, its group's lock released, its completion record, its slots.
    async fn completion_extras(&self, leases: &[Lease]) -> Result<Vec<Extras>> {
        let tasks: Vec<&Task> = leases.iter().map(|l| &l.task).collect();
        let (dones, keys) =
            futures::future::try_join(self.done_writes(leases), self.completed_keys(&tasks))
                .await?;
        let extras = leases.iter().zip(dones).zip(keys);
        Ok(extras
            .map(|((lease, done), key)| Extras {
                marker: MarkerWrite::new(
                    self.layout(),
                    &lease.task.envelope.id,
                    &crate::task::after::Settled::Completed {
                        task: lease.task.name.clone(),
                    },
                ),
                key,
                // A grouped task's lock goes with it: the group's next task may run.
                lock: lease.group_lock.clone(),
                done,
                slots: lease.slots.clone(),
            })
            .collect())
    }

    /// Leaves out of a completion the `part` of one task that failed it, when the task can be
    /// completed without; `false` for its task or lease, which decide the task's outcome.
    fn leave_out(
        &self,
        extras: &mut Extras,
        part: Part,
        (name, _): (&str, &str),
        error: &zk::Error,
    ) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match part {
            // Answered before (see `commit_completions`).
            Part::Slot => {}
            // A key named meanwhile by its publisher is still ours: at its new version. One
            // gone, taken by another task, or already filed: complete the task without it.
            // Its expiry bucket may have been swept: make sure of it next time.
            Part::Key => {
                extras.key = extras.key.take().and_then(|mut k| {
                    k.key = k.key.after_failure(error)?;
                    Some(k)
                });
                if extras.key.is_none() {
                    self.key_bucket.store(i64::MIN, Relaxed);
                }
            }
            // The lock changed hands (an operator resumed the group): not ours to delete.
            Part::Lock => extras.lock = None,
            // An earlier task with this id left its record within the window (a redriven
            // task, a producer's own id): that entry stays, this record goes in by name.
            Part::DoneId => {
                if let Some(done) = extras.done.as_mut() {
                    done.id_entry = None;
                }
            }
            // The record cannot be written: complete the task without it.
            Part::Done => {
                tracing::info!(task = %name, error = %error, "completed without a record");
                extras.done = None;
                self.done_bucket.store(i64::MIN, Relaxed);
            }
            _ => return false,
        }
        true
    }
}
