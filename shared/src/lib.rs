//! event-bridge: a task queue on ZooKeeper for serverless consumers.
//!
//! # The model
//!
//! Producers write each task as a persistent sequential znode under `ROOT/tasks`. A consumer
//! claims a task by creating `ROOT/leases/<task name>`; ZooKeeper lets only one create win.
//! The holder runs the task and then deletes task and lease in one multi-op. A holder that
//! dies leaves its lease behind; the reaper deletes leases whose time is up, and the task
//! becomes claimable again.
//!
//! ```text
//!            claim                      complete
//! pending ──────────▶ leased ──────────────────────▶ (gone)
//!    ▲                  │  │ retryable failure
//!    └──────────────────┘  │ (with backoff)
//!    ▲   lease reaped      │
//!    └─────────────────────┤ permanent failure, poison body, attempts used up
//!                          ▼
//!                     ROOT/dead
//! ```
//!
//! Every claim raises the task znode's version, and every later write of the holder checks
//! it (with the lease's), so a consumer whose lease passed on can change nothing ([`queue`]
//! explains). The claim's fencing token for systems outside ZooKeeper is the `czxid` of the
//! lease it created: it grows with every claim of the task. Lease expiry and retry backoff are judged by
//! ZooKeeper's clock ([`clock`]), never by comparing two machines' clocks.
//!
//! # A first queue
//!
//! Open a [`Session`] (it connects, creates the queue's znodes under the root and keeps the
//! consumer's id across new sessions), publish an [`Envelope`] with [`Queue::publish`], and
//! run what is pending with a [`Handler`] of your own through [`process::run_on`], the call
//! the `process_events` function makes. A long-running consumer uses [`worker::Worker`]
//! instead.
//!
//! ```
//! use std::time::Duration;
//!
//! use event_bridge::{Config, Envelope, Handler, HandlerError, RunOptions, Session, Task};
//! use serde_json::json;
//!
//! /// Sends the invoice of the task's order.
//! struct SendInvoice;
//!
//! impl Handler for SendInvoice {
//!     async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
//!         let Some(order) = task.envelope.payload["order"].as_str() else {
//!             // Another try cannot help: the task goes to the dead letters now.
//!             return Err(HandlerError::Permanent("the payload names no order".into()));
//!         };
//!         println!("invoice of {order}, attempt {}", task.attempt());
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> event_bridge::Result<()> {
//! // ZOOKEEPER_CONNECTION_STRING, EVENT_BRIDGE_ROOT, LEASE_TIMEOUT_MS, … (README lists them).
//! let config = Config::from_env()?;
//! # // The example runs against the ZooKeeper at ZK_TEST_ADDRESS (make test starts one), in
//! # // a fresh chroot of its own.
//! # let mut config = config;
//! # let address = std::env::var("ZK_TEST_ADDRESS").unwrap_or_else(|_| "127.0.0.1:2181".into());
//! # let chroot = format!("/eb-doctests/{}", uuid::Uuid::new_v4());
//! # let zk = zookeeper_client::Client::connect(&address).await.expect("a ZooKeeper at ZK_TEST_ADDRESS");
//! # let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
//! # zk.mkdir(&chroot, &open).await.expect("the example's chroot");
//! # config.zookeeper = format!("{address}{chroot}");
//! let session = Session::open(config, "example", None).await?;
//!
//! let queue = session.queue();
//! let task = Envelope::new("invoice.send", json!({"order": "A-1042"}));
//! let name = queue.publish(&task).await?;
//! assert!(name.starts_with("task-"));
//!
//! // Claim and run up to 10 tasks, 4 at a time, and stop claiming 2 s before the deadline.
//! let options = RunOptions {
//!     max_tasks: 10,
//!     concurrency: 4,
//!     deadline: tokio::time::Instant::now() + Duration::from_secs(30),
//!     margin: Duration::from_secs(2),
//! };
//! let report = event_bridge::process::run_on(&session, &SendInvoice, &options).await?;
//! assert_eq!((report.claimed, report.completed), (1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! The queue core (no cargo feature needed):
//!
//! - [`config`]: every setting, from environment variables, in one place.
//! - [`layout`]: the znode paths, compatible with the 000 design.
//! - [`task`]: the task envelope and how a body is read (envelope, plain JSON, poison).
//! - [`lease`]: lease data and the pure rules: expiry, extension interval, backoff.
//! - [`limit`]: per-route limits (`max_in_flight`, `rate`) and the arithmetic of admitting.
//! - [`clock`]: ZooKeeper's time, read from an `mtime`.
//! - [`session`]: a queue on a live session, connecting and the one retry policy.
//! - [`lane`]: a task's priority and the lane it waits in; [`segment`]: a text as one znode
//!   name and back.
//! - [`queue`]: the core on ZooKeeper (publish, claim, extend, release, end: complete or
//!   bury), and the features beside it as recipes, each reached from the queue
//!   (`queue.groups()`, `queue.idempotency_keys()`, `queue.batches()`, `queue.dependencies()`, …).
//! - [`batch`]: what a batch is (its counters, its callback); [`cancel`]: cancelling one task
//!   by name, id or key.
//! - [`handler`]: the [`Handler`] trait and the built-in handlers; `handler_error`: why a
//!   handler did not finish a task ([`HandlerError`], re-exported by `handler`).
//! - [`task_result`]: what a handler answered, kept in the completion record (`KEEP_DONE`).
//! - [`progress`]: a running handler's progress, carried by its lease's extensions.
//! - [`feature`]: the hook interface: what a feature is to the core (its hooks at publish,
//!   claim, the end, in `explain`, in the reaper's upkeep, and when the core looks for a task
//!   that left the queue), and the registry of features the core iterates.
//! - [`features`]: the features that join through those hooks, a folder each, and the one
//!   list of them ([`features::registered`]).
//! - [`resume`]: resumable tasks: steps that run once, durable sleeps, waits for signals
//!   (the signals themselves are the `queue.signals()` recipe).
//! - [`process`]: `process_events`' run: claim oldest first, run, settle, within a deadline.
//! - [`reap`]: `reap_leases`' run.
//! - [`dead`]: the dead letters (list, show, redrive, purge) and the [`dead::DeadLetterSink`].
//! - [`run_hook`]: what a feature does beside a run, with the whole queue at hand (the hooks
//!   a run calls at its start: the schedules' due slots).
//! - [`done_record`]: a completed task's record (`KEEP_DONE`): its format, and how one is
//!   found by name or id; written and swept by its feature (`features/done_records/`).
//! - [`state`]: a task's states and the transitions between them, the one list.
//! - [`stats`]: depth, leases, dead letters, the oldest task's age.
//! - [`doctor`]: what a deployment gets wrong, a check per line with its fix (`event-bridge
//!   doctor`): servers, root, ACLs, clock, reaper, leases' versions; with the sinks' features,
//!   routes and sinks; the secrets needed.
//! - [`inspect`]: pending tasks with their leases, one task's status, counts by type.
//! - [`kick`]: after a publish, a drain kicked through process_events' HTTP trigger,
//!   coalesced through the `kick` znode (`EVENT_BRIDGE_KICK=on`).
//! - [`worker`]: a long-running consumer driven by ZooKeeper watches.
//! - [`run_metrics`]: what runs record through the `metrics` facade (a no-op until a
//!   program installs a recorder; feature `prometheus` serves them at `/metrics`).
//! - [`traces`]: the spans of a task's life (publish, each attempt, each webhook request),
//!   exported over OTLP with feature `otel` and an endpoint in the environment; none without.
//! - [`secret`], [`quoted`], [`error`]: leaves: a value that is never shown, a value quoted
//!   short for a message, and the one error type.
//!
//! Behind cargo features:
//!
//! - `sink` (with `http` and/or `sqs`): where tasks go: routes from event type to an HTTP
//!   webhook or an SQS queue, and the SQS dead-letter queue.
//! - `logs` (feature `telemetry`): JSON logs by Lambda's conventions; with feature `otel`,
//!   also the OpenTelemetry layer that exports `traces`' spans.
//! - `schedule`: recurring schedules, cron patterns in time zones (croner, chrono-tz): the
//!   feature `features/schedules/`, re-exported as `recurrence` (what a schedule is) and
//!   `schedule` (firing its slots), where earlier versions had them.
//! - `dashboard`: `event-bridge serve`'s web pages and `/metrics` (axum, maud).
//! - `cli` (default): the `event-bridge` command, with every sink and the dashboard.
//!
//! Tests only: `proptests` (what reads bytes written by others never panics, and reads back
//! what we write); `fixes` (every user-facing error names its fix: the one list).

#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (shared/Cargo.toml): each item behind a cargo feature
// is shown with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod batch;
pub mod cancel;
pub mod clock;
pub mod config;
#[cfg(feature = "dashboard")]
pub mod dashboard;
pub mod dead;
pub mod doctor;
pub mod done_record;
pub mod error;
pub mod feature;
pub mod features;
pub mod handler;
mod handler_error;
pub mod inspect;
pub mod kick;
pub mod lane;
pub mod layout;
pub mod lease;
pub mod limit;
pub mod process;
pub mod progress;
pub mod queue;
pub mod quoted;
pub mod reap;
pub mod resume;
pub mod run_hook;
pub mod run_metrics;
pub mod secret;
pub mod segment;
pub mod session;
pub mod state;
pub mod stats;
pub mod task;
pub mod task_result;
pub mod traces;
pub mod worker;

#[cfg(any(feature = "http", feature = "sqs"))]
pub mod sink;

#[cfg(test)]
mod fixes;
#[cfg(feature = "telemetry")]
pub mod logs;
#[cfg(test)]
mod proptests;

pub use config::Config;
pub use error::{CutShort, Error, Result};
pub use handler::{Builtin, Handler, HandlerError};
pub use process::{ProcessReport, RunOptions};
pub use progress::Progress;
pub use queue::Queue;
pub use reap::ReapReport;
pub use resume::Steps;
pub use secret::Secret;
pub use session::Session;
pub use task::{Envelope, Task};
pub use task_result::TaskResult;

/// The features a [`Queue`] calls unless given others ([`Queue::with_features`]): the one list
/// in `features/`, wired in here at the crate's root, so that no module of the core names a
/// feature (`shared/tests/module_graph.rs` checks it).
pub(crate) fn registered_features(config: &Config) -> feature::Features {
    features::registered(config)
}

/// The hooks a run calls beside its work ([`run_hook`]): the one list in `features/`, wired in
/// here for the same reason.
pub(crate) fn run_hooks() -> &'static [run_hook::Registered] {
    features::RUN_HOOKS
}

/// The folder each of [`run_hooks`] watches (`Registered::watched`), read once.
pub(crate) fn run_hooks_watch() -> &'static [Option<&'static str>] {
    static WATCHED: std::sync::OnceLock<Vec<Option<&'static str>>> = std::sync::OnceLock::new();
    WATCHED.get_or_init(|| run_hooks().iter().map(|hook| hook.watched).collect())
}

/// Recurring schedules, where earlier versions had them.
#[cfg(feature = "schedule")]
pub use features::schedules::{fire as schedule, recurrence};

#[cfg(test)]
mod layout_doc;
