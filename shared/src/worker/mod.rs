//! A long-running consumer, for teams that have a server: `event-bridge worker`.
//!
//! It keeps one persistent watch on each
//! priority lane's parent, and one recursive watch on `lanes/keys` (only these: on ZooKeeper 3.8
//! a one-shot watch on the same path by the same client drops the persistent one,
//! ZOOKEEPER-4466). Each change of children raises a notification (a key lane's head moving is a
//! change of data under `lanes/keys`, and wakes nobody), kept as a permit when nobody
//! waits, so no change between two drains is missed. The worker drains, then waits for that
//! notification, a 5-second timer or SIGTERM/SIGINT. The same notification reaches the drain in
//! progress: when it has run out of candidates but has free slots while slow tasks are still
//! running, it takes a new snapshot, so a task published meanwhile does not wait for the slowest
//! one. Under steady traffic that drain never ends, so nothing the worker needs done may wait for
//! its end (`worker/upkeep.rs`): beside the drains, on timers of their own, it promotes due tasks
//! from `delayed/` every 500 ms (a `getChildren` of `delayed/`; the clock is written once per 30 s
//! and carried forward) and reaps every half lease timeout; a promoted task lands at the tail,
//! which the watch reports. And a drain's pass that sits at the tail walks again from the head
//! once its walk is a second old (on the notification, or on a one-second timer when none comes;
//! the old walk's knowledge is saved to the head first): a task the reaper freed stays under its
//! name behind the walk, an ordered group's next task was left for a later pass, an unpaused type's
//! tasks were passed over, and the new walk finds them. On session expiry it opens a new session (and a run in progress goes on on it for what it
//! holds); on a signal it claims nothing more, gives tasks in flight `DEADLINE_MARGIN_MS` to finish
//! and releases the rest.
//!
//! It also fires recurring schedules at their slots (feature `schedule`, `features/schedules/timer.rs`), and
//! between drains a slow timer (`WORKER_IDLE_CHECK`) wakes it when no notification does; a
//! drain with free places and slow tasks in flight takes new tasks in ([`process::run_refilling`]).

mod tasks_watch;
mod upkeep;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::Config;
use crate::error::Result;
use crate::handler::Handler;
use crate::process::{self, RunOptions};
use crate::queue::DeadLetterSink;
use crate::queue::Queue;
use crate::queue::{Recovery, recovery};
use crate::session::Session;

/// How often an idle worker looks for tasks whose backoff ended.
pub const WORKER_IDLE_CHECK: Duration = Duration::from_secs(5);

/// What wakes a worker between drains, and a drain at its tail.
#[derive(Default)]
struct Wakes {
    /// A change in a lane: new tasks (a drain at its tail goes on past it).
    refill: Arc<Notify>,
    /// A change of what is paused: a task a drain passed over may be claimed now.
    paused: Arc<Notify>,
}

/// What a worker did over its life.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct WorkerReport {
    /// The consumer id its leases carry, kept across sessions.
    pub consumer_id: String,
    /// Drains run (each a [`process::run_refilling`] call).
    pub drains: u64,
    /// Tasks whose handler succeeded and that were completed.
    pub completed: u64,
    /// Tasks released for another try.
    pub retried: u64,
    /// Tasks that went to the dead letters.
    pub dead_lettered: u64,
    /// Expired leases its upkeep freed.
    pub reaped: u64,
    /// Sessions opened: one, plus one per expiry survived.
    pub sessions: u64,
}

/// A long-running consumer.
///
/// ```
/// use event_bridge::worker::Worker;
/// use event_bridge::{Config, Envelope, Handler, HandlerError, Session, Task};
/// use serde_json::json;
/// use tokio::sync::{mpsc, watch};
///
/// /// Hands each task's id on to whoever listens.
/// struct Forward(mpsc::UnboundedSender<String>);
///
/// impl Handler for Forward {
///     async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
///         let id = task.envelope.id.clone();
///         self.0.send(id).map_err(|_| HandlerError::Retryable("nobody listens".into()))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> event_bridge::Result<()> {
/// let config = Config::from_env()?;
/// # // The example runs against the ZooKeeper at ZK_TEST_ADDRESS (make test starts one), in
/// # // a fresh chroot of its own.
/// # let mut config = config;
/// # let address = std::env::var("ZK_TEST_ADDRESS").unwrap_or_else(|_| "127.0.0.1:2181".into());
/// # let chroot = format!("/eb-doctests/{}", uuid::Uuid::new_v4());
/// # let zk = zookeeper_client::Client::connect(&address).await.expect("a ZooKeeper at ZK_TEST_ADDRESS");
/// # let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
/// # zk.mkdir(&chroot, &open).await.expect("the example's chroot");
/// # config.zookeeper = format!("{address}{chroot}");
/// let (forward, mut handled) = mpsc::unbounded_channel();
/// let worker = Worker::new(config.clone(), Forward(forward), 8);
/// let (stop, stopped) = watch::channel(false);
/// let producer = Session::open(config, "producer", None).await?.queue();
///
/// let (report, published) = tokio::join!(worker.run(stopped), async {
///     let task = Envelope::new("report.build", json!({"month": "2026-11"}));
///     producer.publish(&task).await?;
///     assert_eq!(handled.recv().await, Some(task.id));
///     stop.send(true).expect("the worker listens until it stops");
///     Ok::<(), event_bridge::Error>(())
/// });
/// published?;
/// assert_eq!(report?.completed, 1);
/// # Ok(())
/// # }
/// ```
pub struct Worker<H> {
    config: Config,
    handler: H,
    concurrency: usize,
    /// How long an idle worker waits before it looks again without a watch firing.
    idle_check: Duration,
    dead_letters: Option<Arc<dyn DeadLetterSink>>,
    session: watch::Sender<Option<zk::SessionInfo>>,
}

impl<H: Handler> Worker<H> {
    /// A worker that runs `handler` on up to `concurrency` tasks at once (at least one), on
    /// sessions opened from `config`. Nothing connects until [`Worker::run`].
    pub fn new(config: Config, handler: H, concurrency: usize) -> Self {
        Worker {
            config,
            handler,
            concurrency: concurrency.max(1),
            idle_check: WORKER_IDLE_CHECK,
            dead_letters: None,
            session: watch::channel(None).0,
        }
    }

    /// Looks for work every `every` even when no watch fires (default [`WORKER_IDLE_CHECK`]).
    pub fn with_idle_check(mut self, every: Duration) -> Self {
        self.idle_check = every;
        self
    }

    /// Sends every dead letter to `sink` too.
    pub fn with_dead_letters(mut self, sink: Arc<dyn DeadLetterSink>) -> Self {
        self.dead_letters = Some(sink);
        self
    }

    /// The worker's current ZooKeeper session, as it changes.
    pub fn sessions(&self) -> watch::Receiver<Option<zk::SessionInfo>> {
        self.session.subscribe()
    }

    /// Runs until `stop` turns true.
    ///
    /// # Notable errors
    /// - [`crate::Error::Unreachable`] when the first session cannot be opened.
    pub async fn run(&self, stop: watch::Receiver<bool>) -> Result<WorkerReport> {
        let session =
            Session::open(self.config.clone(), "worker", self.dead_letters.clone()).await?;
        let reap_every = self.config.lease_timeout / 2;
        let consume = async {
            let (report, reaped) = tokio::join!(
                self.consume(&session, &stop),
                upkeep::until_stopped(&session, reap_every, stop.clone())
            );
            report.map(|report| WorkerReport {
                reaped: report.reaped + reaped,
                ..report
            })
        };
        #[cfg(feature = "schedule")]
        let (report, ()) = tokio::join!(
            consume,
            crate::features::schedules::timer::fire_until_stopped(&session, stop.clone())
        );
        #[cfg(not(feature = "schedule"))]
        let report = consume.await;
        report
    }

    /// Drains and waits in turn until `stop` turns true.
    async fn consume(
        &self,
        session: &Session,
        stop: &watch::Receiver<bool>,
    ) -> Result<WorkerReport> {
        let mut report = WorkerReport {
            consumer_id: session.consumer_id().to_string(),
            ..Default::default()
        };
        let (mut queue, mut wakes) = self.watch(session, &mut report).await?;
        while !*stop.borrow() {
            // A run may have opened a new session for what it held: watch on that one.
            if session.queue().session().id() != queue.session().id() {
                (queue, wakes) = self.reopen(session, &queue, &mut report, stop).await?;
            }
            let Err(e) = self.cycle(session, &queue, &wakes, stop, &mut report).await else {
                continue;
            };
            match recovery(&e, queue.session_over()) {
                Recovery::NewSession => {
                    tracing::warn!(consumer = %report.consumer_id, error = %e, "session lost; opening a new one");
                    (queue, wakes) = self.reopen(session, &queue, &mut report, stop).await?;
                }
                // A long-running consumer keeps going after any other failure too, after a
                // pause, so one bad moment does not stop it for good.
                Recovery::SameSession | Recovery::GiveUp => {
                    tracing::warn!(consumer = %report.consumer_id, error = %e, "worker cycle failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        tracing::info!(consumer = %report.consumer_id, drains = report.drains, completed = report.completed,
            retried = report.retried, dead_lettered = report.dead_lettered, reaped = report.reaped,
            sessions = report.sessions, "worker stopped");
        Ok(report)
    }

    /// Drain, then wait for the watch, the timer or the stop.
    async fn cycle(
        &self,
        session: &Session,
        queue: &Queue,
        wakes: &Wakes,
        stop: &watch::Receiver<bool>,
        report: &mut WorkerReport,
    ) -> Result<()> {
        let options = RunOptions {
            max_tasks: u32::MAX,
            concurrency: self.concurrency,
            deadline: Instant::now() + Duration::from_secs(24 * 3600),
            margin: self.config.deadline_margin,
        };
        let run =
            process::run_refilling(session, &self.handler, &options, stop, Some(&wakes.refill))
                .await?;
        report.drains += 1;
        report.completed += run.completed as u64;
        report.retried += run.retried as u64;
        report.dead_lettered += run.dead_lettered as u64;
        // One watch mechanism only: the persistent watches' notifications (a change meanwhile
        // left a permit, so none is missed), the idle timer, or the stop. A pause or resume
        // during the drain left its own permit: the drain may have passed over a task of a
        // type unpaused after it read what is paused, and nothing in the lanes changes then.
        let mut stop = stop.clone();
        tokio::select! {
            _ = wakes.refill.notified() => {}
            _ = wakes.paused.notified() => {}
            _ = stop.wait_for(|s| *s) => {}
            _ = tokio::time::sleep(self.idle_check) => {}
        }
        if queue.session_over() {
            let tasks = queue.layout().tasks();
            return Err(crate::Error::zk("watch", tasks, zk::Error::SessionExpired));
        }
        Ok(())
    }

    /// The session's queue, and its wake-ups: one raised on every change in a lane (from a
    /// persistent watch on each), which lets a drain with free places pick up new tasks at
    /// once, and one on every change of what is paused.
    async fn watch(&self, session: &Session, report: &mut WorkerReport) -> Result<(Queue, Wakes)> {
        let queue = session.queue();
        self.session.send_replace(Some(queue.session().clone()));
        report.sessions += 1;
        tracing::info!(consumer = %report.consumer_id, session = %queue.session().id(), "worker session open");
        let wakes = Wakes::default();
        // One watch per priority lane, and one recursive watch over the key lanes: a task
        // published in any of them wakes the drain. One on `paused`: a resume wakes it too.
        let lanes = (crate::lane::Priority::ALL.into_iter()).map(|p| {
            let tasks = queue.layout().lane_tasks(&p.into());
            (tasks, zk::AddWatchMode::Persistent, &wakes.refill)
        });
        let keys = (
            queue.layout().key_lanes(),
            zk::AddWatchMode::PersistentRecursive,
            &wakes.refill,
        );
        let paused = (
            crate::features::pause::path(queue.layout()),
            zk::AddWatchMode::Persistent,
            &wakes.paused,
        );
        for (path, mode, wake) in lanes.chain([keys, paused]) {
            let watcher = queue
                .client()
                .watch(&path, mode)
                .await
                .map_err(|e| crate::Error::zk("watch", &path, e))?;
            let client = queue.client().clone();
            let wake = wake.clone();
            tokio::spawn(tasks_watch::keep_watching(
                client, path, mode, watcher, wake,
            ));
        }
        Ok((queue, wakes))
    }

    /// Opens a new session, retrying every second until it works or the worker is stopped.
    async fn reopen(
        &self,
        session: &Session,
        stale: &Queue,
        report: &mut WorkerReport,
        stop: &watch::Receiver<bool>,
    ) -> Result<(Queue, Wakes)> {
        loop {
            let opened = match session.renew(stale, "the worker's session is over").await {
                Ok(_) => self.watch(session, report).await,
                Err(e) => Err(e),
            };
            match opened {
                Ok(opened) => return Ok(opened),
                Err(e) if *stop.borrow() => return Err(e),
                Err(e) => {
                    tracing::warn!(consumer = %report.consumer_id, error = %e, "cannot open a session yet");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A worker's drain takes a task it stopped again after as long as an idle worker waits
    /// between drains (see `process::suspend`).
    #[test]
    fn a_stopped_task_is_taken_again_after_an_idle_workers_wait() {
        assert_eq!(super::WORKER_IDLE_CHECK, crate::process::TAKE_AGAIN_AFTER);
    }
}
