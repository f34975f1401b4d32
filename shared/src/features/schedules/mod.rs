//! Recurring schedules (cargo feature `schedule`): a schedule ([`recurrence::Schedule`]) lives
//! in `ROOT/schedules/<name>` and makes a task at each of its slots; [`store`] holds its znodes
//! and why a slot makes its task once however many firers race, [`fire`] takes the slots that
//! are due and makes an operator's changes, [`timer`] fires them in a worker. Every `process`
//! run looks (so every scheduled `process_events` invocation, each minute), and the worker
//! looks at each slot.
//!
//! # How it joins
//!
//! Through the run's hook ([`crate::run_hook::RunHook`], [`FireDue`]): every `process` run
//! fires the slots that are due, beside its promotion of due tasks; the worker runs [`timer`].
//! No core file names it: its multi-ops carry tags of its own ([`store`]), and the core's
//! `Part` has no variant for it.
//!
//! Every function takes the time as ms since the epoch by ZooKeeper's clock
//! (`Queue::server_time`), so tests can move it; no slot is judged by a machine's own clock.
//!
//! A schedule is a five-field cron pattern in an IANA time zone: croner finds its slots and
//! chrono-tz its zone's offsets, daylight saving included (a 03:00 slot in Berlin is 01:00 UTC on
//! the spring day and 02:00 UTC the day before). A firer reads every schedule (one `getChildren`
//! and one multi-read: two requests a run whatever the backlog, one when there are none) and, for
//! each, takes the latest slot at or before now when it is later than the schedule's
//! `last_slot_ms`. A firer killed before its multi-op lands leaves nothing, one killed after it
//! left everything, so each slot makes exactly one task. A firer down for a while finds only the
//! latest missed slot due (policy `last`, the default: it stands for the others), or passes it
//! over when it is more than two minutes late (policy `skip`, which then writes only the
//! schedule). A schedule too big for one request is skipped with a log naming it and reported in
//! `failed`; one schedule's failure never stops the others, and a failure of the link or the
//! session ends the look. The worker sleeps until the next slot of any schedule, 30 s at most, so
//! a schedule added meanwhile is seen within that; `reap_leases` runs every five minutes, and a
//! slot fired by `process_events` can run in the same invocation. A `schedule resume` moves
//! `last_slot_ms` to the latest passed slot: paused slots make nothing.
//!
//! # Costs
//!
//! A slot's task costs one multi-op of three writes (five with an idempotency key) plus deleting
//! the previous slot's mark.

pub mod fire;
pub mod recurrence;
pub mod store;
pub mod timer;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::queue::Queue;
use crate::run_hook::{Made, RunHook};

pub use fire::{FireFailure, FireReport, fire_due};
pub use store::{Schedules, SlotTaken, StoredSchedule};

/// The run's hook: the slots due at a run's start, fired beside its promotion of due tasks,
/// while `schedules/` has children.
pub struct FireDue;

/// The folder [`FireDue`] works on, which a run's start read looks at.
pub const WATCHED: &str = crate::layout::SCHEDULES;

impl RunHook for FireDue {
    fn name(&self) -> &'static str {
        "schedules"
    }

    fn at_run_start<'a>(&'a self, queue: &'a Queue, now_ms: i64) -> BoxFuture<'a, Result<Made>> {
        Box::pin(async move {
            let report = fire_due(queue, now_ms).await?;
            Ok(Made {
                tasks: report.fired,
                moved: 0,
                failed: report.failed.len() as u32,
            })
        })
    }
}
