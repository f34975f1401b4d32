//! The worker's watches: a persistent watch on each lane (`tasks/`, `lanes/high`, `lanes/low`),
//! a recursive one over the key lanes (`lanes/keys`), and one on `paused`, whose events raise a
//! notification (kept as a permit when nobody waits, so none is missed). A change of a priority lane's own
//! data is a wake-up (a grouped task got ready for its place: see `queue::place`); under
//! `lanes/keys` a change of data wakes nobody: it is a key lane's head moving, which every
//! pass writes.
//!
//! zookeeper-client 0.11.2 does not send persistent watches again when it reconnects (its
//! `resend_watches` never leaves `SetWatches` for `SetWatches2`: the index it keeps is
//! `index.max(index)`), so after a link drop or a leader change the server would send nothing
//! more, and the worker would fall back to its idle timer. Every reconnect therefore adds the
//! watch anew, and raises a notification, since a change may have come while the link was down.

use std::sync::Arc;

use tokio::sync::Notify;
use zookeeper_client as zk;

/// Notifies `wake` on every change under `path` until the session ends, then once more.
pub(super) async fn keep_watching(
    client: zk::Client,
    path: String,
    mode: zk::AddWatchMode,
    mut watcher: zk::PersistentWatcher,
    wake: Arc<Notify>,
) {
    let mut state = client.state_watcher();
    loop {
        tokio::select! {
            event = watcher.changed() => {
                if event.session_state.is_terminated() {
                    break;
                }
                // A persistent watch reports its own node's data; a recursive one, the key
                // lanes' heads.
                let head_moved = mode == zk::AddWatchMode::PersistentRecursive
                    && event.event_type == zk::EventType::NodeDataChanged;
                if !head_moved {
                    wake.notify_one();
                }
            }
            now = state.changed() => {
                if now.is_terminated() {
                    break;
                }
                if now == zk::SessionState::SyncConnected {
                    // Added before the old one is dropped, so the server keeps the watch.
                    match client.watch(&path, mode).await {
                        Ok(fresh) => watcher = fresh,
                        Err(e) => tracing::warn!(%path, error = %e, "cannot watch again after a reconnect"),
                    }
                    wake.notify_one();
                }
            }
        }
    }
    // The session ended: wake the worker so it opens a new one.
    wake.notify_one();
}
