//! Debounced publishing. A publish with a debounce key writes its envelope to `debounce/<key>`:
//! created when the key has nothing pending, else rewritten at the version read (the last
//! publish wins, and ZooKeeper's `mtime` moves with it). The task is due a period after the
//! last write (`mtime`) and no later than the maximum wait after the first (`ctime`), both by
//! ZooKeeper's clock. Runs fire what is due, as they promote waiting tasks: one multi-op
//! deletes the pending node at the version read and creates the task at the tail of its lane,
//! so a publish that lands in between (which rewrites the node) makes the firing fail, and the
//! key goes on waiting with the new payload. Once fired, the next publish starts a new one.
//!
//! A pending publish is found by its envelope id by reading every pending key (ids have no
//! index; keys pending are as many as keys published within their period, which every run
//! lists anyway), and withdrawn (`cancel`) by deleting its node at the version read.

use zookeeper_client as zk;

use super::Queue;
use crate::error::{Error, Result};
use crate::task::{Debounce, Envelope};

/// Tries of a debounced publish that lost a race with another publish or a firing.
const TRIES: usize = 5;

/// Debounce keys a run looks at, at most.
pub const FIRE_PER_RUN: usize = 256;

/// Pending publishes read in one request when looking for an id.
const FIND_PAGE: usize = 32;

/// What a debounced publish did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Debounced {
    /// Nothing was pending for the key: this envelope waits now.
    Started,
    /// It replaced the pending envelope with this id.
    Replaced { previous: String },
}

/// A debounced publish pending under its key, as read.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingDebounced {
    pub envelope: Envelope,
    /// What it asked for: its key, period and maximum wait.
    pub debounce: Debounce,
    /// When its key's first pending publish was written (ZooKeeper ms; the node's `ctime`).
    pub first_ms: i64,
    /// When this publish was written (ZooKeeper ms; the node's `mtime`).
    pub last_ms: i64,
}

impl PendingDebounced {
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

impl Queue {
    /// Publishes `envelope` debounced by `debounce`: it waits under `debounce/<key>`, replacing
    /// what is pending there.
    pub async fn publish_debounced(
        &self,
        envelope: &Envelope,
        debounce: &Debounce,
    ) -> Result<Debounced> {
        let path = self.layout().debounced(&debounce.key);
        let body = envelope.to_bytes()?;
        for _ in 0..TRIES {
            let written = match self.client().get_data(&path).await {
                Ok((data, stat)) => {
                    let set = self
                        .client()
                        .set_data(&path, &body, Some(stat.version))
                        .await;
                    set.map(|_| Debounced::Replaced {
                        previous: pending_id(&data),
                    })
                }
                Err(zk::Error::NoNode) => {
                    let created = self.client().create(&path, &body, &self.persistent()).await;
                    created.map(|_| Debounced::Started)
                }
                Err(e) => return Err(Error::zk("get", path, e)),
            };
            match written {
                Ok(done) => return Ok(done),
                // Another publish or a firing got in first: look again.
                Err(zk::Error::BadVersion | zk::Error::NodeExists) => {}
                Err(zk::Error::NoNode) => self.ensure_parent(&self.layout().debounce()).await?,
                Err(e) => return Err(Error::zk("publish", path, e)),
            }
        }
        Err(Error::Unreadable {
            path,
            problem: "the debounce key kept changing while it was published; try again".into(),
        })
    }

    /// Fires the debounced tasks due by `now_ms` (ZooKeeper time), at most [`FIRE_PER_RUN`]
    /// looked at; returns how many went to their lanes.
    pub async fn fire_debounced(&self, now_ms: i64) -> Result<usize> {
        let parent = self.layout().debounce();
        let names = match self.client().list_children(&parent).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::zk("list", parent, e)),
        };
        let paths: Vec<String> = (names.iter().take(FIRE_PER_RUN))
            .map(|name| format!("{parent}/{name}"))
            .collect();
        let mut fired = 0;
        for (path, read) in paths.iter().zip(self.read_paths(&paths).await?) {
            let Some((body, stat)) = read else {
                continue;
            };
            if due_ms(&body, &stat).is_some_and(|due| due <= now_ms) {
                fired += self.fire_one(path, &body, stat.version).await? as usize;
            }
        }
        Ok(fired)
    }

    /// The pending debounced publish whose envelope id is `id`, if any: `debounce/` listed,
    /// then read `FIND_PAGE` keys to a request.
    pub async fn find_debounced(&self, id: &str) -> Result<Option<PendingDebounced>> {
        let parent = self.layout().debounce();
        let names = match self.client().list_children(&parent).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(Error::zk("list", parent, e)),
        };
        for page in names.chunks(FIND_PAGE) {
            let paths: Vec<String> = page.iter().map(|n| format!("{parent}/{n}")).collect();
            for (body, stat) in self.read_paths(&paths).await?.into_iter().flatten() {
                match pending(&body, &stat) {
                    Some(found) if found.envelope.id == id => return Ok(Some(found)),
                    _ => {}
                }
            }
        }
        Ok(None)
    }

    /// Withdraws the publish with envelope id `id` pending under debounce key `key`: deletes
    /// its node at the version read, so it never fires. `false` when the key holds another
    /// publish (a later one replaced it) or none.
    ///
    /// # Notable behaviors
    /// A publish or a firing between the read and the delete fails the delete (`BadVersion`,
    /// `NoNode`): `false`, and nothing is deleted.
    pub async fn withdraw_debounced(&self, key: &str, id: &str) -> Result<bool> {
        let path = self.layout().debounced(key);
        let Some((body, stat)) = self.read_path(&path).await? else {
            return Ok(false);
        };
        if pending_id(&body) != id {
            return Ok(false);
        }
        match self.client().delete(&path, Some(stat.version)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }

    /// Debounced tasks pending (the children of `debounce/`).
    pub async fn count_debounced(&self) -> Result<usize> {
        self.count(&self.layout().debounce()).await
    }

    /// Moves the pending envelope at `path` (read at `version`) to the tail of its lane;
    /// `false` when a publish or another firing got in first.
    async fn fire_one(&self, path: &str, body: &[u8], version: i32) -> Result<bool> {
        let fired = self
            .to_lane_tail("fire debounced", path, version, body)
            .await?;
        if let Some(task) = &fired {
            tracing::debug!(%task, debounced = %path, "debounced task due");
        }
        Ok(fired.is_some())
    }
}

/// When the pending envelope `body` (its node's `stat`) is due; `None` for a body that is not
/// a debounced envelope (never fired: `event-bridge` shows it, an operator deletes it).
fn due_ms(body: &[u8], stat: &zk::Stat) -> Option<i64> {
    pending(body, stat).map(|p| p.due_ms())
}

/// The pending publish `body` (its node's `stat`); `None` for a body that is not a debounced
/// envelope.
fn pending(body: &[u8], stat: &zk::Stat) -> Option<PendingDebounced> {
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    Some(PendingDebounced {
        debounce: envelope.debounce.clone()?,
        envelope,
        first_ms: stat.ctime,
        last_ms: stat.mtime,
    })
}

/// The id of the pending envelope `data` (empty when unreadable).
pub(super) fn pending_id(data: &[u8]) -> String {
    serde_json::from_slice::<Envelope>(data)
        .map(|e| e.id)
        .unwrap_or_default()
}
