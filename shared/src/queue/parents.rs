//! Publishing a task that runs after others (`after`): each parent is found by its task name
//! or envelope id, and the child is published according to what they are.
//!
//! - Every parent completed (or dead, for a child that runs anyway): the child goes to its
//!   lane at once, as any task.
//! - A parent dead, for a child that fails with it: the child goes straight to the dead
//!   letters (as `after-<id>`), with a reason that names the parent.
//! - Otherwise it waits under `after/<id>`, with the parents it waits for in `waiting_on`. One
//!   multi-op: for each unsettled parent, its znode checked where it is, its marker
//!   (`dependents/<parent id>`) created or checked at the version read, the child's entry
//!   created under it; and the child's node. A parent settled (or moved) since it was read
//!   fails it, and the parents are found again.
//!
//! A parent is found by name where that name can be (its lane, `delayed/`, the dead letters,
//! the completion records) and by id under `after/`, among the settled markers and the
//! completion records; an id of a pending task, or a name it had before a retry moved it,
//! costs a walk of the queue (as `status` by id does). A completed task is found only while
//! its completion record is kept (`KEEP_DONE`): without one it cannot be told from a task that
//! never was, and the publish is refused.

use zookeeper_client as zk;

use super::Queue;
use super::keys::Published;
use super::ops::{Multi, Op, Part};
use crate::error::{Error, Result};
use crate::layout::{self, Layout};
use crate::queue::{TaskRead, Walk, parse_waiting};
use crate::task::after::Settled as AfterSettled;
use crate::task::{self, Body, Envelope, OnParentDead};

/// Times the parents are found again when one settled or moved while the child registered.
const TRIES: usize = 8;

/// A parent as a child's publish finds it.
#[derive(Clone, Debug)]
enum Parent {
    /// Unsettled, at `path`; its marker's version when it has one (other children wait).
    Pending {
        id: String,
        path: String,
        marker: Option<i32>,
    },
    Settled {
        id: String,
        settled: AfterSettled,
    },
}

impl Parent {
    fn id(&self) -> &str {
        match self {
            Parent::Pending { id, .. } | Parent::Settled { id, .. } => id,
        }
    }
}

/// An error naming the parent `key` a publish could not wait for.
fn parent_error(key: &str, problem: impl Into<String>) -> Error {
    Error::Parent {
        parent: key.to_string(),
        problem: problem.into(),
    }
}

/// The envelope id of a task whose body is `body` (a plain body's is its name); an error for
/// a body no consumer can run.
fn id_in(key: &str, name: &str, body: &[u8]) -> Result<String> {
    match task::parse(body) {
        Body::Envelope(e) => Ok(e.id),
        Body::Plain(_) => Ok(name.to_string()),
        Body::Poison(problem) => Err(parent_error(
            key,
            format!("its body can never run ({problem}), so it can never complete"),
        )),
    }
}

/// Whether the task `name` with `body` is the one `key` names: by name, id or earlier name.
fn matches(key: &str, name: &str, body: &[u8]) -> bool {
    name == key
        || match task::parse(body) {
            Body::Envelope(e) => e.id == key || e.moved_from.iter().any(|m| m == key),
            _ => false,
        }
}

impl Queue {
    /// Publishes `envelope`, whose `after` names its parents (see the module documentation).
    pub(super) async fn publish_child(&self, envelope: &Envelope) -> Result<Published> {
        let mut keys = envelope.after.clone();
        keys.dedup();
        for _ in 0..TRIES {
            let mut parents = Vec::with_capacity(keys.len());
            for key in &keys {
                let found = self.find_parent(key).await?;
                parents.push(found.ok_or_else(|| {
                    parent_error(
                        key,
                        "no such task: not pending, not dead, and no completion record \
                         (a completed task is found only while KEEP_DONE keeps its record)",
                    )
                })?);
            }
            let mut child = envelope.clone();
            child.after = parents.iter().map(|p| p.id().to_string()).collect();
            child.after.dedup();
            if let Some(published) = self.publish_settled(&mut child, &parents).await? {
                return Ok(published);
            }
            if let Some(published) = self.register(&child, &parents).await? {
                return Ok(published);
            }
        }
        Err(parent_error(
            &keys.join(","),
            "the parents kept changing while the task was published; try again",
        ))
    }

    /// Publishes `child` when no parent keeps it waiting: to its lane, or (a parent dead and
    /// the child failing with it) to the dead letters. `None` when it has to wait.
    async fn publish_settled(
        &self,
        child: &mut Envelope,
        parents: &[Parent],
    ) -> Result<Option<Published>> {
        let fails = child.on_parent_dead.unwrap_or_default() == OnParentDead::Fail;
        let dead = parents.iter().find_map(|p| match p {
            Parent::Settled { id, settled } if fails => settled.child_reason(id),
            _ => None,
        });
        if let Some(reason) = dead {
            let name = Layout::blocked_name(&child.id);
            let body = serde_json::to_vec(&child)?;
            let (json, record) = self.dead_record(&name, &body, &reason, 0, None);
            let path = self.layout().dead_letter(&name);
            match self
                .client()
                .create(&path, &record, &self.persistent())
                .await
            {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    return Err(Error::Unpublishable {
                        item: 1,
                        problem: format!("a task with id {} is among the dead letters", child.id),
                    });
                }
                Err(e) => return Err(Error::zk("create", path, e)),
            }
            self.forward_dead(&name, &json).await;
            return Ok(Some(Published::Buried {
                id: child.id.clone(),
                dead_letter: name,
                reason,
            }));
        }
        if parents.iter().any(|p| matches!(p, Parent::Pending { .. })) {
            return Ok(None);
        }
        let task = self.publish_in(child.priority, &child.to_bytes()?).await?;
        Ok(Some(Published::Created {
            id: child.id.clone(),
            task,
        }))
    }

    /// Registers `child` with its unsettled `parents` and leaves it waiting under `after/`, in
    /// one multi-op; `None` when a parent settled or moved meanwhile.
    async fn register(&self, child: &Envelope, parents: &[Parent]) -> Result<Option<Published>> {
        let pending: Vec<(&str, &str, Option<i32>)> = (parents.iter())
            .filter_map(|p| match p {
                Parent::Pending { id, path, marker } => Some((id.as_str(), path.as_str(), *marker)),
                Parent::Settled { .. } => None,
            })
            .collect();
        let mut child = child.clone();
        child.waiting_on = pending.iter().map(|(id, ..)| id.to_string()).collect();
        child.waiting_on.dedup();
        let body = child.to_bytes()?;
        let markers: Vec<(String, String)> = (pending.iter())
            .map(|(id, ..)| {
                let layout = self.layout();
                (layout.dependents_of(id), layout.dependent(id, &child.id))
            })
            .collect();
        let blocked = self.layout().blocked(&child.id);
        let mut multi = Multi::new();
        for ((_, path, marker), (marker_path, entry)) in pending.iter().zip(&markers) {
            multi.push(Part::Parent, Op::Check(path, -1));
            match marker {
                Some(version) => multi.push(Part::Parent, Op::Check(marker_path, *version)),
                None => multi.push(Part::Parent, Op::Create(marker_path, b"")),
            };
            multi.push(Part::Parent, Op::Create(entry, b""));
        }
        multi.push(Part::Blocked, Op::Create(&blocked, &body));
        let failed = match self.commit("publish after", &multi).await? {
            Ok(_) => {
                return Ok(Some(Published::Blocked {
                    id: child.id.clone(),
                    waiting_on: child.waiting_on,
                }));
            }
            Err(failed) => failed,
        };
        match (failed.tag, &failed.error) {
            (Part::Blocked, zk::Error::NodeExists) => Err(Error::Unpublishable {
                item: 1,
                problem: format!("a task with id {} already waits for its parents", child.id),
            }),
            (Part::Blocked, zk::Error::NoNode) => {
                self.ensure_parent(&self.layout().after()).await?;
                Ok(None)
            }
            (Part::Parent, zk::Error::NoNode | zk::Error::BadVersion | zk::Error::NodeExists) => {
                Ok(None)
            }
            _ => Err(failed.unexpected("publish after")),
        }
    }

    /// The parent `key` (a task name or an envelope id) names, if there is one.
    async fn find_parent(&self, key: &str) -> Result<Option<Parent>> {
        if self.find_debounced(key).await?.is_some() {
            return Err(parent_error(
                key,
                "a debounced publish is not a task until its period ends",
            ));
        }
        let by_name = match layout::sequence(key) {
            Some(_) => self.parent_by_name(key).await?,
            None => None,
        };
        let found = match by_name {
            Some(found) => Some(found),
            None => self.parent_by_id(key).await?,
        };
        let Some(Parent::Pending { id, path, .. }) = found else {
            return Ok(found);
        };
        // Its marker: settled means an earlier task of the same id; it is the settlement.
        let marker = self.read_path(&self.layout().dependents_of(&id)).await?;
        if let Some(settled) = marker.as_ref().and_then(|(d, _)| AfterSettled::parse(d)) {
            return Ok(Some(Parent::Settled { id, settled }));
        }
        Ok(Some(Parent::Pending {
            id,
            path,
            marker: marker.map(|(_, stat)| stat.version),
        }))
    }

    /// The parent named `name`, found under that very name.
    async fn parent_by_name(&self, name: &str) -> Result<Option<Parent>> {
        let path = self.layout().task(name);
        if let Some((body, _)) = self.read_path(&path).await? {
            let id = id_in(name, name, &body)?;
            return Ok(Some(Parent::Pending {
                id,
                path,
                marker: None,
            }));
        }
        if let Some(found) = self.delayed_parent(name, &|n, _| n == name).await? {
            return Ok(Some(found));
        }
        if let Some((data, _)) = self.read_path(&self.layout().dead_letter(name)).await? {
            return Ok(Some(dead_parent(name, &data)));
        }
        Ok(self.find_done(name).await?.map(|record| Parent::Settled {
            id: record.id,
            settled: AfterSettled::Completed { task: record.task },
        }))
    }

    /// The parent `key` names by id (or by a name it had), wherever it is.
    async fn parent_by_id(&self, key: &str) -> Result<Option<Parent>> {
        let blocked = self.layout().blocked(key);
        if self.read_path(&blocked).await?.is_some() {
            return Ok(Some(Parent::Pending {
                id: key.to_string(),
                path: blocked,
                marker: None,
            }));
        }
        let marker = self.read_path(&self.layout().dependents_of(key)).await?;
        if let Some(settled) = marker.and_then(|(d, _)| AfterSettled::parse(&d)) {
            return Ok(Some(Parent::Settled {
                id: key.to_string(),
                settled,
            }));
        }
        if let Some(record) = self.find_done(key).await? {
            return Ok(Some(Parent::Settled {
                id: record.id,
                settled: AfterSettled::Completed { task: record.task },
            }));
        }
        let wanted = |name: &str, body: &[u8]| matches(key, name, body);
        let mut walk = Walk::new();
        while let Some(window) = walk.next_window(self).await? {
            for probed in &window {
                if let TaskRead::Found { body, .. } = &probed.read
                    && wanted(&probed.name, body)
                {
                    return Ok(Some(Parent::Pending {
                        id: id_in(key, &probed.name, body)?,
                        path: self.layout().task(&probed.name),
                        marker: None,
                    }));
                }
            }
        }
        if let Some(found) = self.delayed_parent(key, &wanted).await? {
            return Ok(Some(found));
        }
        self.dead_parent_by_id(key).await
    }

    /// The waiting task under `delayed/` that `wanted` picks (by its name and body).
    async fn delayed_parent(
        &self,
        key: &str,
        wanted: &(dyn Fn(&str, &[u8]) -> bool + Sync),
    ) -> Result<Option<Parent>> {
        for bucket in self.buckets().await? {
            for (_, node) in self.waiting_in(bucket).await? {
                let path = format!("{}/{node}", self.layout().delay_bucket(bucket));
                let Some((body, _)) = self.read_path(&path).await? else {
                    continue;
                };
                let name = parse_waiting(&node).map_or(node.as_str(), |(_, name)| name);
                if wanted(name, &body) {
                    let id = id_in(key, name, &body)?;
                    return Ok(Some(Parent::Pending {
                        id,
                        path,
                        marker: None,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// The dead letter whose task has id (or had name) `key`, read a page at a time.
    async fn dead_parent_by_id(&self, key: &str) -> Result<Option<Parent>> {
        let root = self.layout().dead();
        let names = match self.client().list_children(&root).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(Error::zk("list", root, e)),
        };
        for page in names.chunks(32) {
            let paths: Vec<String> = page.iter().map(|n| self.layout().dead_letter(n)).collect();
            for (name, read) in page.iter().zip(self.read_paths(&paths).await?) {
                let Some((data, _)) = read else { continue };
                let record: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
                let body = record.get("body");
                let id = body.and_then(|b| b.get("id")).and_then(|v| v.as_str());
                let moved = (body.and_then(|b| b.get("moved_from")))
                    .and_then(|m| m.as_array())
                    .is_some_and(|m| m.iter().any(|n| n.as_str() == Some(key)));
                if id == Some(key) || moved {
                    return Ok(Some(dead_parent(name, &data)));
                }
            }
        }
        Ok(None)
    }
}

/// A parent found among the dead letters as `name`, with its record `data`.
fn dead_parent(name: &str, data: &[u8]) -> Parent {
    let record: serde_json::Value = serde_json::from_slice(data).unwrap_or_default();
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let id = text(record.get("body").and_then(|b| b.get("id"))).unwrap_or_else(|| name.into());
    let task = text(record.get("task")).unwrap_or_else(|| name.into());
    let reason = text(record.get("reason")).unwrap_or_else(|| "no reason recorded".into());
    Parent::Settled {
        id,
        settled: AfterSettled::Dead { task, reason },
    }
}
