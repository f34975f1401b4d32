//! A queue on a live ZooKeeper session: what the functions, the worker and the CLI start from.
//!
//! [`Session::open`] connects (failing fast, naming the address), creates the queue's base
//! paths and keeps the configuration, the consumer id and the dead-letter sink, so that a new
//! ZooKeeper session, when one is needed, is the same consumer with the same settings.
//!
//! # The session across invocations
//!
//! A function opens its session at cold start and reuses it. Between invocations Lambda
//! freezes the sandbox, and a sandbox frozen for longer than the session timeout thaws with a
//! session ZooKeeper has already expired. [`Session::run`] handles that and dropped links the
//! same way everywhere, by [`recovery`]:
//!
//! 1. before the work, a session the client already knows is over is replaced;
//! 2. when the work fails, it is run once more: on the same session after a dropped link, on a
//!    new session after an expiry; any other failure is returned as it is.
//!
//! Running the work again is safe: every write a holder makes is fenced
//! ([`crate::queue`]), so whatever the first attempt claimed is either settled or left to the
//! reaper.

mod connect;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::queue::{Recovery, recovery};
pub use connect::connect;
pub(crate) use connect::{chroot, host, open};

use crate::config::Config;
use crate::error::Result;
use crate::queue::{DeadLetterSink, Queue};

/// How long to wait before sending work again on the same session after a dropped link.
const SAME_SESSION_PAUSE: Duration = Duration::from_millis(200);

/// A queue on a ZooKeeper session, replaced when the session ends.
pub struct Session {
    config: Config,
    /// Kept across new sessions, so one instance's logs and leases carry one name.
    consumer_id: String,
    /// Where dead letters also go, kept across new sessions.
    dead_letters: Option<Arc<dyn DeadLetterSink>>,
    /// The queue on the current session; swapped whole for a new one. Vercel serves requests
    /// concurrently, hence the lock (held only to clone or swap, never across an await).
    queue: Mutex<Queue>,
}

impl Session {
    /// Connects and creates the queue's base paths. `consumer_prefix` starts the consumer id
    /// (`lambda-…`, `vercel-…`, `worker-…`, `cli-…`).
    ///
    /// # Notable errors
    /// - [`crate::Error::Unreachable`] naming the address when no session opens in time.
    pub async fn open(
        config: Config,
        consumer_prefix: &str,
        dead_letters: Option<Arc<dyn DeadLetterSink>>,
    ) -> Result<Self> {
        let consumer_id = Queue::new_consumer_id(consumer_prefix);
        let client = connect::open(&config).await?;
        let queue = with_sink(Queue::new(client, &config, &consumer_id), &dead_letters);
        let queue = crate::kick::attach(queue, &config);
        opened(&consumer_id, &queue);
        // The chroot and the base paths in one read.
        if !queue.ensure_paths_under_root().await? {
            let chroot = connect::chroot(&config.zookeeper).unwrap_or("/");
            return Err(connect::missing_chroot(&config, chroot));
        }
        Ok(Session {
            config,
            consumer_id,
            dead_letters,
            queue: Mutex::new(queue),
        })
    }

    /// The configuration the session was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The consumer id, kept across the sessions it opens.
    pub fn consumer_id(&self) -> &str {
        &self.consumer_id
    }

    /// The queue on the current session.
    pub fn queue(&self) -> Queue {
        self.queue.lock().expect("session lock").clone()
    }

    /// Runs `work` on the queue, recovering as the module documentation says: at most one
    /// more run per call.
    ///
    /// # Notable errors
    /// - the work's own error when [`recovery`] gives up on it, or when the second run fails;
    /// - [`crate::Error::Unreachable`] when a new session cannot be opened.
    pub async fn run<T, F, Fut>(&self, work: F) -> Result<T>
    where
        F: Fn(Queue) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut queue = self.queue();
        if queue.session_over() {
            queue = self.renew(&queue, "the session is over").await?;
        }
        let error = match work(queue.clone()).await {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        match recovery(&error, queue.session_over()) {
            Recovery::GiveUp => return Err(error),
            Recovery::SameSession => {
                tracing::warn!(consumer = %self.consumer_id, error = %error, "zookeeper link dropped; running again on the same session");
                tokio::time::sleep(SAME_SESSION_PAUSE).await;
            }
            Recovery::NewSession => queue = self.renew(&queue, &error.to_string()).await?,
        }
        work(queue).await
    }

    /// Replaces `stale` with a queue on a new session, unless a concurrent caller already did;
    /// returns the current queue.
    pub async fn renew(&self, stale: &Queue, reason: &str) -> Result<Queue> {
        tracing::warn!(consumer = %self.consumer_id, reason, "zookeeper session over; opening a new one");
        let fresh = new_queue(&self.config, &self.consumer_id, &self.dead_letters).await?;
        let mut current = self.queue.lock().expect("session lock");
        if current.session().id() == stale.session().id() {
            *current = fresh;
        }
        Ok(current.clone())
    }
}

async fn new_queue(
    config: &Config,
    consumer_id: &str,
    dead_letters: &Option<Arc<dyn DeadLetterSink>>,
) -> Result<Queue> {
    let client = connect(config).await?;
    let queue = with_sink(Queue::new(client, config, consumer_id), dead_letters);
    let queue = crate::kick::attach(queue, config);
    opened(consumer_id, &queue);
    Ok(queue)
}

/// Logs a new ZooKeeper session (at debug): what tells how many sessions one process opened.
fn opened(consumer_id: &str, queue: &Queue) {
    let session = queue.session().id();
    tracing::debug!(consumer = %consumer_id, %session, "zookeeper session opened");
}

fn with_sink(queue: Queue, dead_letters: &Option<Arc<dyn DeadLetterSink>>) -> Queue {
    match dead_letters {
        Some(sink) => queue.with_dead_letters(sink.clone()),
        None => queue,
    }
}
