//! The run's figures, printed (with `--nocapture`), and the verdict on them.

use std::process::ExitStatus;
use std::time::Duration;

use crate::consumers::LoopReport;
use crate::faults::Record;
use crate::logs::LogScan;
use crate::producer::Published;
use crate::receiver::Tally;

/// What was left in ZooKeeper after the consumers stopped.
pub struct Left {
    pub tasks: usize,
    pub leases: usize,
    /// Tasks waiting under `delayed/`'s buckets.
    pub delayed: usize,
    pub dead: usize,
}

pub struct Timings {
    pub ensemble: Duration,
    pub publishing: Duration,
    /// From the end of the faults and publishing until every task was delivered.
    pub settling: Duration,
    pub total: Duration,
}

pub struct Outcome {
    pub rate: f64,
    /// Every task delivered and the tree empty before the settling guard ran out.
    pub settled: bool,
    pub published: Published,
    pub tally: Tally,
    pub left: Left,
    pub faults: Vec<Record>,
    pub workers: Vec<Option<ExitStatus>>,
    pub drains: Vec<LoopReport>,
    pub reaps: LoopReport,
    pub logs: LogScan,
    /// Sessions that ZooKeeper's servers say watch `tasks/` once the queue settled: one per
    /// worker when every worker's watch survived the faults. Printed, not judged (see
    /// `print`).
    pub watching: usize,
    pub timings: Timings,
}

impl Outcome {
    /// Duplicates that the faults can explain: the tasks victims held when killed or paused,
    /// every lease at a leader kill, and envelopes the producer sent twice.
    pub fn allowed_duplicates(&self) -> u64 {
        let held: usize = self.faults.iter().map(|f| f.held).sum();
        (held + self.published.resent) as u64
    }

    pub fn print(&self) {
        let (p, t, l) = (&self.published, &self.tally, &self.left);
        println!(
            "\n== chaos: {} tasks at {}/s, 3 ZooKeeper servers, 2 workers x8, 2 drain loops, a reap loop",
            p.ids.len(),
            self.rate
        );
        println!(
            "published   {:>7}  (failed publish calls sent again: {}, envelopes in them: {})",
            p.ids.len(),
            p.retries,
            p.resent
        );
        println!("delivered   {:>7}", t.delivered);
        println!(
            "duplicates  {:>7}  (allowed: {})",
            t.duplicates,
            self.allowed_duplicates()
        );
        println!("lost        {:>7}", t.lost.len());
        println!("dead        {:>7}", l.dead);
        println!(
            "violations  {:>7}  (requests with a fencing token below one already delivered; \
             on ids maybe published twice, not judged: {})",
            t.violations.len(),
            t.exempt
        );
        println!(
            "left        tasks/ {}, leases/ {}, delayed/ {}; malformed requests {}, unknown ids {}",
            l.tasks, l.leases, l.delayed, t.malformed, t.strangers
        );
        for v in t.violations.iter().take(10) {
            println!(
                "  violation: id {} ({}) token {} after {}, arrived {} UTC",
                v.id,
                v.task,
                v.token,
                v.highest,
                v.arrived()
            );
        }
        println!("faults (at, what, tasks the victim held / every lease then):");
        for f in &self.faults {
            println!(
                "  +{:>5.1}s  {:<90} held {:>3} / {:>3}",
                f.at.as_secs_f64(),
                f.what,
                f.held,
                f.leases
            );
        }
        self.print_consumers();
        let tm = &self.timings;
        println!(
            "time: ensemble formed in {:.1}s, publishing {:.1}s, settling {:.1}s, whole test {:.1}s",
            tm.ensemble.as_secs_f64(),
            tm.publishing.as_secs_f64(),
            tm.settling.as_secs_f64(),
            tm.total.as_secs_f64()
        );
    }

    fn print_consumers(&self) {
        let runs =
            |r: &LoopReport| format!("{} runs ({} killed, {} failed)", r.runs, r.killed, r.failed);
        let drains: Vec<_> = self.drains.iter().map(runs).collect();
        let exits: Vec<_> = (self.workers.iter())
            .map(|s| s.map_or("still running after the guard".into(), |s| s.to_string()))
            .collect();
        println!("workers stopped by SIGTERM: {}", exits.join(", "));
        println!(
            "drain loops: {}; reap loop: {}",
            drains.join(", "),
            runs(&self.reaps)
        );
        let claims: Vec<_> = (self.logs.claims.iter())
            .map(|(who, n)| format!("{who} {n}"))
            .collect();
        println!("claims: {}", claims.join(", "));
        println!(
            "sessions watching tasks/ at the end: {} of {} workers{}",
            self.watching,
            self.workers.len(),
            if self.watching < self.workers.len() {
                " (a worker's watch was lost: it only looks every 5 s)"
            } else {
                ""
            }
        );
        println!("warnings in the consumers' logs:");
        for (message, count) in &self.logs.warnings {
            println!("  {count:>6}  {message}");
        }
    }

    /// Fails the test on anything a fault must not cause.
    pub fn check(&self) {
        let (t, l) = (&self.tally, &self.left);
        assert!(
            self.settled,
            "the queue did not settle within the guard (see the figures above)"
        );
        assert!(
            t.lost.is_empty(),
            "{} tasks never delivered, e.g. {:?}",
            t.lost.len(),
            &t.lost[..t.lost.len().min(5)]
        );
        assert_eq!(
            (l.tasks, l.leases, l.delayed),
            (0, 0, 0),
            "tasks/, leases/ and delayed/ must end empty"
        );
        assert_eq!(
            l.dead, 0,
            "the receiver never fails, so nothing may be dead-lettered"
        );
        assert!(
            t.violations.is_empty(),
            "stale holders delivered: {:?}",
            t.violations
        );
        assert!(
            self.logs.panics.is_empty(),
            "a consumer panicked: {:#?}",
            self.logs.panics
        );
        assert_eq!(
            (t.malformed, t.strangers),
            (0, 0),
            "requests the sink should not have sent"
        );
        assert!(
            t.duplicates <= self.allowed_duplicates(),
            "{} duplicates, more than the {} the faults explain",
            t.duplicates,
            self.allowed_duplicates()
        );
        for status in &self.workers {
            assert!(
                status.is_some_and(|s| s.success()),
                "a worker did not stop cleanly on SIGTERM: {status:?}"
            );
        }
        assert_eq!(
            self.watching,
            self.workers.len(),
            "every worker still watches tasks/ after the reconnects (else it only polls)"
        );
    }
}
