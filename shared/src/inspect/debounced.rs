//! A debounced publish pending under its key, as `status` shows it: not a task yet (it has no
//! name), so it is shown by its key and by when it becomes one.

use serde::Serialize;

use crate::clock::ZkTime;
use crate::queue::PendingDebounced;
use crate::task::Envelope;

/// A pending debounced publish, as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DebouncedInfo {
    /// Its debounce key: it waits under `debounce/<key>`.
    pub key: String,
    /// The envelope id of this publish.
    pub id: String,
    /// Its event type.
    pub event_type: String,
    /// When it is due (ZooKeeper ms since the epoch): a period after its publish, no later
    /// than the maximum wait after its key's first pending publish. The next run (or worker)
    /// after that makes it a task at the tail of its lane.
    pub due_at_ms: i64,
    /// Time until then, by ZooKeeper's clock (negative: due, not fired yet).
    pub due_in_ms: i64,
    /// When the maximum wait ends (ZooKeeper ms), if the publish set one: a later publish of
    /// its key pushes the due time back no further.
    pub max_wait_until_ms: Option<i64>,
    /// The envelope it becomes a task with.
    pub envelope: Envelope,
}

/// `pending` as `status` shows it at `now`.
pub(crate) fn info(pending: PendingDebounced, now: &ZkTime) -> DebouncedInfo {
    let due_at_ms = pending.due_ms();
    DebouncedInfo {
        key: pending.debounce.key.clone(),
        id: pending.envelope.id.clone(),
        event_type: pending.envelope.event_type.clone(),
        due_at_ms,
        due_in_ms: due_at_ms - now.now_ms(),
        max_wait_until_ms: pending.max_wait_until_ms(),
        envelope: pending.envelope,
    }
}
