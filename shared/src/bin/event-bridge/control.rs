//! Steering the queue: `pause` and `resume`.

use event_bridge::Queue;
use event_bridge::queue::PauseTarget;
use serde_json::json;

use crate::Failure;
use crate::show::print_json;

/// Pauses (`on`) or resumes the queue, or one event type; prints what changed and the state.
pub(crate) async fn pause(
    queue: &Queue,
    event_type: Option<String>,
    on: bool,
) -> Result<(), Failure> {
    let target = match event_type {
        Some(t) => PauseTarget::Type(t),
        None => PauseTarget::Queue,
    };
    let changed = if on {
        queue.pause(&target).await?
    } else {
        queue.resume(&target).await?
    };
    let what = match &target {
        PauseTarget::Queue => json!("queue"),
        PauseTarget::Type(t) => json!({ "type": t }),
    };
    let verb = if on { "paused" } else { "resumed" };
    print_json(&json!({ verb: what, "changed": changed, "state": queue.paused().await? }))
}
