//! The reaper ran recently: every reaper run (`reap_leases`, `event-bridge reap`, a worker's
//! upkeep) keeps its audit's record in `ROOT/audit`, stamped with ZooKeeper's time; its age
//! against the reaper's schedule says whether one runs.
//!
//! Without a reaper the leases of consumers that died are never freed: their tasks stay held
//! for good, and nothing else says so.

use std::time::Duration;

use super::Check;
use crate::clock::ZkTime;
use crate::queue::Queue;
use crate::stats::AuditRecord;

/// Fails when no run is recorded, or the last one is older than twice `every`.
pub(super) async fn check(queue: &Queue, now: &ZkTime, every: Duration) -> Check {
    let path = queue.layout().audit();
    let schedule = format!(
        "schedule reap_leases every {} (template.yaml and vercel.json do), or run a worker; \
         `event-bridge reap` runs it once now",
        minutes(every.as_millis() as i64)
    );
    let record = match queue.read_path(&path).await {
        Ok(Some((data, _))) => AuditRecord::parse(&path, &data),
        Ok(None) => {
            let detail = format!("no reaper run recorded (no {path})");
            return Check::fail("reaper", detail, schedule);
        }
        Err(e) => Err(e),
    };
    let record = match record {
        Ok(record) => record,
        Err(e) => {
            let fix = format!("delete {path} (the next reaper run writes it again)");
            return Check::fail("reaper", e.to_string(), fix);
        }
    };
    judge(&record, now.now_ms(), every, &schedule)
}

fn judge(record: &AuditRecord, now_ms: i64, every: Duration, schedule: &str) -> Check {
    let age = now_ms.saturating_sub(record.at_ms).max(0);
    let every_ms = every.as_millis() as i64;
    let ran = format!("last run {} ago", minutes(age));
    if age > 2 * every_ms {
        let detail = format!("{ran}, expected every {}", minutes(every_ms));
        return Check::fail("reaper", detail, format!("check its logs and {schedule}"));
    }
    match record.stuck_tasks {
        0 => Check::pass("reaper", format!("{ran}; its audit found nothing stuck")),
        n => Check::warn(
            "reaper",
            format!("{ran}; its audit found {n} stuck states"),
            "run `event-bridge stats` for each one's line and what lets it go",
        ),
    }
}

/// `ms` in minutes and seconds, for a line.
fn minutes(ms: i64) -> String {
    let seconds = ms / 1_000;
    match (seconds / 60, seconds % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    #[test]
    fn a_run_older_than_two_periods_fails() {
        let every = Duration::from_secs(300);
        let record = |at_ms, stuck_tasks| AuditRecord {
            at_ms,
            stuck_tasks,
            ..AuditRecord::default()
        };
        let at = |age_ms: i64| judge(&record(1_000_000 - age_ms, 0), 1_000_000, every, "s");
        assert_eq!(at(0).status, Status::Pass);
        assert_eq!(at(600_000).status, Status::Pass);
        assert_eq!(at(600_001).status, Status::Fail);
        assert!(
            at(720_000)
                .detail
                .contains("last run 12m ago, expected every 5m")
        );
        let stuck = judge(&record(1_000_000, 2), 1_000_000, every, "s");
        assert_eq!(stuck.status, Status::Warn);
        assert_eq!(minutes(61_000), "1m1s");
    }
}
