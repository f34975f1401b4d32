//! The znodes of recurring schedules: `schedules/<name>` holds a schedule (JSON) with the
//! latest slot it took, and `schedules/<name>/<slot>` marks the latest slot that made a task.
//! Taking a slot is one multi-op: the schedule rewritten at the version read (its latest slot
//! moved on), the slot's mark created, and the slot's task (with its idempotency key, when it
//! has one) created. Of any number of firers racing for a slot, one commits; the others' writes
//! fail on the version or the mark and change nothing.

use zookeeper_client as zk;

use super::Queue;
use super::keys::created_name;
use super::ops::Op;
use crate::error::{Error, Result};
use crate::recurrence::Schedule;
use crate::task::Envelope;

/// A schedule as read, with the version its next write must match.
#[derive(Clone, Debug)]
pub struct StoredSchedule {
    pub schedule: Schedule,
    pub version: i32,
}

/// What taking one slot did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotTaken {
    /// The slot made this task.
    Fired { task: String },
    /// The slot's idempotency key was taken by an earlier task (this one, if known): the slot
    /// is taken without a new task.
    Existing { task: Option<String> },
    /// The slot was passed over (misfire policy `skip`).
    Skipped,
    /// Another firer took a slot first, or the schedule changed meanwhile: nothing written.
    Raced,
}

impl Queue {
    /// Every schedule, by name: one list and one multi-read. A schedule that cannot be read
    /// comes back as the problem, so one bad schedule does not stop the others.
    pub async fn schedules(
        &self,
    ) -> Result<Vec<(String, std::result::Result<StoredSchedule, String>)>> {
        let dir = self.layout().schedules();
        let mut names = match self.client().list_children(&dir).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(Error::zk("list", dir, e)),
        };
        names.sort();
        let paths: Vec<String> = names.iter().map(|n| format!("{dir}/{n}")).collect();
        let reads = self.read_paths(&paths).await?;
        Ok(names
            .into_iter()
            .zip(reads)
            .filter_map(|(name, read)| {
                let (bytes, stat) = read?;
                let name = crate::layout::decode_segment(&name);
                Some((name, stored(&bytes, &stat)))
            })
            .collect())
    }

    /// Schedule `name`, if there is one.
    pub async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        let path = self.layout().schedule(name);
        let Some((bytes, stat)) = self.read_path(&path).await? else {
            return Ok(None);
        };
        stored(&bytes, &stat)
            .map(Some)
            .map_err(|problem| Error::Unreadable { path, problem })
    }

    /// Creates `schedule` (`version` `None`) or rewrites it at `version`; `false` when the name
    /// is taken, or the schedule changed or went meanwhile.
    pub async fn put_schedule(&self, schedule: &Schedule, version: Option<i32>) -> Result<bool> {
        let path = self.layout().schedule(&schedule.name);
        let data = serde_json::to_vec(schedule)?;
        let written = match version {
            None => {
                self.ensure_parent(&self.layout().schedules()).await?;
                self.client()
                    .create(&path, &data, &self.persistent())
                    .await
                    .map(drop)
            }
            Some(version) => self
                .client()
                .set_data(&path, &data, Some(version))
                .await
                .map(drop),
        };
        match written {
            Ok(()) => Ok(true),
            Err(zk::Error::NodeExists | zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
            Err(e) => Err(Error::zk("write", path, e)),
        }
    }

    /// Deletes schedule `name` and its slot mark; `false` when there was none.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        let path = self.layout().schedule(name);
        for _ in 0..3 {
            let marks = match self.client().list_children(&path).await {
                Ok(marks) => marks,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return Err(Error::zk("list", path, e)),
            };
            let mark_paths: Vec<String> = marks.iter().map(|m| format!("{path}/{m}")).collect();
            let mut ops: Vec<Op> = mark_paths.iter().map(|m| Op::Delete(m, -1)).collect();
            ops.push(Op::Delete(&path, -1));
            match self.commit("remove schedule", &ops).await? {
                Ok(_) => return Ok(true),
                // A firer took a slot meanwhile (a mark came or went): look again.
                Err((_, zk::Error::NoNode | zk::Error::NotEmpty)) => continue,
                Err((i, e)) => return Err(Error::zk("delete", ops[i].path(), e)),
            }
        }
        Err(Error::Unreadable {
            path,
            problem: "its slots kept changing while it was removed; try again".into(),
        })
    }

    /// Takes slot `slot_ms` of `stored`: with `task`, creates it (and its key) with the
    /// slot's mark; without, passes the slot over. The mark of the slot before goes after.
    /// Nothing is written unless the schedule is still at the version read (a firer with a
    /// stale read gets [`SlotTaken::Raced`]). [`crate::schedule::fire_due`] is the usual
    /// caller; a firer of one's own may call it directly.
    pub async fn take_slot(
        &self,
        stored: &StoredSchedule,
        slot_ms: i64,
        task: Option<&Envelope>,
    ) -> Result<SlotTaken> {
        let name = &stored.schedule.name;
        let path = self.layout().schedule(name);
        let previous = stored.schedule.last_slot_ms;
        let moved = serde_json::to_vec(&Schedule {
            last_slot_ms: Some(slot_ms),
            ..stored.schedule.clone()
        })?;
        let Some(envelope) = task else {
            let ops = [Op::Set(&path, &moved, stored.version)];
            return match self.commit("skip slot", &ops).await? {
                Ok(_) => Ok(SlotTaken::Skipped),
                Err((_, zk::Error::BadVersion | zk::Error::NoNode)) => Ok(SlotTaken::Raced),
                Err((i, e)) => Err(Error::zk("skip slot", ops[i].path(), e)),
            };
        };
        let mark = self.layout().schedule_slot(name, slot_ms);
        let taken = self
            .fire(&path, &moved, stored.version, &mark, envelope)
            .await?;
        let fired = matches!(taken, SlotTaken::Fired { .. } | SlotTaken::Existing { .. });
        if let Some(previous) = previous.filter(|p| fired && *p != slot_ms) {
            let old = self.layout().schedule_slot(name, previous);
            match self.client().delete(&old, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => tracing::warn!(mark = %old, error = %e, "old slot mark left"),
            }
        }
        Ok(taken)
    }

    /// The multi-op of a slot that makes a task.
    async fn fire(
        &self,
        path: &str,
        moved: &[u8],
        version: i32,
        mark: &str,
        envelope: &Envelope,
    ) -> Result<SlotTaken> {
        let prefix = self.layout().task_prefix();
        let keyed = match &envelope.idempotency_key {
            Some(key) => Some(self.keyed_write(envelope, key)?),
            None => None,
        };
        let plain = match &keyed {
            Some(_) => Vec::new(),
            None => envelope.to_bytes()?,
        };
        let mut ops = vec![Op::Set(path, moved, version), Op::Create(mark, b"")];
        if let Some(write) = &keyed {
            ops.push(Op::Create(&write.key_path, &write.unnamed));
            ops.push(Op::CreateSequential(&prefix, &write.body));
        } else {
            ops.push(Op::CreateSequential(&prefix, &plain));
        }
        let task_index = ops.len() - 1;
        match self.commit("fire slot", &ops).await? {
            Ok(results) => {
                let task = created_name(&results, task_index, &prefix)?;
                if let Some(write) = &keyed {
                    self.name_key(write, &task).await?;
                }
                Ok(SlotTaken::Fired { task })
            }
            Err((0 | 1, zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists)) => {
                Ok(SlotTaken::Raced)
            }
            Err((2, zk::Error::NodeExists)) if keyed.is_some() => {
                let write = keyed.as_ref().expect("keyed");
                self.take_without_task(path, moved, version, mark, &write.key_path)
                    .await
            }
            Err((2, zk::Error::NoNode)) if keyed.is_some() => {
                self.ensure_parent(&self.layout().keys()).await?;
                Ok(SlotTaken::Raced)
            }
            Err((i, e)) => Err(Error::zk("fire slot", ops[i].path(), e)),
        }
    }

    /// Takes a slot whose idempotency key an earlier task holds: the slot and its mark, no task.
    async fn take_without_task(
        &self,
        path: &str,
        moved: &[u8],
        version: i32,
        mark: &str,
        key_path: &str,
    ) -> Result<SlotTaken> {
        let ops = [Op::Set(path, moved, version), Op::Create(mark, b"")];
        match self.commit("fire slot", &ops).await? {
            Ok(_) => {
                let task = self
                    .existing(key_path)
                    .await?
                    .and_then(|p| p.task().map(str::to_string));
                Ok(SlotTaken::Existing { task })
            }
            Err((_, zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists)) => {
                Ok(SlotTaken::Raced)
            }
            Err((i, e)) => Err(Error::zk("fire slot", ops[i].path(), e)),
        }
    }
}

fn stored(bytes: &[u8], stat: &zk::Stat) -> std::result::Result<StoredSchedule, String> {
    serde_json::from_slice(bytes)
        .map(|schedule| StoredSchedule {
            schedule,
            version: stat.version,
        })
        .map_err(|e| format!("not a schedule: {e}"))
}
