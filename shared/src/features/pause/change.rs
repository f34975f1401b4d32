//! Pausing and unpausing: a read of `ROOT/paused` and a write of it at the version read,
//! again when another client wrote it in between ([`Pauses`]).

use zookeeper_client as zk;

use super::state::{PauseTarget, Paused};
use crate::error::{Error, Result};
use crate::queue::write::{self, Next, Read, Tries, Write};
use crate::queue::{Failed, Landed, Multi, Op, Queue};

/// Pausing the whole queue or one event type (`ROOT/paused`), on a queue.
#[derive(Clone, Copy)]
pub struct Pauses<'q>(&'q Queue);

impl Queue {
    /// The [`Pauses`] of this queue: what is paused, pause, unpause.
    pub fn pauses(&self) -> Pauses<'_> {
        Pauses(self)
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
    async fn read_paused(self) -> Result<(Paused, Option<i32>)> {
        let path = super::path(self.0.layout());
        match self.0.client().get_data(&path).await {
            Ok((data, stat)) => Ok((Paused::parse(&path, &data)?, Some(stat.version))),
            Err(zk::Error::NoNode) => Ok((Paused::default(), None)),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Read, change, write at the version read; again when another client wrote in between.
    async fn change_paused(self, target: &PauseTarget, on: bool) -> Result<bool> {
        let change = ChangePaused {
            path: super::path(self.0.layout()),
            target,
            on,
            write: None,
        };
        write::run(self.0, change).await
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
