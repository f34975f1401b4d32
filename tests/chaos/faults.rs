//! The faults, at fixed offsets from the start of publishing, all concurrent with it: workers,
//! drains and a scheduled run SIGKILLed, workers SIGSTOPped for longer than the lease timeout
//! (and the session timeout: the frozen worker's session expires, so this is also the
//! session-expiry fault), the ZooKeeper leader SIGKILLed and started again. A soak repeats the
//! schedule every five minutes, without the worker kills (a worker keeps its process, so
//! that its memory can be followed).
//!
//! A fault on a consumer first waits (up to five seconds) for a moment when its victim has held
//! a task for a while (one of the slow deliveries), so that it catches the victim at work.
//! Then the victim is frozen (SIGSTOP) and given a moment for what it had already sent to
//! land; `leases/` is read and the leases whose `consumerId` is the victim's are counted: the
//! most tasks its death or pause can have delivered without completing. Only then is it
//! killed. At a leader kill every lease is counted.

use std::time::Duration;

use tokio::time::Instant;

use crate::consumers::{Launcher, Loop, Victim, WorkerSlot, signal};
use crate::ensemble::Ensemble;
use crate::tree::Tree;

/// A killed worker or ZooKeeper server is started again this long after.
const WORKER_RESTART: Duration = Duration::from_secs(3);
const SERVER_RESTART: Duration = Duration::from_secs(5);
/// Longer than the lease timeout (10 s): the paused worker's leases are reaped meanwhile.
pub const PAUSE: Duration = Duration::from_secs(15);
/// Between freezing a victim and reading the leases, for its requests in flight to land.
const FROZEN_SETTLE: Duration = Duration::from_millis(300);
/// How long a fault waits for its victim to hold a task.
const AT_WORK_WAIT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    KillWorker(usize),
    KillDrain(usize),
    KillScheduled,
    PauseWorker(usize),
    KillLeader,
}

/// Milliseconds after publishing starts, and what happens then. Consumers are hit before the
/// first leader change too, while every worker surely has its watch.
const FIRST: [(u64, Fault); 8] = [
    (1_500, Fault::KillWorker(0)),
    (3_000, Fault::PauseWorker(1)),
    (4_000, Fault::KillDrain(0)),
    (9_000, Fault::KillWorker(0)),
    (11_000, Fault::KillLeader),
    (13_000, Fault::KillDrain(1)),
    (19_000, Fault::KillLeader),
    (26_000, Fault::KillLeader),
];

/// After the first half minute, while the type is paused and after (see `main`'s
/// `PAUSE_AT`): the other worker killed, the first one frozen, a scheduled run killed.
const SECOND: [(u64, Fault); 5] = [
    (36_000, Fault::KillWorker(1)),
    (44_000, Fault::PauseWorker(0)),
    (47_000, Fault::KillScheduled),
    (52_000, Fault::KillLeader),
    (58_000, Fault::KillDrain(0)),
];

/// A soak's cycle.
pub const CYCLE: Duration = Duration::from_secs(300);

/// The faults of a run whose publishing lasts `length`: every fault of [`FIRST`] and
/// [`SECOND`] that starts 5 s before its end or earlier; in a soak, again every [`CYCLE`],
/// without the worker kills.
pub fn schedule(length: Duration, soak: bool) -> Vec<(Duration, Fault)> {
    let fits = |at: Duration| at + Duration::from_secs(5) <= length;
    let mut all: Vec<(Duration, Fault)> = (FIRST.iter().chain(&SECOND))
        .map(|&(ms, f)| (Duration::from_millis(ms), f))
        .filter(|&(at, _)| fits(at))
        .collect();
    if soak {
        let mut cycle = CYCLE;
        while fits(cycle) {
            all.extend(
                (FIRST.iter().chain(&SECOND))
                    .filter(|(_, f)| !matches!(f, Fault::KillWorker(_)))
                    .map(|&(ms, f)| (cycle + Duration::from_millis(ms), f))
                    .filter(|&(at, _)| fits(at)),
            );
            cycle += CYCLE;
        }
    }
    all
}

/// One fault as it happened.
pub struct Record {
    /// Since publishing started.
    pub at: Duration,
    pub fault: Fault,
    pub what: String,
    /// Tasks held by the victim (every lease, at a leader kill).
    pub held: usize,
    /// Every lease at that moment.
    pub leases: usize,
    /// The tasks a killed or frozen consumer held: name and envelope id (none at a leader
    /// kill).
    pub victim_held: Vec<(String, String)>,
    /// The victim's consumer id, once it had claimed a task.
    pub consumer: Option<String>,
}

/// What the faults act on.
pub struct Stage<'a> {
    pub tree: &'a Tree,
    pub ensemble: &'a Ensemble,
    pub launcher: &'a Launcher,
    pub workers: &'a [WorkerSlot],
    pub drains: &'a [Loop],
    pub scheduled: &'a Loop,
}

/// Runs `schedule` from `start`; returns when every fault, restarts included, is over.
pub async fn run(stage: &Stage<'_>, start: Instant, schedule: &[(Duration, Fault)]) -> Vec<Record> {
    let each = schedule.iter().map(|&(at, fault)| async move {
        harness::real_time(
            start + at,
            "each fault at its planned moment in the traffic",
        )
        .await;
        stage.apply(fault, start).await
    });
    let mut records = futures::future::join_all(each).await;
    records.sort_by_key(|r| r.at);
    records
}

impl Stage<'_> {
    async fn apply(&self, fault: Fault, start: Instant) -> Record {
        match fault {
            Fault::KillWorker(i) => self.kill_worker(i, start).await,
            Fault::KillDrain(i) => {
                let what = format!("process --drain #{i}");
                self.kill_loop(&self.drains[i], &what, fault, start).await
            }
            Fault::KillScheduled => {
                let name = "process (scheduled run)";
                self.kill_loop(self.scheduled, name, fault, start).await
            }
            Fault::PauseWorker(i) => self.pause_worker(i, start).await,
            Fault::KillLeader => self.kill_leader(start).await,
        }
    }

    async fn kill_worker(&self, index: usize, start: Instant) -> Record {
        let slot = &self.workers[index];
        let victim = running_worker(slot).await;
        self.at_work(&victim).await;
        signal(victim.pid, "STOP");
        let (victim_held, leases, who) = self.held_by(&victim).await;
        slot.kill().await;
        let at = start.elapsed();
        let why = "the worker stays dead while the others take over its tasks";
        harness::real_time(WORKER_RESTART, why).await;
        slot.restart(self.launcher).await;
        let what = format!("SIGKILL worker-{index} ({who}), restarted after {WORKER_RESTART:?}");
        Record {
            at,
            fault: Fault::KillWorker(index),
            what,
            held: victim_held.len(),
            leases,
            victim_held,
            consumer: victim.consumer_id(),
        }
    }

    async fn kill_loop(&self, runs: &Loop, name: &str, fault: Fault, start: Instant) -> Record {
        let victim = running(runs).await;
        self.at_work(&victim).await;
        let frozen = runs.signal(&victim, "STOP");
        let (victim_held, leases, who) = self.held_by(&victim).await;
        runs.signal(&victim, "KILL");
        let at = start.elapsed();
        let (what, victim_held) = match frozen {
            true => (format!("SIGKILL {name} ({who})"), victim_held),
            false => (format!("{name} ({who}) ended before its kill"), Vec::new()),
        };
        Record {
            at,
            fault,
            what,
            held: victim_held.len(),
            leases,
            victim_held,
            consumer: victim.consumer_id(),
        }
    }

    async fn pause_worker(&self, index: usize, start: Instant) -> Record {
        let victim = running_worker(&self.workers[index]).await;
        self.at_work(&victim).await;
        signal(victim.pid, "STOP");
        let (victim_held, leases, who) = self.held_by(&victim).await;
        let at = start.elapsed();
        let why = "the worker stays frozen past its lease and its session";
        harness::real_time(PAUSE - FROZEN_SETTLE, why).await;
        signal(victim.pid, "CONT");
        let what = format!(
            "SIGSTOP worker-{index} ({who}) for {PAUSE:?} (past its lease and its {:?} session), then SIGCONT",
            crate::tree::SESSION_TIMEOUT
        );
        Record {
            at,
            fault: Fault::PauseWorker(index),
            what,
            held: victim_held.len(),
            leases,
            victim_held,
            consumer: victim.consumer_id(),
        }
    }

    async fn kill_leader(&self, start: Instant) -> Record {
        // Never two servers down at once: that would stop the ensemble, not test a failover.
        self.ensemble.wait_serving(Duration::from_secs(60)).await;
        let leader = self.ensemble.leader().await.expect("a leader serves");
        let leases = self.tree.leases().await.len();
        self.ensemble.kill(leader);
        let at = start.elapsed();
        let why = "the ensemble runs without its old leader";
        harness::real_time(SERVER_RESTART, why).await;
        self.ensemble.restart(leader);
        let id = self.ensemble.id(leader);
        let what =
            format!("SIGKILL ZooKeeper leader (server {id}), restarted after {SERVER_RESTART:?}");
        Record {
            at,
            fault: Fault::KillLeader,
            what,
            held: leases,
            leases,
            victim_held: Vec::new(),
            consumer: None,
        }
    }

    /// Waits until `victim` holds a task it already held a poll before (200 ms), for
    /// [`AT_WORK_WAIT`] at most.
    async fn at_work(&self, victim: &Victim) {
        let deadline = Instant::now() + AT_WORK_WAIT;
        let mut before = Vec::new();
        while Instant::now() < deadline {
            let held: Vec<String> = match victim.consumer_id() {
                Some(id) => (self.tree.leases().await.into_iter())
                    .filter(|l| l.consumer == id)
                    .map(|l| l.task)
                    .collect(),
                None => Vec::new(),
            };
            if held.iter().any(|task| before.contains(task)) {
                return;
            }
            before = held;
            let why = "a task still held a look later is being worked on";
            harness::real_time(Duration::from_millis(200), why).await;
        }
    }

    /// With `victim` frozen: the tasks it holds (name and envelope id), every lease, and its
    /// consumer id.
    async fn held_by(&self, victim: &Victim) -> (Vec<(String, String)>, usize, String) {
        let why = "what the frozen consumer had in flight lands first";
        harness::real_time(FROZEN_SETTLE, why).await;
        let leases = self.tree.leases().await;
        let Some(id) = victim.consumer_id() else {
            return (Vec::new(), leases.len(), "no claim yet".into());
        };
        let names: Vec<String> = (leases.iter())
            .filter(|l| l.consumer == id)
            .map(|l| l.task.clone())
            .collect();
        let held = self.tree.task_ids(&names).await;
        (held, leases.len(), id)
    }
}

/// The worker `slot` runs, once it runs: an earlier fault on it may still be waiting to
/// start it again (its victim can take up to [`AT_WORK_WAIT`] to be caught at work).
async fn running_worker(slot: &WorkerSlot) -> Victim {
    let limit = AT_WORK_WAIT + WORKER_RESTART + Duration::from_secs(5);
    let started = harness::poll(limit, || slot.victim()).await;
    started.expect("the worker was not started again")
}

/// The process a loop runs now, preferably one that has claimed a task already: waits up to
/// five seconds for one, then takes any, waiting up to five more for the loop to start one.
async fn running(drain: &Loop) -> Victim {
    let five = Duration::from_secs(5);
    let claimed = || async { drain.victim().filter(|v| v.consumer_id().is_some()) };
    if let Some(victim) = harness::poll(five, claimed).await {
        return victim;
    }
    let any = harness::poll(five, || async { drain.victim() }).await;
    any.expect("the loop ran no process for ten seconds")
}
