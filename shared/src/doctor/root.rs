//! The root: the connection string's chroot exists, `EVENT_BRIDGE_ROOT` exists under it, and
//! holds a queue (`tasks/`).
//!
//! A wrong root is quiet otherwise: consumers create the base paths they miss, so a typo in
//! `EVENT_BRIDGE_ROOT` makes a second, empty queue that nobody publishes to.

use zookeeper_client as zk;

use super::Check;
use crate::config::Config;
use crate::queue::Queue;

/// Fails when the chroot or the root is missing; warns when the root holds no queue.
pub(super) async fn check(queue: &Queue, config: &Config) -> Check {
    let root = queue.layout().root().to_string();
    if let Some(chroot) = crate::session::chroot(&config.zookeeper) {
        match exists(queue, "/").await {
            Ok(true) => {}
            Ok(false) => {
                let detail =
                    format!("the chroot {chroot} of ZOOKEEPER_CONNECTION_STRING does not exist");
                let fix = format!(
                    "create {chroot} on ZooKeeper, or take it out of ZOOKEEPER_CONNECTION_STRING"
                );
                return Check::fail("root", detail, fix);
            }
            Err(e) => return unanswered(&e),
        }
    }
    let tasks = queue.layout().tasks();
    match (exists(queue, &root).await, exists(queue, &tasks).await) {
        (Ok(true), Ok(true)) => Check::pass("root", format!("{root} exists and holds a queue")),
        (Ok(true), Ok(false)) => Check::warn(
            "root",
            format!("{root} exists but holds no queue (no {tasks})"),
            format!(
                "set EVENT_BRIDGE_ROOT to the queue's root, or run `event-bridge init` to make \
                 one at {root}"
            ),
        ),
        (Ok(false), _) => Check::fail(
            "root",
            format!("{root} does not exist under {}", config.zookeeper),
            format!(
                "set EVENT_BRIDGE_ROOT to the root producers publish under, or run \
                 `event-bridge init` to make a new queue at {root}"
            ),
        ),
        (Err(e), _) | (_, Err(e)) => unanswered(&e),
    }
}

/// Whether `path` exists (a stat needs no permission).
async fn exists(queue: &Queue, path: &str) -> Result<bool, zk::Error> {
    queue
        .client()
        .check_stat(path)
        .await
        .map(|stat| stat.is_some())
}

fn unanswered(e: &zk::Error) -> Check {
    let fix = "check the zookeeper lines above, then run `event-bridge doctor` again";
    Check::fail("root", format!("ZooKeeper did not answer a stat: {e}"), fix)
}
