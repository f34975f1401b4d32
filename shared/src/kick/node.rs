//! The kick node, `ROOT/kick`: `{"at_ms": MS}`, when its kick was sent by ZooKeeper's clock.
//! While it stands, publishers do not kick; a kicked drain deletes it once it has drained.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::queue::Queue;

/// What a publisher found at the kick node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// It made the node: it kicks.
    Made,
    /// The node stood longer than the bound (its kick was lost) and it took it over: it kicks.
    TakenOver,
    /// The node stands, fresh, or another publisher took it over first: no kick.
    Standing,
}

/// The kick node's content.
#[derive(Serialize, Deserialize)]
struct KickNode {
    /// When the kick was sent, ms since the epoch by ZooKeeper's clock.
    at_ms: i64,
}

/// Whether a kick is due at `now_ms` (ZooKeeper's clock): the node is made, or taken over
/// when older than `stale_after`. A node whose content cannot be read counts as lost.
///
/// # Notable errors
/// - [`Error::Zk`] when ZooKeeper does not answer.
pub(super) async fn due(queue: &Queue, now_ms: i64, stale_after: Duration) -> Result<Due> {
    let path = queue.layout().kick();
    let data = serde_json::to_vec(&KickNode { at_ms: now_ms })?;
    let options = queue.created(zk::CreateMode::Persistent);
    // A node deleted by a run between the create and the read is made again: twice at most.
    for _ in 0..2 {
        match queue.client().create(&path, &data, &options).await {
            Ok(_) => return Ok(Due::Made),
            Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(Error::zk("create", &path, e)),
        }
        let (old, stat) = match queue.client().get_data(&path).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(Error::zk("get", &path, e)),
        };
        let at_ms = serde_json::from_slice::<KickNode>(&old).map_or(i64::MIN, |k| k.at_ms);
        if !lost(at_ms, now_ms, stale_after) {
            return Ok(Due::Standing);
        }
        return match queue
            .client()
            .set_data(&path, &data, Some(stat.version))
            .await
        {
            Ok(_) => Ok(Due::TakenOver),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(Due::Standing),
            Err(e) => Err(Error::zk("set", &path, e)),
        };
    }
    Ok(Due::Standing)
}

/// Whether a kick sent at `at_ms` is taken as lost at `now_ms`.
fn lost(at_ms: i64, now_ms: i64, stale_after: Duration) -> bool {
    now_ms.saturating_sub(at_ms) >= stale_after.as_millis() as i64
}

/// Deletes the kick node, as a kicked drain does once it has drained (and then runs once
/// more, for the tasks that landed while the node stood): a publish after this kicks again. A node already gone is fine.
///
/// # Notable errors
/// - [`Error::Zk`] when ZooKeeper does not answer.
pub async fn clear(queue: &Queue) -> Result<()> {
    let path = queue.layout().kick();
    match queue.client().delete(&path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(Error::zk("delete", &path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kick_is_lost_once_it_is_as_old_as_the_bound() {
        let bound = Duration::from_secs(30);
        assert!(!lost(1_000, 1_000, bound));
        assert!(!lost(1_000, 30_999, bound));
        assert!(lost(1_000, 31_000, bound));
        assert!(lost(i64::MIN, 0, bound));
        // A node stamped ahead of this reading (another server's clock) is fresh.
        assert!(!lost(5_000, 1_000, bound));
    }
}
