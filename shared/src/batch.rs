//! Batches: tasks that join a named batch while it is open, and one callback task once it is
//! sealed and every member is settled (completed, or dead).
//!
//! A batch is one znode, `batches/<name>`, holding [`BatchState`]: counters, not a list of
//! members, so a batch of 10^5 members costs what one of ten does. Every change to it goes in
//! the multi-op that makes the change true: a member's publish raises `total` with the task's
//! create; a member's completion or burial raises `completed` or `dead` with the task's
//! removal; the write that leaves it sealed with nothing pending also creates its callback
//! task. So the callback can come neither early (a member still pending) nor twice (it is
//! created at the version that had none) nor never (the last settlement cannot commit without
//! it). The znode's JSON and the callbacks' are in [`crate::task::batch`].

pub use crate::task::batch::{
    BatchState, BatchStatus, MAX_BATCH_PAYLOAD_BYTES, MAX_DEAD_NAMES, check_batch_name,
};

use crate::error::Result;
use crate::queue::{Queue, batch_error, unknown_batch};

/// What opening a batch asks for.
#[derive(Clone, Debug, Default)]
pub struct Open {
    /// The event type of the callback task published once the batch is sealed and every member
    /// is settled; must not be empty.
    pub on_complete: String,
    /// The event type of a second callback published then only when no member went to the dead
    /// letters.
    pub on_success: Option<String>,
    /// The payload both callbacks carry, besides the batch's counters.
    pub payload: serde_json::Value,
}

/// Opens batch `name`; an error naming it when a batch of that name exists or an argument is
/// bad (nothing is written then).
pub async fn open(queue: &Queue, name: &str, open: Open) -> Result<BatchStatus> {
    check_batch_name(name).map_err(|problem| batch_error(name, problem))?;
    let types = [
        ("--on-complete", Some(&open.on_complete)),
        ("--on-success", open.on_success.as_ref()),
    ];
    for (field, event_type) in types {
        if event_type.is_some_and(|t| t.is_empty()) {
            return Err(batch_error(name, format!("{field} is an empty event type")));
        }
    }
    let payload = serde_json::to_vec(&open.payload)?.len();
    if payload > MAX_BATCH_PAYLOAD_BYTES {
        let problem = format!(
            "--payload is {payload} bytes of JSON, over the {MAX_BATCH_PAYLOAD_BYTES} a batch keeps"
        );
        return Err(batch_error(name, problem));
    }
    let now_ms = queue.server_time().await?.now_ms();
    let state = BatchState::open(
        name,
        open.on_complete,
        open.on_success,
        open.payload,
        now_ms,
    );
    queue.batches().open_batch(&state).await?;
    Ok(state.status())
}

/// Seals batch `name`: no member joins after. When nothing is pending, its callback is
/// published in the same write.
pub async fn seal(queue: &Queue, name: &str) -> Result<BatchStatus> {
    queue.batches().seal_batch(name).await
}

/// Batch `name` as it stands.
pub async fn status(queue: &Queue, name: &str) -> Result<BatchStatus> {
    match queue.batches().read_batch(name).await? {
        Some((state, _)) => Ok(state.status()),
        None => Err(unknown_batch(name)),
    }
}
