//! Fault injection on real parts only: a three-server ZooKeeper ensemble on loopback, the
//! `event-bridge` binary as workers, drains and a reaper, and an HTTP receiver that checks
//! fencing tokens. While a producer publishes, consumers are SIGKILLed, a worker is frozen for
//! longer than its lease, and the ZooKeeper leader is killed; afterwards every task must have
//! been delivered, nothing may be left or dead, no stale holder may have delivered, and the
//! duplicates must be no more than what the victims held.
//!
//! Size: `CHAOS_TASKS` (1500) at `CHAOS_RATE` a second (50); `make chaos` runs 10 000 at 200/s
//! and prints the figures. Needs Debian's zookeeper package and the binaries
//! (`cargo build --workspace --bins`), not the ZooKeeper of the other tests.

mod consumers;
mod ensemble;
mod faults;
mod logs;
mod producer;
mod receiver;
mod scratch;
mod summary;
mod tree;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use consumers::{Launcher, Loop, WorkerSlot};
use ensemble::Ensemble;
use receiver::Receiver;
use scratch::Scratch;
use summary::{Left, Outcome, Timings};
use tree::Tree;

/// Once publishing and the faults are over, every task must be delivered within this (a hang
/// guard, not a speed claim).
const SETTLE_GUARD: Duration = Duration::from_secs(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_is_lost_or_delivered_by_a_stale_holder_under_kills_pauses_and_leader_changes() {
    let began = Instant::now();
    let (tasks, rate) = (
        env_or("CHAOS_TASKS", 1500.0) as usize,
        env_or("CHAOS_RATE", 50.0),
    );
    let scratch = Scratch::new();
    let ensemble = Ensemble::start(&scratch).await;
    let formed = began.elapsed();
    let tree = Tree::create(&ensemble.hosts()).await;
    let receiver = Receiver::start().await;
    let launcher = Arc::new(Launcher::new(
        &tree.config.zookeeper,
        &receiver.url(),
        &scratch,
    ));
    let workers = [
        WorkerSlot::start(&launcher, 0),
        WorkerSlot::start(&launcher, 1),
    ];
    let mut drains = [
        Loop::drain(launcher.clone(), 0),
        Loop::drain(launcher.clone(), 1),
    ];
    let mut reaper = Loop::reap(launcher.clone());

    let start = Instant::now();
    let stage = faults::Stage {
        tree: &tree,
        ensemble: &ensemble,
        launcher: &launcher,
        workers: &workers,
        drains: &drains,
    };
    let (published, faults) = tokio::join!(
        producer::publish(&tree.config, tasks, rate, start),
        faults::run(&stage, start)
    );
    let settle_start = Instant::now();
    let settled = settle(&receiver, &tree, &published.ids).await;
    let settling = settle_start.elapsed();
    let publishing = published.took;

    let watching = ensemble.watchers(&tree.server_path("tasks")).await;
    let mut stopped = Vec::new();
    for worker in &workers {
        stopped.push(worker.stop().await);
    }
    let drains = [drains[0].stop().await, drains[1].stop().await];
    let reaps = reaper.stop().await;
    let left = Left {
        tasks: tree.count("tasks").await,
        leases: tree.count("leases").await,
        delayed: tree.delayed().await,
        dead: tree.count("dead").await,
    };
    let outcome = Outcome {
        rate,
        settled,
        tally: receiver.tally(&published.ids, &published.uncertain),
        published,
        left,
        faults,
        workers: stopped,
        drains: drains.to_vec(),
        reaps,
        logs: logs::scan(&launcher.logs()),
        watching,
        timings: Timings {
            ensemble: formed,
            publishing,
            settling,
            total: began.elapsed(),
        },
    };
    outcome.print();
    outcome.check();
}

/// Waits until every id was delivered and `tasks/`, `leases/` and `delayed/` are empty, or
/// until they stayed empty for three polls in a row (nothing is left that could still be
/// delivered: what is missing is lost, and the checks say so). False after the guard.
async fn settle(receiver: &Receiver, tree: &Tree, ids: &[String]) -> bool {
    let deadline = Instant::now() + SETTLE_GUARD;
    let mut empty_polls = 0;
    while Instant::now() < deadline {
        let empty = tree.count("tasks").await == 0
            && tree.count("leases").await == 0
            && tree.delayed().await == 0;
        empty_polls = if empty { empty_polls + 1 } else { 0 };
        if (empty && receiver.delivered(ids) == ids.len()) || empty_polls >= 3 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// A number from the environment, or `default`.
fn env_or(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
        Err(_) => default,
    }
}
