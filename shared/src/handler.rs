//! What runs a task.
//!
//! Rust users who build their own function binary on this crate implement [`Handler`]; the
//! functions we ship use a [`Builtin`] chosen by `EVENT_BRIDGE_HANDLER`.

use std::future::Future;

use crate::task::{OnDeadPolicy, Task};
use crate::task_result::TaskResult;

pub use crate::config::HandlerKind;
pub use crate::handler_error::HandlerError;

/// What a finished delivery came to, for the completion record (`KEEP_DONE`): the sink that
/// took the task and what it answered, where it says. A handler of one's own returns its
/// result here:
///
/// ```
/// # use event_bridge::{handler::Delivered, TaskResult};
/// let answer = serde_json::json!({"invoice": "F-1042"});
/// let delivered = Delivered::with_result(TaskResult::json(answer)?);
/// # Ok::<(), event_bridge::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delivered {
    /// `http`, `sqs`, `log`; absent for a handler of one's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// The HTTP status of the webhook's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What the handler answered: the record keeps it beside `delivered`, as `result` (or
    /// `result_omitted`), not inside it.
    #[serde(skip)]
    pub result: Option<TaskResult>,
}

impl Delivered {
    /// A delivery by a handler of one's own that answered `result`.
    pub fn with_result(result: TaskResult) -> Self {
        Delivered {
            result: Some(result),
            ..Delivered::default()
        }
    }
}

/// Runs one claimed task. The lease is extended while the returned future runs.
///
/// A handler is a plain value, so a test can call it on a [`Task`] of its own making, with
/// no queue:
///
/// ```
/// use event_bridge::{Envelope, Handler, HandlerError, Task};
/// use serde_json::json;
///
/// /// Makes a thumbnail of the width the task asks for.
/// struct Thumbnail;
///
/// impl Handler for Thumbnail {
///     async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
///         match task.envelope.payload["width"].as_u64() {
///             Some(width) if width > 0 => Ok(()),
///             // Never runs: to the dead letters now, not after every attempt failed.
///             _ => Err(HandlerError::Permanent("\"width\" must be a positive number".into())),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let task = Task {
///     name: "task-0000000007".into(),
///     envelope: Envelope::new("image.thumbnail", json!({"width": 0})),
///     fencing_token: 1,
///     progress: Default::default(),
///     steps: Default::default(),
/// };
/// assert!(matches!(Thumbnail.handle(&task).await, Err(HandlerError::Permanent(_))));
/// # }
/// ```
pub trait Handler: Send + Sync {
    /// Runs `task`. `Ok` completes it; an error says whether it is tried again later
    /// ([`HandlerError::Retryable`], [`HandlerError::RetryAfter`]), goes to the dead letters now
    /// ([`HandlerError::Permanent`]) or waits for its next step ([`HandlerError::Suspended`]).
    fn handle(&self, task: &Task) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// As [`Handler::handle`], and what the delivery came to, its result included (kept in
    /// the completion record when `KEEP_DONE` is set). By default: nothing more than that it
    /// succeeded. A handler that reports progress does so through `task.progress`.
    fn handle_delivered(
        &self,
        task: &Task,
    ) -> impl Future<Output = Result<Delivered, HandlerError>> + Send {
        let handled = self.handle(task);
        async move { handled.await.map(|()| Delivered::default()) }
    }

    /// What a group does when one of its tasks goes to the dead letters, by event type (a
    /// task's own `on_dead` comes first). By default every group goes on.
    fn on_dead_policy(&self) -> OnDeadPolicy {
        OnDeadPolicy::default()
    }

    /// The name of the route tasks of `event_type` go to, for metrics: by default `handler`.
    fn route_name(&self, _event_type: &str) -> String {
        "handler".into()
    }

    /// The limits of the routes tasks go to (`max_in_flight`, `rate`), by event type. By
    /// default none.
    fn limits(&self) -> crate::limit::RouteLimits {
        crate::limit::RouteLimits::default()
    }
}

/// A handler made of a closure over an owned [`Task`], for tests and small programs.
pub struct FnHandler<F>(pub F);

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(Task) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
{
    fn handle(&self, task: &Task) -> impl Future<Output = Result<(), HandlerError>> + Send {
        (self.0)(task.clone())
    }
}

/// The handlers the shipped functions can run.
#[derive(Clone, Copy, Debug)]
pub struct Builtin(pub HandlerKind);

impl Handler for Builtin {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        if self.0 == HandlerKind::Log {
            tracing::info!(
                task = %task.name,
                id = %task.envelope.id,
                event_type = %task.envelope.event_type,
                attempt = task.attempt(),
                fencing_token = task.fencing_token,
                traceparent = task.envelope.traceparent.as_deref(),
                payload = %task.envelope.payload,
                "task received"
            );
        }
        Ok(())
    }
}
