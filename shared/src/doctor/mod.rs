//! `event-bridge doctor`: what a new deployment gets wrong, checked one thing at a time, each
//! failure with its fix.
//!
//! The checks, in the order they are reported (a file each):
//!
//! - `config`: the environment reads as a [`Config`] (here, in [`run`]).
//! - `hosts`: every server of `ZOOKEEPER_CONNECTION_STRING` opens a session alone.
//! - `root`: the chroot and `EVENT_BRIDGE_ROOT` exist, and the root holds a queue.
//! - `acl`: the root and its base paths grant these credentials what the bridge needs.
//! - `clock`: this machine's clock against ZooKeeper's.
//! - `reaper`: the reaper ran recently (the age of its audit record, `ROOT/audit`).
//! - `leases`: the versions of the consumers holding leases now.
//! - `routes`: the route table parses (with the sinks' own parser); `sinks`: each sink
//!   answers (features `http`, `sqs`).
//! - `secrets`: the secrets this configuration needs are set.
//!
//! The ZooKeeper checks read, and write one znode only: `ROOT/clock`, which every consumer
//! touches to read ZooKeeper's time. Every wait is bounded: a server by the connect timeout, a
//! sink by its route's timeout (at most [`SINK_TIMEOUT`]).

mod acl;
mod check;
mod clock;
mod hosts;
mod leases;
mod reaper;
mod root;
#[cfg(any(feature = "http", feature = "sqs"))]
mod routes;
mod secrets;
#[cfg(any(feature = "http", feature = "sqs"))]
mod sinks;

use std::time::Duration;

pub use check::{Check, Report, Status};
pub use secrets::Platform;

use crate::config::Config;
use crate::queue::Queue;

/// The longest a sink is given to answer.
pub const SINK_TIMEOUT: Duration = Duration::from_secs(10);

/// The reaper's schedule in the deployments this repository ships (`template.yaml`,
/// `vercel.json`): every five minutes.
pub const REAPER_EVERY: Duration = Duration::from_secs(300);

/// What the checks are told besides the configuration.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the deployment runs, which decides the secrets it needs; `None`: told by the
    /// environment (`VERCEL`, `AWS_LAMBDA_FUNCTION_NAME`), else not known.
    pub platform: Option<Platform>,
    /// How often the reaper is scheduled: a last run older than twice this fails.
    pub reaper_every: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            platform: None,
            reaper_every: REAPER_EVERY,
        }
    }
}

/// Runs every check against the configuration `lookup` reads (the process environment, in
/// the command), and reports each.
pub async fn run(lookup: &(dyn Fn(&str) -> Option<String> + Sync), options: &Options) -> Report {
    let config = match Config::from_lookup(lookup) {
        Ok(config) => config,
        Err(e) => {
            let fix = "correct that variable, then run `event-bridge doctor` again";
            return Report::of(vec![Check::fail("config", e.to_string(), fix)]);
        }
    };
    let mut checks = vec![Check::pass(
        "config",
        format!("the environment reads: root {}", config.root),
    )];
    let (zookeeper, config_checks) = tokio::join!(
        zookeeper_checks(&config, options),
        config_checks(&config, lookup, options)
    );
    checks.extend(zookeeper);
    checks.extend(config_checks);
    Report::of(checks)
}

/// The checks that ask ZooKeeper: each server alone, then, on one session, the root, its
/// ACLs, the clock, the reaper and the leases.
async fn zookeeper_checks(config: &Config, options: &Options) -> Vec<Check> {
    let mut checks = hosts::check(config).await;
    let queue = match crate::session::open(config).await {
        Ok(client) => Queue::new(client, config, Queue::new_consumer_id("doctor")),
        Err(e) => {
            let why = format!("no session with {}: {e}", config.zookeeper);
            checks.extend(skipped(&["root", "acl", "clock", "reaper", "leases"], &why));
            return checks;
        }
    };
    let root = root::check(&queue, config).await;
    let found = root.status != Status::Fail;
    checks.push(root);
    if !found {
        checks.extend(skipped(
            &["acl", "clock", "reaper", "leases"],
            "the root is missing",
        ));
        return checks;
    }
    checks.push(acl::check(&queue, config).await);
    let (clock, now) = clock::check(&queue, config).await;
    checks.push(clock);
    match now {
        Some(now) => checks.push(reaper::check(&queue, &now, options.reaper_every).await),
        None => checks.push(Check::skip("reaper", "ZooKeeper's time could not be read")),
    }
    checks.push(leases::check(&queue).await);
    checks
}

/// Checks that could not run, and why.
fn skipped(names: &[&'static str], why: &str) -> Vec<Check> {
    names.iter().map(|name| Check::skip(name, why)).collect()
}

/// The checks of the configuration alone: the routes, their sinks, the secrets.
async fn config_checks(
    config: &Config,
    lookup: &(dyn Fn(&str) -> Option<String> + Sync),
    options: &Options,
) -> Vec<Check> {
    let platform = options
        .platform
        .or_else(|| Platform::from_environment(lookup));
    #[cfg(any(feature = "http", feature = "sqs"))]
    {
        let routes = routes::check(config, lookup);
        let mut checks = vec![routes.check];
        checks.extend(sinks::check(config, routes.table.as_ref()).await);
        checks.extend(secrets::check(config, &routes.unset, platform));
        checks
    }
    #[cfg(not(any(feature = "http", feature = "sqs")))]
    {
        let mut checks = vec![Check::skip(
            "routes",
            "built without sinks (cargo features http, sqs)",
        )];
        checks.extend(secrets::check(config, &[], platform));
        checks
    }
}
