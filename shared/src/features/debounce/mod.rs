//! Debounced publishes falling due: the firing of keys whose period ended, beside a run and in
//! a worker's upkeep. (A debounced publish itself, which writes `debounce/<key>` and files the
//! key in the due index, is still the core's `queue/debounce.rs`.)
//!
//! # How it works
//!
//! ```text
//! debounce-due/<bucket>/<key>          bucket: the start of the 10 s in which the key falls due
//! debounce-due/0000000000000/<key>     the unfiled bucket: keys no run has filed yet
//! ```
//!
//! A key's due time follows from its node's `ctime` and `mtime`, which are ZooKeeper's clock,
//! so a publish cannot know which bucket it belongs in. The publish that starts a key puts its
//! entry in the unfiled bucket, in the multi-op that creates the key's node, and so does a
//! rewrite that may bring the due time forward (a shorter period or maximum wait). Any other
//! rewrite can only push the due time back, so the entry stays a lower bound.
//!
//! The firing ([`fire_due`]) lists the index's buckets (one name per 10 s that holds keys) and
//! opens only those whose time has come; the unfiled one always has. For each entry it reads
//! the entry's version and then the key: a due key is fired (moved to its lane's tail), a key
//! not due yet is filed in the bucket of its due time, and the entry of a key that went is
//! dropped. An entry is moved or dropped only at the version read. A publish that starts the
//! key again meanwhile (after a firing, or after a withdrawal) finds the entry still there, so
//! it re-dates it (sets it at its version) instead of making one; the firing's delete then fails
//! and the entry stays for the next look. A delete at any version would leave that key pending
//! without an entry, and it would never fire. A due key that holds a place in its group is left
//! to the place, which takes it at the group's turn; the firing wakes its lane's workers
//! instead. No key falls due before its bucket, so a firing costs what is due and what was
//! published since the last one, never what still waits.
//!
//! It joins the core as a run hook ([`FireDue`], which watches `debounce/`, [`WATCHED`]: a run's start read
//! looks whether a debounced publish is pending, and a run that found none never calls it), and
//! the worker's upkeep fires through [`fire_due`] on its own timer. At most [`FIRE_PER_RUN`]
//! tasks a firing, and [`LOOK_PER_RUN`] entries looked at.
//!
//! # Costs
//!
//! Nothing for a run while no debounced publish is pending: the start read, which it sends
//! anyway, looks at `debounce/`. Otherwise one listing of the index, one of each due bucket, a
//! multi-read per 128 entries, and a multi-op per move.

mod fire;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::queue::Queue;
use crate::run_hook::{Made, RunHook};

pub use fire::{FIRE_PER_RUN, LOOK_PER_RUN};

/// Fires the debounced tasks due by `now_ms` (ZooKeeper's time), at most [`FIRE_PER_RUN`],
/// and files the keys it looked at that are not due yet; how many it fired.
pub async fn fire_due(queue: &Queue, now_ms: i64) -> Result<usize> {
    fire::Firing(queue).fire_due_keys(now_ms).await
}

/// The run hook: due debounced tasks fired at a run's start, while `debounce/` has children.
pub struct FireDue;

/// The folder [`FireDue`] works on, which a run's start read looks at: the pending keys.
pub const WATCHED: &str = "debounce";

impl RunHook for FireDue {
    fn name(&self) -> &'static str {
        "debounce"
    }

    fn at_run_start<'a>(&'a self, queue: &'a Queue, now_ms: i64) -> BoxFuture<'a, Result<Made>> {
        Box::pin(async move {
            let fired = fire_due(queue, now_ms).await?;
            Ok(Made {
                moved: fired as u32,
                ..Made::default()
            })
        })
    }
}
