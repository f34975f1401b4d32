//! Firing schedules: taking the slots that are due, and the changes an operator makes to a
//! schedule (see the folder's documentation, [`super`]).

use serde::Serialize;

use super::recurrence::{MISFIRE_GRACE_MS, Misfire, Schedule, Timing};
use super::store::{Schedules, SlotTaken, StoredSchedule};
use crate::error::{Error, Result};
use crate::queue::{Published, Queue};
use crate::queue::{Recovery, recovery};

/// What one look at the schedules did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FireReport {
    /// Slots that made a task.
    pub fired: u32,
    /// Slots taken without a new task: their idempotency key had one already.
    pub existing: u32,
    /// Slots passed over under misfire policy `skip`.
    pub skipped: u32,
    /// Slots another firer took first.
    pub raced: u32,
    /// Schedules that cannot be read or whose pattern is wrong (logged, left alone).
    pub invalid: u32,
    /// The earliest slot still to come of a schedule not paused (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due_ms: Option<i64>,
    /// Schedules whose due slot could not be fired, and why (each logged with its name); the
    /// others fired all the same. Such a slot stays due: the next look tries it again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FireFailure>,
}

/// A schedule that failed to fire its due slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FireFailure {
    /// The schedule's name.
    pub schedule: String,
    /// Why its slot did not fire.
    pub error: String,
}

/// Takes every slot due at `now_ms`: per schedule not paused, the latest slot at or before
/// `now_ms` that is later than the slot it took last. Missed slots before it make nothing
/// (policy `last`: it stands for them); policy `skip` passes it over too when it is more than
/// [`MISFIRE_GRACE_MS`] late. A schedule that fails to fire (its firing too large to send,
/// a write refused) is logged and reported in [`FireReport::failed`], and the others fire.
///
/// # Notable errors
/// - [`Error::Zk`] or [`Error::Timeout`] when the link or the session fails: every schedule
///   after would meet it too, so the look ends there; slots fired before stay fired.
pub async fn fire_due(queue: &Queue, now_ms: i64) -> Result<FireReport> {
    let mut report = FireReport::default();
    for (name, read) in Schedules::new(queue).list().await? {
        let stored = match read {
            Ok(stored) => stored,
            Err(problem) => {
                tracing::warn!(schedule = %name, problem, "schedule unreadable; left alone");
                report.invalid += 1;
                continue;
            }
        };
        let timing = match stored.schedule.timing() {
            Ok(timing) => timing,
            Err(problem) => {
                tracing::warn!(schedule = %name, problem, "schedule invalid; left alone");
                report.invalid += 1;
                continue;
            }
        };
        if stored.schedule.paused {
            continue;
        }
        if let Err(error) = fire_one(queue, &stored, &timing, now_ms, &mut report).await {
            report.failed.push(failure(queue, &name, error)?);
        }
        let last = stored.schedule.last_slot_ms.unwrap_or(i64::MIN).max(now_ms);
        if let Some(next) = timing.next_after(last) {
            report.next_due_ms = Some(report.next_due_ms.map_or(next, |n| n.min(next)));
        }
    }
    Ok(report)
}

/// A schedule's own failure to fire, to report while the others go on; a failure of the link
/// or the session is the whole look's, and ends it.
fn failure(queue: &Queue, name: &str, error: Error) -> Result<FireFailure> {
    if recovery(&error, queue.session_over()) != Recovery::GiveUp {
        return Err(error);
    }
    tracing::warn!(schedule = %name, error = %error, "schedule not fired; the others go on");
    Ok(FireFailure {
        schedule: name.to_string(),
        error: error.to_string(),
    })
}

async fn fire_one(
    queue: &Queue,
    stored: &StoredSchedule,
    timing: &Timing,
    now_ms: i64,
    report: &mut FireReport,
) -> Result<()> {
    let schedule = &stored.schedule;
    let Some(slot) = timing.latest_at_or_before(now_ms) else {
        return Ok(());
    };
    if schedule.last_slot_ms.is_some_and(|last| last >= slot) {
        return Ok(());
    }
    let late = now_ms - slot > MISFIRE_GRACE_MS;
    let envelope = match (schedule.misfire, late) {
        (Misfire::Skip, true) => None,
        _ => Some(
            schedule
                .envelope(timing, slot)
                .map_err(|problem| schedule_error(&schedule.name, problem))?,
        ),
    };
    let taken = Schedules::new(queue)
        .take_slot(stored, slot, envelope.as_ref())
        .await?;
    tracing::info!(schedule = %schedule.name, slot_ms = slot, outcome = ?taken, "schedule slot");
    match taken {
        SlotTaken::Fired { .. } => report.fired += 1,
        SlotTaken::Existing { .. } => report.existing += 1,
        SlotTaken::Skipped => report.skipped += 1,
        SlotTaken::Raced => report.raced += 1,
    }
    Ok(())
}

/// Adds `schedule`: its pattern, zone and key template checked, its latest slot set to the
/// latest at or before `now_ms` (so adding fires nothing already passed). An error when the
/// name is taken, or when its slots could not be fired: the schedule, its mark and its task
/// (the payload twice, the name in two paths) must fit one request ZooKeeper takes.
pub async fn add(queue: &Queue, mut schedule: Schedule, now_ms: i64) -> Result<Schedule> {
    let timing = schedule
        .timing()
        .map_err(|problem| schedule_error(&schedule.name, problem))?;
    schedule.last_slot_ms = timing.latest_at_or_before(now_ms);
    check_fires(queue, &schedule, &timing, now_ms)?;
    if !Schedules::new(queue).put_schedule(&schedule, None).await? {
        let problem = "a schedule of that name exists (remove it first)".to_string();
        return Err(schedule_error(&schedule.name, problem));
    }
    Ok(schedule)
}

/// Refuses `schedule` when its next slot (after `now_ms`) could not be fired; what a slot
/// writes differs from slot to slot by a few bytes of time at most.
fn check_fires(queue: &Queue, schedule: &Schedule, timing: &Timing, now_ms: i64) -> Result<()> {
    let slot = timing.next_after(now_ms).unwrap_or(now_ms);
    let envelope = schedule
        .envelope(timing, slot)
        .map_err(|problem| schedule_error(&schedule.name, problem))?;
    Schedules::new(queue).check_firing(schedule, slot, &envelope)
}

/// Pauses or unpauses schedule `name`; `None` when there is none. An unpaused schedule goes on
/// from its next slot: the slots that passed while it was paused make nothing.
pub async fn set_paused(
    queue: &Queue,
    name: &str,
    paused: bool,
    now_ms: i64,
) -> Result<Option<Schedule>> {
    let change = |schedule: &mut Schedule| {
        if let Some(timing) = (!paused && schedule.paused)
            .then(|| schedule.timing().ok())
            .flatten()
        {
            schedule.last_slot_ms = timing
                .latest_at_or_before(now_ms)
                .max(schedule.last_slot_ms);
        }
        schedule.paused = paused;
    };
    Schedules::new(queue).change_schedule(name, &change).await
}

/// Publishes schedule `name`'s task now, outside its slots (its key template filled in for
/// `now_ms`, so a key by slot time deduplicates with nothing); `None` when there is none.
pub async fn run_now(queue: &Queue, name: &str, now_ms: i64) -> Result<Option<Published>> {
    let Some(stored) = Schedules::new(queue).schedule(name).await? else {
        return Ok(None);
    };
    let schedule = &stored.schedule;
    let envelope = schedule
        .timing()
        .and_then(|timing| schedule.envelope(&timing, now_ms))
        .map_err(|problem| schedule_error(name, problem))?;
    let published = queue.publish_all(std::slice::from_ref(&envelope)).await?;
    Ok(published.into_iter().next())
}

fn schedule_error(name: &str, problem: String) -> Error {
    Error::Schedule {
        name: name.to_string(),
        problem,
    }
}
