//! What a publish calls once its tasks landed: a hook the queue holds without knowing what is
//! behind it (kicks, [`crate::kick`], attach one).

use futures::future::BoxFuture;

use super::Queue;

/// Called by every publish of the library (`Queue::publish*`) after its tasks landed, on the
/// queue that published them. It must never fail the publish: it handles what goes wrong.
pub trait AfterPublish: Send + Sync + std::fmt::Debug {
    /// The tasks of a publish on `queue` landed.
    fn landed<'a>(&'a self, queue: &'a Queue) -> BoxFuture<'a, ()>;
}
