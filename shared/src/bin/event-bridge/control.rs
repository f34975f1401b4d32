//! Steering the queue: `cancel`, `end-parent`, `pause` and `resume`.

use event_bridge::cancel::Cancelled;
use event_bridge::features::pause::PauseTarget;
use event_bridge::queue::{GoneEnd, TakenAs};
use event_bridge::{Config, Queue};
use serde_json::json;

use crate::Failure;
use crate::show::print_json;

/// Pauses (`on`) or unpauses (`event-bridge resume`) the queue, or one event type; prints what changed and the state.
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
        queue.pauses().pause(&target).await?
    } else {
        queue.pauses().unpause(&target).await?
    };
    let what = match &target {
        PauseTarget::Queue => json!("queue"),
        PauseTarget::Type(t) => json!({ "type": t }),
    };
    let verb = if on { "paused" } else { "resumed" };
    print_json(&json!({ verb: what, "changed": changed, "state": queue.pauses().paused().await? }))
}

/// Cancels one task and prints what that did; the exit code is 3 when there is no such task.
pub(crate) async fn cancel(config: &Config, queue: &Queue, task: &str) -> Result<i32, Failure> {
    let cancelled = event_bridge::cancel::cancel(queue, task).await?;
    print_json(&cancelled)?;
    if cancelled == Cancelled::NotFound {
        eprintln!("event-bridge: no task {task} under {}", config.root);
        return Ok(3);
    }
    Ok(0)
}

/// Takes the gone parent `parent` as ended `taken_as` and prints how many children went on;
/// exit 1 when it is not gone (saying where it is), 3 when no child waits for it.
pub(crate) async fn end_parent(
    config: &Config,
    queue: &Queue,
    parent: &str,
    taken_as: TakenAs,
) -> Result<i32, Failure> {
    match queue
        .dependencies()
        .end_gone_parent(parent, taken_as)
        .await?
    {
        GoneEnd::Ended { children } => {
            let ended = json!({ "parent": parent, "as": taken_as.name() });
            print_json(&json!({ "ended": ended, "children": children }))?;
            Ok(0)
        }
        GoneEnd::NoChildren => {
            eprintln!(
                "event-bridge: no task waits for parent {parent} under {}",
                config.root
            );
            Ok(3)
        }
        GoneEnd::NotGone(at) => {
            eprintln!(
                "event-bridge: parent {parent} is not gone ({at}): its children go on when it \
                 ends; `cancel {parent}` ends it now"
            );
            Ok(1)
        }
    }
}

/// Sends signal `key` with `payload` (JSON), and prints where it went, as HTTP answers it.
pub(crate) async fn signal(queue: &Queue, key: &str, payload: &str) -> Result<(), Failure> {
    let payload: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| event_bridge::Error::Signal {
            key: key.to_string(),
            problem: format!("--payload is not JSON: {e}"),
        })?;
    let sent = queue.signals().signal(key, &payload).await?;
    print_json(&sent.answer(key))
}

/// Lets a group paused after one of its tasks went to the dead letters go on.
pub(crate) async fn unpause_group(queue: &Queue, group: &str) -> Result<(), Failure> {
    let changed = queue.groups().unpause_group(group).await?;
    print_json(&json!({ "resumed": { "group": group }, "changed": changed }))
}
