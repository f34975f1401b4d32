//! Idempotency keys at a keyed task's end and in the reaper's upkeep (the keyed publish, which
//! takes the key, is still the core's `queue/idempotency_keys.rs`).
//!
//! # How it works
//!
//! A key (`keys/<key>`) is a task's own while its data names the task's envelope id and has no
//! `completed_at`: once the task died, another task may have taken the key. Through the core's
//! hooks ([`Keys`]):
//!
//! - at the end of completed tasks ([`mod@end`]), each keyed task's own key is marked completed
//!   (its data rewritten with `completed_at`, at the version read) and filed for expiry as
//!   `keys-expiry/<bucket>/<key>`, both in the completion's own multi-op. `<bucket>` is the
//!   start of the 10 minutes in which the key's window (`DEDUP_WINDOW_MS`) ends, made once
//!   per bucket and queue before the multi-op. The keys of a completion's tasks are read in one
//!   multi-read, and not at all when no task carries one;
//! - at the end of dead tasks, the task's own key is deleted at the version read, so the key
//!   may be published again;
//! - when one of those writes fails the multi-op: a key read before its publisher wrote the
//!   task's name into it (version 0) is the task's at version 1, the one write that changes a
//!   key its task holds, so the write is sent again at 1. A key that went or changed hands
//!   otherwise is left alone with its entry. An entry the bucket already has (an earlier task
//!   with the key, completed in the same ten minutes, was filed there) is left out and the
//!   key marked all the same: the sweep finds it by that entry;
//! - in the reaper's upkeep ([`sweep`]), the buckets due by ZooKeeper's time are looked at
//!   from their start on, at most [`PER_SWEEP`] entries a run: a key past its window (by this
//!   machine's clock, against the `completed_at` that the completing machine wrote) is deleted
//!   at the version read with its entry; an entry whose key went or was taken again goes
//!   alone; a bucket left empty goes.
//!
//! A publish that meets a completed key past its window deletes it and publishes, so a
//! publish never waits for the sweep.
//!
//! # Costs
//!
//! Nothing for a task without a key: the hooks look at the envelopes and return. A completion
//! with keyed tasks reads their keys once and adds two operations per keyed task; a keyed
//! burial reads its key and adds one delete. A 000-design consumer knows nothing of keys: a
//! keyed task it completes leaves its key pending, which stops publishes of that key until
//! someone deletes it.

pub mod end;
pub mod sweep;

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::Result;
use crate::feature::{AfterFailure, End, EndWrite, Feature, Leaving, Site, Upkeep};

pub use sweep::PER_SWEEP;

/// The feature: keys marked or freed at their task's end, and swept past their window.
pub struct Keys {
    /// `DEDUP_WINDOW_MS`: how long a completed key keeps refusing a publish.
    window: Duration,
    /// The expiry bucket this queue last made sure of: a create that finds its node is a
    /// logged write all the same, so a bucket is made once.
    made: AtomicI64,
}

impl Keys {
    /// Keys that refuse a publish for `window` after their task completed.
    pub fn new(window: Duration) -> Self {
        Keys {
            window,
            made: AtomicI64::new(i64::MIN),
        }
    }
}

impl Feature for Keys {
    fn name(&self) -> &'static str {
        "idempotency_keys"
    }

    fn envelope_fields(&self) -> &'static [&'static str] {
        &["idempotency_key"]
    }

    fn at_end<'a>(
        &'a self,
        site: &'a Site<'a>,
        leaving: &'a [Leaving<'a>],
        how: End,
    ) -> BoxFuture<'a, Result<Vec<(usize, EndWrite)>>> {
        Box::pin(async move {
            match how {
                End::Completed => end::completed(self, site, leaving).await,
                End::Dead => end::dead(site, leaving).await,
            }
        })
    }

    fn after_failure(&self, write: &EndWrite, error: &zk::Error) -> AfterFailure {
        use zk::Error::{BadVersion, NoNode, NodeExists};
        match (write, error) {
            (
                EndWrite::Set {
                    version: Some(0), ..
                }
                | EndWrite::Delete {
                    version: Some(0), ..
                },
                BadVersion,
            ) => AfterFailure::Replace(end::at_version_one(write)),
            (EndWrite::Set { .. } | EndWrite::Delete { .. }, BadVersion | NoNode) => {
                AfterFailure::LeaveOutAll
            }
            (EndWrite::Create { .. }, NodeExists) => AfterFailure::LeaveOut,
            // The bucket was swept away since it was made (a window shorter than a bucket
            // makes a bucket due at once): the key is marked but not filed, and the next
            // completion makes the bucket again. A publish after the window deletes the key.
            (EndWrite::Create { .. }, NoNode) => {
                self.made.store(i64::MIN, Relaxed);
                AfterFailure::LeaveOut
            }
            _ => AfterFailure::Unexpected,
        }
    }

    fn sweep<'a>(&'a self, upkeep: &'a Upkeep) -> BoxFuture<'a, Result<u32>> {
        Box::pin(async move { Ok(sweep::expired(upkeep, self.window, PER_SWEEP).await? as u32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(version: i32) -> EndWrite {
        EndWrite::Set {
            path: "/q/keys/k".into(),
            data: b"{}".to_vec(),
            version: Some(version),
        }
    }

    fn entry() -> EndWrite {
        EndWrite::Create {
            path: "/q/keys-expiry/0000000000000/k".into(),
            data: Vec::new(),
        }
    }

    #[test]
    fn a_key_read_before_its_task_was_named_is_written_again_at_version_one() {
        let keys = Keys::new(Duration::from_secs(60));
        let answer = keys.after_failure(&set(0), &zk::Error::BadVersion);
        assert_eq!(answer, AfterFailure::Replace(set(1)));
        let delete = EndWrite::Delete {
            path: "/q/keys/k".into(),
            version: Some(0),
        };
        let AfterFailure::Replace(again) = keys.after_failure(&delete, &zk::Error::BadVersion)
        else {
            panic!("sent again");
        };
        assert_eq!(
            again,
            EndWrite::Delete {
                path: "/q/keys/k".into(),
                version: Some(1)
            }
        );
    }

    #[test]
    fn a_key_that_changed_hands_is_left_with_its_entry_and_an_entry_filed_already_alone() {
        let keys = Keys::new(Duration::from_secs(60));
        for error in [zk::Error::BadVersion, zk::Error::NoNode] {
            assert_eq!(
                keys.after_failure(&set(1), &error),
                AfterFailure::LeaveOutAll
            );
        }
        let answer = keys.after_failure(&entry(), &zk::Error::NodeExists);
        assert_eq!(answer, AfterFailure::LeaveOut);
        let mut writes = vec![(3, set(1)), (3, entry()), (5, entry())];
        assert!(AfterFailure::LeaveOutAll.apply(&mut writes, 0));
        assert_eq!(writes, [(5, entry())], "the other feature's write stays");
        let mut writes = vec![(3, set(1)), (3, entry())];
        assert!(AfterFailure::LeaveOut.apply(&mut writes, 1));
        assert_eq!(writes, [(3, set(1))], "the key is marked all the same");
        assert!(!AfterFailure::Unexpected.apply(&mut writes, 0));
    }

    #[test]
    fn a_bucket_swept_away_is_made_again_by_the_next_completion() {
        let keys = Keys::new(Duration::from_secs(60));
        keys.made.store(600_000, Relaxed);
        let answer = keys.after_failure(&entry(), &zk::Error::NoNode);
        assert_eq!(answer, AfterFailure::LeaveOut);
        assert_eq!(keys.made.load(Relaxed), i64::MIN);
    }
}
