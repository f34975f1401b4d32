//! Pausing: the whole queue, or one event type. Paused tasks are not claimed; tasks in flight
//! finish; producers keep publishing. The state is one znode, `ROOT/paused`, whose form this
//! file holds ([`Paused`]), with `pause` and `unpause`: a read and a version-checked write of
//! it, repeated when another client wrote it in between. The base paths make `paused` as `{}`,
//! so even a queue's first pause is checked; a queue no consumer of this version has started
//! on has no znode to check, and its first pause stops claims within a second.
//!
//! What a claim does with it is the pause feature's (`features/pause/`): `paused` read with
//! each run's start read and again when the run's copy is half a second old, its version
//! checked by every claim's multi-op, so that once `pause` returns no task of what it paused
//! starts, and a task of a paused type left in its lane. An unpause (`event-bridge resume`)
//! changes nothing under `tasks/`, so a worker keeps a persistent watch on `paused`: a change
//! wakes it for another drain once the one under way ends.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::Queue;
use super::ops::{Failed, Landed, Multi, Op};
use super::write::{self, Next, Read, Tries, Write};
use crate::error::{Error, Result};

recipe!(
    /// Pausing the whole queue or one event type (`ROOT/paused`).
    Pauses,
    pauses
);

/// What is paused (`ROOT/paused`'s data; no znode means nothing is).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Paused {
    /// The whole queue, since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<PausedSince>,
    /// Event types, each since when.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, PausedSince>,
}

/// When a pause began (the pausing client's clock, ms since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedSince {
    /// When the pause began (ms since the epoch, the pausing client's clock).
    pub since: i64,
}

/// What to pause or unpause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PauseTarget {
    /// The whole queue.
    Queue,
    /// One event type.
    Type(String),
}

impl Paused {
    /// The `paused` znode's data at `path`, read (empty: nothing paused).
    pub(crate) fn parse(path: &str, data: &[u8]) -> Result<Paused> {
        if data.is_empty() {
            return Ok(Paused::default());
        }
        serde_json::from_slice(data).map_err(|e| Error::Unreadable {
            path: path.to_string(),
            problem: e.to_string(),
        })
    }

    /// Whether a task of `event_type` may not be claimed now.
    pub fn covers(&self, event_type: &str) -> bool {
        self.queue.is_some() || self.types.contains_key(event_type)
    }

    /// Whether nothing is paused.
    pub fn is_empty(&self) -> bool {
        self.queue.is_none() && self.types.is_empty()
    }

    /// `target` paused (`on`) or unpaused; whether that changed anything.
    fn set(&mut self, target: &PauseTarget, on: bool) -> bool {
        let since = PausedSince {
            since: chrono::Utc::now().timestamp_millis(),
        };
        match (target, on) {
            (PauseTarget::Queue, true) => self.queue.replace(self.queue.unwrap_or(since)).is_none(),
            (PauseTarget::Queue, false) => self.queue.take().is_some(),
            (PauseTarget::Type(t), true) => {
                let fresh = !self.types.contains_key(t);
                self.types.entry(t.clone()).or_insert(since);
                fresh
            }
            (PauseTarget::Type(t), false) => self.types.remove(t).is_some(),
        }
    }
}

impl Pauses<'_> {
    /// What is paused now.
    pub async fn paused(self) -> Result<Paused> {
        Ok(self.read_paused().await?.0)
    }

    /// Pauses `target`; whether it was running until now.
    pub async fn pause(self, target: &PauseTarget) -> Result<bool> {
        self.change_paused(target, true).await
    }

    /// Lifts the pause of `target` (`event-bridge resume`); whether it was paused until now.
    pub async fn unpause(self, target: &PauseTarget) -> Result<bool> {
        self.change_paused(target, false).await
    }

    /// [`Pauses::unpause`], under its former name.
    #[deprecated(note = "renamed `Pauses::unpause`: \"resume\" is for resumable tasks")]
    pub async fn resume(self, target: &PauseTarget) -> Result<bool> {
        self.unpause(target).await
    }

    /// The state and the znode's version (`None`: no znode).
    pub(crate) async fn read_paused(self) -> Result<(Paused, Option<i32>)> {
        let path = self.layout().paused();
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok((Paused::parse(&path, &data)?, Some(stat.version))),
            Err(zk::Error::NoNode) => Ok((Paused::default(), None)),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Read, change, write at the version read; again when another client wrote in between.
    async fn change_paused(self, target: &PauseTarget, on: bool) -> Result<bool> {
        let change = ChangePaused {
            path: self.layout().paused(),
            target,
            on,
            write: None,
        };
        write::run(&self, change).await
    }
}

/// `ROOT/paused` changed (see [`Pauses::change_paused`]).
struct ChangePaused<'t> {
    path: String,
    target: &'t PauseTarget,
    on: bool,
    /// This try's data, and the version it was read at (`None`: no znode yet).
    write: Option<(Vec<u8>, Option<i32>)>,
}

impl Write for ChangePaused<'_> {
    type Tag = ();
    type Out = bool;
    const WHAT: &'static str = "pause";
    const TRIES: Tries = Tries::Few;

    /// `false` when the target is so already.
    async fn read(&mut self, queue: &Queue) -> Result<Read<bool>> {
        let (mut paused, version) = queue.pauses().read_paused().await?;
        if !paused.set(self.target, self.on) {
            return Ok(Read::Stop(false));
        }
        self.write = Some((serde_json::to_vec(&paused)?, version));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, ()>) {
        match &self.write {
            Some((data, Some(version))) => multi.push((), Op::Set(&self.path, data, *version)),
            Some((data, None)) => multi.push((), Op::Create(&self.path, data)),
            None => multi,
        };
    }

    async fn landed(self, _: &Queue, _: Landed<()>) -> Result<bool> {
        tracing::info!(target = ?self.target, paused = self.on, "pause state changed");
        Ok(true)
    }

    /// Another client wrote it in between: read again.
    async fn failed(&mut self, _: &Queue, failed: Failed<()>) -> Result<Next<bool>> {
        match failed.error {
            zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode => Ok(Next::Again),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<bool> {
        Err(Error::Unreadable {
            path: self.path.clone(),
            problem: "other clients kept changing it meanwhile; try again".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_or_the_whole_queue_covers_tasks() {
        let mut paused = Paused::default();
        assert!(!paused.covers("email"));
        assert!(paused.set(&PauseTarget::Type("email".into()), true));
        assert!(
            !paused.set(&PauseTarget::Type("email".into()), true),
            "already"
        );
        assert!(paused.covers("email") && !paused.covers("sms"));
        assert!(paused.set(&PauseTarget::Queue, true));
        assert!(paused.covers("sms"));
        assert!(paused.set(&PauseTarget::Queue, false));
        assert!(paused.set(&PauseTarget::Type("email".into()), false));
        assert!(paused.is_empty());
    }

    #[test]
    fn the_znode_reads_as_written() {
        let mut paused = Paused::default();
        paused.set(&PauseTarget::Type("email".into()), true);
        let json = serde_json::to_string(&paused).unwrap();
        assert!(json.starts_with(r#"{"types":{"email":{"since":"#), "{json}");
        assert_eq!(serde_json::from_str::<Paused>(&json).unwrap(), paused);
        assert_eq!(
            serde_json::from_str::<Paused>("{}").unwrap(),
            Paused::default()
        );
    }
}
