//! A debounced publish pending under its key (`debounce/<key>`), as read: its envelope, what
//! it asked for, and when it falls due.

use super::{Debounce, Envelope};

/// A debounced publish pending under its key, as read.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingDebounced {
    /// The publish's envelope, as the task it becomes would carry it.
    pub envelope: Envelope,
    /// What it asked for: its key, period and maximum wait.
    pub debounce: Debounce,
    /// When its key's first pending publish was written (ZooKeeper ms; the node's `ctime`).
    pub first_ms: i64,
    /// When this publish was written (ZooKeeper ms; the node's `mtime`).
    pub last_ms: i64,
}

impl PendingDebounced {
    /// The pending publish `body` (its node's `stat`); `None` for a body that is not a
    /// debounced envelope (never fired: `event-bridge` shows it, an operator deletes it).
    pub fn read(body: &[u8], stat: &zookeeper_client::Stat) -> Option<PendingDebounced> {
        let envelope: Envelope = serde_json::from_slice(body).ok()?;
        Some(PendingDebounced {
            debounce: envelope.debounce.clone()?,
            envelope,
            first_ms: stat.ctime,
            last_ms: stat.mtime,
        })
    }

    /// When it is due (ZooKeeper ms): a period after this publish, no later than the
    /// maximum wait after the first.
    pub fn due_ms(&self) -> i64 {
        self.debounce.due_ms(self.first_ms, self.last_ms)
    }

    /// When the maximum wait ends (ZooKeeper ms), when there is one.
    pub fn max_wait_until_ms(&self) -> Option<i64> {
        (self.debounce.max_ms).map(|max| self.first_ms.saturating_add(max as i64))
    }
}
