//! `schedule`: adding, listing, removing, pausing, resuming and running recurring schedules.

use std::io::Write;

use event_bridge::Queue;
use event_bridge::recurrence::{Misfire, Schedule};
use event_bridge::task::OnDead;
use serde_json::{Value, json};

use crate::show::print_json;
use crate::{Failure, ScheduleAdd, ScheduleCommand};

/// Runs one `schedule` command; the exit code is 3 when the named schedule does not exist.
pub(crate) async fn command(queue: &Queue, command: ScheduleCommand) -> Result<i32, Failure> {
    let now = queue.server_time().await?.now_ms();
    let (name, found) = match command {
        ScheduleCommand::Add(args) => {
            let added = event_bridge::schedule::add(queue, schedule(args)?, now).await?;
            print_json(&describe(&added))?;
            return Ok(0);
        }
        ScheduleCommand::List { json } => return list(queue, now, json).await,
        ScheduleCommand::Remove { name } => {
            let removed = event_bridge::features::schedules::Schedules::new(queue)
                .remove_schedule(&name)
                .await?;
            print_found(removed.then(|| json!({ "removed": name })))?;
            (name, removed)
        }
        ScheduleCommand::Pause { name } => {
            let changed = event_bridge::schedule::set_paused(queue, &name, true, now).await?;
            print_found(changed.as_ref().map(describe))?;
            (name, changed.is_some())
        }
        ScheduleCommand::Resume { name } => {
            let changed = event_bridge::schedule::set_paused(queue, &name, false, now).await?;
            print_found(changed.as_ref().map(describe))?;
            (name, changed.is_some())
        }
        ScheduleCommand::RunNow { name } => {
            let published = event_bridge::schedule::run_now(queue, &name, now).await?;
            let found = published.is_some();
            print_found(published.map(|p| json!(p)))?;
            (name, found)
        }
    };
    if !found {
        eprintln!("event-bridge: no schedule {name}");
        return Ok(3);
    }
    Ok(0)
}

fn print_found(value: Option<Value>) -> Result<(), Failure> {
    match value {
        Some(value) => print_json(&value),
        None => Ok(()),
    }
}

/// The schedule `add` asked for.
fn schedule(args: ScheduleAdd) -> Result<Schedule, Failure> {
    let payload: Value =
        serde_json::from_str(&args.payload).map_err(|e| format!("--payload is not JSON: {e}"))?;
    Ok(Schedule {
        name: args.name,
        cron: args.cron,
        tz: args.tz,
        event_type: args.event_type,
        payload,
        group: args.group,
        on_dead: args.on_dead.map(|o| match o.as_str() {
            "pause" => OnDead::Pause,
            _ => OnDead::Continue,
        }),
        idempotency_key_template: args.idempotency_key_template,
        misfire: match args.misfire.as_str() {
            "skip" => Misfire::Skip,
            _ => Misfire::Last,
        },
        paused: false,
        last_slot_ms: None,
    })
}

/// Every schedule as JSON lines (`--json`: one array), with its next slot.
async fn list(queue: &Queue, now: i64, as_json: bool) -> Result<i32, Failure> {
    let mut all = Vec::new();
    for (name, read) in event_bridge::features::schedules::Schedules::new(queue)
        .list()
        .await?
    {
        all.push(match read {
            Ok(stored) => {
                let mut row = describe(&stored.schedule);
                if let Ok(timing) = stored.schedule.timing() {
                    let from = stored.schedule.last_slot_ms.unwrap_or(now).max(now);
                    row["next_slot"] = json!(timing.next_after(from).map(rfc3339));
                }
                row
            }
            Err(problem) => json!({ "name": name, "problem": problem }),
        });
    }
    if as_json {
        print_json(&json!(all))?;
    } else {
        for row in all {
            out!("{row}");
        }
    }
    Ok(0)
}

fn describe(schedule: &Schedule) -> Value {
    let mut row = json!(schedule);
    if let Some(last) = schedule.last_slot_ms {
        row["last_slot"] = json!(rfc3339(last));
    }
    row
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| ms.to_string())
}
