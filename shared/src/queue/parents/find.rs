//! Finding the parent a child names: by task name where that name can be (its lane,
//! `delayed/`, the dead letters, the completion records), by id under `after/`, among the
//! settled markers and the completion records, else by a walk of the queue.

use crate::queue::Dependencies;
use zookeeper_client as zk;

use super::{DEBOUNCED, Parent, parent_error};
use crate::error::{Error, Result};
use crate::feature::End;
use crate::layout;
use crate::queue::{TaskRead, names_task, parse_waiting};
use crate::task::after::ParentEnd;
use crate::task::{self, Body};

/// The envelope id of a task whose body is `body` (a plain body's is its name); an error for
/// a body no consumer can run.
fn id_in(key: &str, name: &str, body: &[u8]) -> Result<String> {
    match task::parse(body) {
        Body::Envelope(e) => Ok(e.id),
        Body::Plain(_) => Ok(name.to_string()),
        Body::Place(place) => Err(parent_error(
            key,
            format!(
                "it is a place keeping the turn of task {} in group {}: name that task by its id",
                place.id, place.group
            ),
        )),
        Body::Poison(problem) => Err(parent_error(
            key,
            format!("its body can never run ({problem}), so it can never complete"),
        )),
    }
}

impl Dependencies<'_> {
    /// The parent `key` names (a task name or an id), ended: found by what a feature kept of
    /// it (`Feature::find_ended`, such as a completion record kept with `KEEP_DONE`).
    async fn completed_parent(self, key: &str) -> Result<Option<Parent>> {
        let keys = [key.to_string()];
        let ended = self.features().find_ended(&self.site(), &keys).await?;
        let ended = ended.into_iter().next().flatten();
        Ok(ended.and_then(|ended| match ended.how {
            End::Completed => Some(Parent::Settled {
                id: ended.id,
                settled: ParentEnd::Completed { task: ended.task },
            }),
            // A dead parent is found by its dead letter, with its reason.
            End::Dead => None,
        }))
    }

    /// The parent `key` (a task name or an envelope id) names, if there is one.
    pub(super) async fn find_parent(self, key: &str) -> Result<Option<Parent>> {
        if self.debounce().find_debounced(key).await?.is_some() {
            return Err(parent_error(key, DEBOUNCED));
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
        if let Some(settled) = marker.as_ref().and_then(|(d, _)| ParentEnd::parse(d)) {
            return Ok(Some(Parent::Settled { id, settled }));
        }
        Ok(Some(Parent::Pending {
            id,
            path,
            marker: marker.map(|(_, stat)| stat.version),
        }))
    }

    /// The parent named `name`, found under that very name.
    pub(super) async fn parent_by_name(self, name: &str) -> Result<Option<Parent>> {
        let path = self.layout().task(name);
        if let Some((body, _)) = self.read_path(&path).await? {
            let id = id_in(name, name, &body)?;
            return Ok(Some(Parent::Pending {
                id,
                path,
                marker: None,
            }));
        }
        if let Some(found) = self
            .delayed_parent(name, Some(name), &|n, _| n == name)
            .await?
        {
            return Ok(Some(found));
        }
        if let Some((data, _)) = self.read_path(&self.layout().dead_letter(name)).await? {
            return Ok(Some(dead_parent(name, &data)));
        }
        self.completed_parent(name).await
    }

    /// The parent `key` names by id (or by a name it had), wherever it is.
    async fn parent_by_id(self, key: &str) -> Result<Option<Parent>> {
        let blocked = self.layout().blocked(key);
        if self.read_path(&blocked).await?.is_some() {
            return Ok(Some(Parent::Pending {
                id: key.to_string(),
                path: blocked,
                marker: None,
            }));
        }
        let marker = self.read_path(&self.layout().dependents_of(key)).await?;
        if let Some(settled) = marker.and_then(|(d, _)| ParentEnd::parse(&d)) {
            return Ok(Some(Parent::Settled {
                id: key.to_string(),
                settled,
            }));
        }
        // Completed already (the common case, and the cheap look), or still pending: the
        // records are looked at again last, for a task that completes while it is looked for.
        if let Some(parent) = self.completed_parent(key).await? {
            return Ok(Some(parent));
        }
        if let Some(probed) = self.find_in_lanes(key).await?
            && let TaskRead::Found { body, .. } = &probed.read
        {
            return Ok(Some(Parent::Pending {
                id: id_in(key, &probed.name, body)?,
                path: self.layout().task(&probed.name),
                marker: None,
            }));
        }
        let wanted = |name: &str, body: &[u8]| names_task(key, name, body);
        if let Some(found) = self.delayed_parent(key, None, &wanted).await? {
            return Ok(Some(found));
        }
        if let Some(found) = self.dead_parent_by_id(key).await? {
            return Ok(Some(found));
        }
        // Again: a task that completes while it is looked for leaves the lanes before its
        // record is there, never after.
        self.completed_parent(key).await
    }

    /// The waiting task under `delayed/` that `wanted` picks (by its name and body); with
    /// `named`, only the node of that task name is read.
    async fn delayed_parent(
        self,
        key: &str,
        named: Option<&str>,
        wanted: &(dyn Fn(&str, &[u8]) -> bool + Sync),
    ) -> Result<Option<Parent>> {
        for bucket in self.delays().buckets().await? {
            for (_, node) in self.delays().waiting_in(bucket).await? {
                let task = parse_waiting(&node).map(|(_, name)| name);
                if named.is_some_and(|n| task != Some(n)) {
                    continue;
                }
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
    async fn dead_parent_by_id(self, key: &str) -> Result<Option<Parent>> {
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
        settled: ParentEnd::Dead { task, reason },
    }
}
