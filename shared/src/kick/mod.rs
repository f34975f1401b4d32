//! Kicks: a task starts soon after its publish, with no server running.
//!
//! Off by default; `EVENT_BRIDGE_KICK=on` switches them on, for the function and for every
//! publisher. After its tasks landed, a publish (the library's `Queue::publish*`, so the CLI's
//! `publish` and the HTTP publish of process_events too) asks whether a kick is due, and if so
//! POSTs process_events' authenticated HTTP trigger (`EVENT_BRIDGE_KICK_URL`, with
//! `Authorization: Bearer $CRON_SECRET`).
//!
//! Kicks are coalesced through ZooKeeper (`node`): the publisher that creates `ROOT/kick` is
//! the one that kicks; the others find it standing and do not. A kicked drain of process_events
//! lingers `KICK_LINGER_MS`, draining again every 100 ms, then deletes it, so a publish after
//! that kicks again, and runs once more: a task that landed while the node stood (its publisher
//! did not kick) is run by the same invocation. So a burst of publishes causes about one
//! invocation per linger. A node older than
//! `KICK_STALE_MS` (its `at_ms` against ZooKeeper's clock) is a lost kick: the next publisher
//! takes it over (a write at the version it read) and kicks again. The cron tick stays the
//! safety net. A kick that fails is logged and never fails the publish.
//!
//! [`attach`] gives a queue its kicks ([`crate::session::Session`] does, for every queue it
//! opens); a kicked drain of process_events calls [`clear`] once it has drained.
//!
//! - `node`: the kick node: whether a kick is due, and clearing it once a drain has drained.
//! - `trigger`: the HTTP request that starts a drain.
//! - `lambda`: the asynchronous Lambda invocation that starts one (`EVENT_BRIDGE_KICK_URL=
//!   lambda:<function>`; feature `lambda-kick`).

#[cfg(feature = "lambda-kick")]
mod lambda;
mod node;
mod trigger;

use std::time::Duration;

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use crate::clock::ZkTime;
use crate::config::{Config, KickConfig};
use crate::error::Result;
use crate::queue::{AfterPublish, Queue};
use crate::secret::Secret;

pub use node::{Due, clear};
pub use trigger::Trigger;

/// `queue`, kicking after its publishes when `config` has kicks on (`EVENT_BRIDGE_KICK=on`);
/// as it is otherwise.
pub fn attach(queue: Queue, config: &Config) -> Queue {
    match &config.kick {
        Some(kick) => {
            let kicker = Kicker::new(kick, config.cron_secret.clone());
            queue.with_after_publish(Arc::new(kicker))
        }
        None => queue,
    }
}

/// Where a due kick goes.
#[derive(Debug)]
enum Target {
    /// process_events' HTTP trigger.
    Http(Trigger),
    /// process_events, invoked through Lambda's Invoke API.
    #[cfg(feature = "lambda-kick")]
    Lambda(Box<lambda::Invoke>),
    /// A `lambda:` target in a build without the feature `lambda-kick`: each kick fails, saying so.
    #[cfg(not(feature = "lambda-kick"))]
    Unbuilt(String),
}

impl Target {
    fn new(config: &KickConfig, secret: Option<Secret>) -> Self {
        match config.lambda_function() {
            #[cfg(feature = "lambda-kick")]
            Some(function) => Target::Lambda(Box::new(lambda::Invoke::new(
                function,
                config.lambda_endpoint.clone(),
                config.wait,
            ))),
            #[cfg(not(feature = "lambda-kick"))]
            Some(_) => Target::Unbuilt(config.url.clone()),
            None => Target::Http(Trigger::new(
                &config.url,
                secret,
                config.wait,
                config.stale_after,
            )),
        }
    }

    async fn send(&self) -> Result<()> {
        match self {
            Target::Http(trigger) => trigger.send().await,
            #[cfg(feature = "lambda-kick")]
            Target::Lambda(invoke) => invoke.send().await,
            #[cfg(not(feature = "lambda-kick"))]
            Target::Unbuilt(url) => Err(crate::error::Error::Kick {
                target: url.clone(),
                problem: "event-bridge was built without its `lambda-kick` feature".into(),
            }),
        }
    }
}

/// A publisher's kicks: the setting, the target, and ZooKeeper's time as read once.
#[derive(Debug)]
pub struct Kicker {
    /// `KICK_STALE_MS`: how old a kick node is when its kick is taken as lost.
    stale_after: Duration,
    /// Where a due kick is sent.
    target: Target,
    /// ZooKeeper's time, read (by a write of `clock`) the first time a kick is asked about,
    /// then carried forward with the local monotonic clock.
    time: OnceCell<ZkTime>,
}

impl Kicker {
    /// Kicks as `config` says, authenticated with `secret` (`CRON_SECRET`).
    pub fn new(config: &KickConfig, secret: Option<Secret>) -> Self {
        Kicker {
            stale_after: config.stale_after,
            target: Target::new(config, secret),
            time: OnceCell::new(),
        }
    }

    /// After a publish on `queue` landed: kicks when a kick is due. Never fails: what goes
    /// wrong is logged, and the node is left to the next publisher or the cron tick.
    pub async fn after_publish(&self, queue: &Queue) {
        match self.due(queue).await {
            Ok(Due::Standing) => {
                tracing::debug!(
                    root = queue.layout().root(),
                    "kick standing: not kicked again"
                );
            }
            Ok(due) => match self.target.send().await {
                Ok(()) => tracing::info!(root = queue.layout().root(), ?due, "drain kicked"),
                Err(error) => tracing::warn!(
                    root = queue.layout().root(),
                    ?due,
                    %error,
                    "kick failed; the publish stands"
                ),
            },
            Err(error) => tracing::warn!(
                root = queue.layout().root(),
                %error,
                "could not tell whether a kick is due; the publish stands"
            ),
        }
    }

    /// Whether this publisher kicks now (see `node`).
    pub async fn due(&self, queue: &Queue) -> Result<Due> {
        let now = self.time.get_or_try_init(|| queue.server_time()).await?;
        node::due(queue, now.now_ms(), self.stale_after).await
    }
}

impl AfterPublish for Kicker {
    fn landed<'a>(&'a self, queue: &'a Queue) -> BoxFuture<'a, ()> {
        Box::pin(self.after_publish(queue))
    }
}
