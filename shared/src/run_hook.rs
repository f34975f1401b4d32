//! What a feature does beside a run: the hooks that need the whole queue (to publish, to read
//! its own znodes), which [`crate::feature::Feature`]'s hooks, called from inside the queue,
//! cannot have.
//!
//! `process` calls each registered hook at a run's start, beside its promotion of due tasks;
//! the list is wired in at the crate's root (`run_hooks` in `lib.rs`, the one list in
//! `features/mod.rs`), so the run names no feature.

use futures::future::BoxFuture;

use crate::error::Result;
use crate::layout::Layout;
use crate::queue::Queue;

/// A feature's work beside a run.
pub trait RunHook: Send + Sync + 'static {
    /// Its name, in logs.
    fn name(&self) -> &'static str;

    /// At a run's start, at ZooKeeper's time `now_ms`: what it did. A failure is the hook's
    /// alone: the run logs it and goes on.
    fn at_run_start<'a>(&'a self, queue: &'a Queue, now_ms: i64) -> BoxFuture<'a, Result<Made>>;
}

/// A hook as registered ([`crate::features::RUN_HOOKS`]): the hook, and the folder under the
/// queue's root it works on (its name, such as `schedules`), which the run's start read looks
/// at in the same request: while that folder has no children the hook is not called, and a
/// run is idle. Called at every run when `None`. The folder is data, not a call, so that a
/// run on a queue without its work never enters the feature's code.
pub struct Registered {
    /// The hook.
    pub hook: &'static dyn RunHook,
    /// The folder it works on.
    pub watched: Option<&'static str>,
}

/// What a hook did at a run's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Made {
    /// Tasks it made and put in the lanes (new tasks, such as a schedule's).
    pub tasks: u32,
    /// Tasks it moved into the lanes from where they waited (such as debounced publishes
    /// fired), which a run counts as it counts due tasks moved back.
    pub moved: u32,
    /// Things it could not do (each logged by the hook), while it did the others.
    pub failed: u32,
}

/// The folders hooks watch ([`Registered::watched`], each hook's, in order) in `layout`: the
/// folders for the run's start read, and for each hook the index of its folder among them.
pub fn watched(names: &[Option<&str>], layout: &Layout) -> (Vec<String>, Vec<Option<usize>>) {
    let mut folders = Vec::new();
    let at = (names.iter())
        .map(|name| {
            folders.push(format!("{}/{}", layout.root(), (*name)?));
            Some(folders.len() - 1)
        })
        .collect();
    (folders, at)
}

/// Every hook's work at a run's start, one after the other, but those whose folder the start
/// read found empty (`has_children`, by the index [`watched`] gave): what they made together.
/// A hook that fails is logged and counted as nothing made.
pub async fn at_run_start(
    hooks: &[Registered],
    folder_of: &[Option<usize>],
    has_children: &[bool],
    queue: &Queue,
    now_ms: i64,
) -> Made {
    let mut made = Made::default();
    let called = hooks
        .iter()
        .zip(folder_of)
        .filter(|(_, folder)| match folder {
            Some(at) => has_children.get(*at).copied().unwrap_or(true),
            None => true,
        });
    for (Registered { hook, .. }, _) in called {
        match hook.at_run_start(queue, now_ms).await {
            Ok(one) => {
                made.tasks += one.tasks;
                made.moved += one.moved;
                made.failed += one.failed;
            }
            Err(e) => tracing::warn!(hook = hook.name(), error = %e, "not done in this run"),
        }
    }
    made
}
