//! No tight re-claim loop: a resumable task given back to resume at once "in another run" (a
//! webhook's `202 {"checkpoint": …}`) is never claimed again by the run that gave it back. A
//! refilling run (a worker's drain, which lasts as long as tasks keep coming) may take it again
//! once it left it to the others for [`TAKE_AGAIN_AFTER`]; a `process` run never does. (It
//! used to be claimed again in the same drain at once, hundreds of times.)
//!
//! Judged from the consumers' logs by order: each release (`released to resume in another
//! run`) against the later claims (`task claimed`) of its task in the same log, by the same
//! run. The worker's wait is the only time in it, and only as a floor, on one clock (one
//! process's log): a slow machine makes the gap longer, never shorter.

use std::time::Duration;

use crate::logs::{Claim, Released};

/// How long a refilling run leaves a task it gave back to another run before it takes it
/// again itself (the queue's `process::TAKE_AGAIN_AFTER`, held equal to this).
pub const TAKE_AGAIN_AFTER: Duration = event_bridge::worker::WORKER_IDLE_CHECK;

/// The part of [`TAKE_AGAIN_AFTER`] a worker's log must show between the release and a claim
/// again: the run measures the wait on its monotonic clock, the log stamps the wall clock,
/// which may be slewed by a part in a thousand at most.
const CLOCK_SLEW: f64 = 0.999;

#[derive(Debug, Default)]
pub struct ReclaimFigures {
    /// Tasks released to resume in another run.
    pub released: usize,
    /// Taken again by the worker's run that released them, after its wait (allowed).
    pub taken_again_late: usize,
    /// Claimed again by the run that released them (and, by a worker, before its wait).
    pub violations: Vec<String>,
}

/// Whether the log `log` is a refilling run's (a worker's).
fn refilling(log: &str) -> bool {
    log.starts_with("worker")
}

pub fn judge(released: &[Released], claims: &[Claim]) -> ReclaimFigures {
    let mut f = ReclaimFigures {
        released: released.len(),
        ..Default::default()
    };
    for release in released {
        let again = (claims.iter())
            .filter(|c| c.task == release.task && c.run == release.run)
            .filter(|c| c.at.log == release.at.log && c.at.line > release.at.line)
            .min_by_key(|c| c.at.line);
        let Some(again) = again else {
            continue;
        };
        let waited = Duration::from_millis((again.at_ms - release.at_ms).max(0) as u64);
        if refilling(&release.at.log)
            && waited.as_secs_f64() >= TAKE_AGAIN_AFTER.as_secs_f64() * CLOCK_SLEW
        {
            f.taken_again_late += 1;
            continue;
        }
        f.violations.push(format!(
            "{} released to another run by run {} ({} line {}), claimed again by it {:.3} s later (line {})",
            release.task,
            release.run,
            release.at.log,
            release.at.line,
            waited.as_secs_f64(),
            again.at.line
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::At;

    fn at(log: &str, line: usize) -> At {
        At {
            log: log.into(),
            line,
        }
    }

    fn claim(log: &str, line: usize, at_ms: i64, run: &str) -> Claim {
        Claim {
            at_ms,
            task: "t".into(),
            token: line as i64,
            by: log.into(),
            consumer: "c".into(),
            run: run.into(),
            at: at(log, line),
        }
    }

    fn release(log: &str, line: usize, at_ms: i64, run: &str) -> Released {
        Released {
            at: at(log, line),
            at_ms,
            task: "t".into(),
            run: run.into(),
            steps_done: 0,
        }
    }

    /// A drain that claims the task it released again breaks it, at once or later; another
    /// run's claim, or the same run's claim before the release, does not.
    #[test]
    fn a_run_never_claims_again_what_it_released_to_another() {
        let released = [release("drain-0", 10, 1_000, "r1")];
        let fine = [
            claim("drain-0", 5, 900, "r1"),
            claim("drain-1", 3, 1_010, "r2"),
            claim("drain-0", 20, 1_020, "r3"),
        ];
        assert!(judge(&released, &fine).violations.is_empty());
        let looped = [claim("drain-0", 11, 1_001, "r1")];
        assert_eq!(judge(&released, &looped).violations.len(), 1);
        let much_later = [claim("drain-0", 90, 60_000, "r1")];
        assert_eq!(judge(&released, &much_later).violations.len(), 1);
    }

    /// A worker's run may take it again once it waited, never sooner.
    #[test]
    fn a_workers_run_takes_it_again_only_after_its_wait() {
        let released = [release("worker-0", 10, 1_000, "w")];
        let wait = TAKE_AGAIN_AFTER.as_millis() as i64;
        let soon = [claim("worker-0", 11, 1_000 + wait / 2, "w")];
        assert_eq!(judge(&released, &soon).violations.len(), 1);
        let late = [claim("worker-0", 11, 1_000 + wait, "w")];
        let f = judge(&released, &late);
        assert!(f.violations.is_empty());
        assert_eq!(f.taken_again_late, 1);
    }
}
