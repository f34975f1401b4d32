//! What the commands print: JSON, the task table, the stats, a status line.

use std::io::Write;

use event_bridge::Config;
use event_bridge::inspect::{DetailedStats, Status, TaskInfo};

use crate::Failure;

pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub(crate) fn print_table(tasks: &[TaskInfo]) -> Result<(), Failure> {
    out!(
        "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}",
        "TASK",
        "AGE",
        "ATTEMPTS",
        "TYPE",
        "HOLDER",
        "EXPIRES IN"
    );
    for t in tasks {
        let (holder, expires) = match &t.lease {
            Some(l) => (
                l.consumer_id.clone().unwrap_or("?".into()),
                seconds(l.expires_in_ms),
            ),
            None if t.backoff_left_ms.is_some() => ("(backoff)".into(), "-".into()),
            None => ("-".into(), "-".into()),
        };
        let kind = match &t.event_type {
            Some(kind) => kind.clone(),
            None if t.unreadable => "(unreadable)".into(),
            None => "(poison)".into(),
        };
        out!(
            "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}",
            t.name,
            seconds(t.age_ms),
            t.attempts,
            kind,
            holder,
            expires
        );
    }
    Ok(())
}

pub(crate) fn print_stats(config: &Config, s: &DetailedStats) -> Result<(), Failure> {
    let age = s.stats.oldest_task_age_ms.map_or("-".into(), seconds);
    out!("root         {}", config.root);
    let lanes = &s.stats.lanes;
    out!(
        "pending      {} (high {}, normal {}, low {})",
        s.stats.depth,
        lanes.high,
        lanes.normal,
        lanes.low
    );
    out!("leased       {}", s.stats.leased);
    out!("waiting      {}", s.stats.delayed);
    out!("debounced    {}", s.stats.debounced);
    out!("dead         {}", s.stats.dead);
    if s.unreadable > 0 {
        out!(
            "unreadable   {} (their ACL shuts these credentials out)",
            s.unreadable
        );
    }
    out!("oldest task  {age}");
    let paused = &s.stats.paused;
    if paused.queue.is_some() {
        out!("paused       the whole queue");
    }
    for event_type in paused.types.keys() {
        out!("paused       type {event_type}");
    }
    for (group, why) in &s.stats.paused_groups {
        out!("paused       group {group}: {why}");
    }
    if !s.stats.keys_in_flight.is_empty() {
        out!(
            "keys         {} in flight, {} at their cap",
            s.stats.keys_in_flight.len(),
            s.stats.keys_at_limit
        );
    }
    for key in &s.stats.keys_in_flight {
        let cap = key
            .max_in_flight
            .map_or("rate only".into(), |m| m.to_string());
        let at = if key.at_limit() { "  at its cap" } else { "" };
        out!(
            "  {:<24} {:<24} {} of {cap}{at}",
            key.route,
            key.key,
            key.in_flight
        );
    }
    let of = if s.full {
        "all".to_string()
    } else {
        format!("the oldest {}", s.counted)
    };
    out!("by type      ({of})");
    for (event_type, n) in &s.by_type {
        out!("  {event_type:<24} {n}");
    }
    Ok(())
}

pub(crate) fn describe(status: &Status) -> String {
    let paused = match status {
        Status::Pending { task } | Status::Waiting { task } if task.paused => " (paused)",
        _ => "",
    };
    let described = match status {
        Status::Pending { task } => match task.backoff_left_ms {
            Some(left) => format!(
                "{}: pending, in backoff for {}, {} attempts",
                task.name,
                seconds(left),
                task.attempts
            ),
            None => format!("{}: pending, {} attempts", task.name, task.attempts),
        },
        Status::Leased { task } => {
            let lease = task.lease.as_ref().expect("leased");
            let holder = lease.consumer_id.as_deref().unwrap_or("?");
            format!(
                "{}: leased by {holder}, expires in {}",
                task.name,
                seconds(lease.expires_in_ms)
            )
        }
        Status::Waiting { task } => format!(
            "{}: waiting, due in {}, {} attempts",
            task.name,
            seconds(task.backoff_left_ms.unwrap_or(0)),
            task.attempts
        ),
        Status::Dead { name, record } => format!(
            "{name}: dead ({})",
            record["reason"].as_str().unwrap_or("?")
        ),
        Status::Completed { record } => {
            let answer = match &record.delivered {
                Some(event_bridge::handler::Delivered {
                    sink: Some(sink),
                    status: Some(status),
                }) => format!(", {sink} {status}"),
                Some(event_bridge::handler::Delivered {
                    sink: Some(sink), ..
                }) => format!(", {sink}"),
                _ => String::new(),
            };
            let at = chrono::DateTime::from_timestamp_millis(record.completed_at_ms)
                .map_or_else(|| "?".into(), |t| t.to_rfc3339());
            format!(
                "{}: completed at {at} after {} attempts{answer}",
                record.task, record.attempts
            )
        }
        Status::NotFound => "not found".into(),
        // A state added later: as it serializes.
        other => serde_json::json!(other).to_string(),
    };
    format!("{described}{paused}")
}

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}
