//! What the commands print: JSON, the task table, the stats, a status line.

use std::io::Write;

use event_bridge::Config;
use event_bridge::inspect::{DebouncedInfo, DetailedStats, Status, TaskInfo};

use crate::Failure;

pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub(crate) fn print_table(tasks: &[TaskInfo]) -> Result<(), Failure> {
    out!(
        "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}  {}",
        "TASK",
        "AGE",
        "ATTEMPTS",
        "TYPE",
        "HOLDER",
        "EXPIRES IN",
        "PROGRESS"
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
        let progress = t
            .lease
            .as_ref()
            .and_then(|l| l.progress.as_ref())
            .map_or("-".into(), progress);
        out!(
            "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}  {}",
            t.name,
            seconds(t.age_ms),
            t.attempts,
            kind,
            holder,
            expires,
            progress
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
    if lanes.keyed > 0 {
        out!(
            "in key lanes {} of normal's, over {} keys",
            lanes.keyed,
            lanes.keys
        );
    }
    out!("leased       {}", s.stats.leased);
    out!("waiting      {}", s.stats.delayed);
    if s.sleeping + s.awaiting_signal > 0 {
        out!(
            "  of them    {} sleeping, {} awaiting a signal (of {} looked at)",
            s.sleeping,
            s.awaiting_signal,
            s.delayed_counted
        );
    }
    out!("debounced    {}", s.stats.debounced);
    out!("blocked      {} (waiting for parents)", s.stats.blocked);
    out!("dead         {}", s.stats.dead);
    stuck(&s.stats)?;
    if s.unreadable > 0 {
        out!(
            "unreadable   {} (their ACL shuts these credentials out)",
            s.unreadable
        );
    }
    out!("oldest task  {age}");
    let paused = &event_bridge::features::pause::Paused::in_stats(&s.stats);
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

/// A resumable task asleep or waiting: its steps done, what it waits for, and when it goes.
fn suspended(task: &TaskInfo, what: &str, then: &str) -> String {
    let record = task.envelope.as_ref().and_then(|e| e.resume.as_ref());
    let steps = record.map_or(0, |r| r.steps_done());
    let keys = match record.and_then(|r| r.suspended_in()) {
        Some(event_bridge::resume::Entry::Wait { keys, .. }) => {
            format!(" on {}", keys.join(" or "))
        }
        _ => String::new(),
    };
    format!(
        "{}: {what}{keys} after {steps} steps, {then} in {}",
        task.name,
        seconds(task.backoff_left_ms.unwrap_or(0))
    )
}

pub(crate) fn describe(status: &Status) -> String {
    let paused = match status {
        Status::Pending { task }
        | Status::Waiting { task }
        | Status::Sleeping { task }
        | Status::AwaitingSignal { task }
            if task.paused =>
        {
            " (paused)"
        }
        _ => "",
    };
    let described = match status {
        Status::Debounced(pending) => debounced(pending),
        Status::Pending { task } => match task.backoff_left_ms {
            Some(left) => format!(
                "{}: pending, in backoff for {}, {} attempts",
                task.name,
                seconds(left),
                task.attempts
            ),
            None => format!("{}: pending, {} attempts", task.name, task.attempts),
        },
        Status::Leased { task } => leased(task),
        Status::Waiting { task } => format!(
            "{}: waiting, due in {}, {} attempts",
            task.name,
            seconds(task.backoff_left_ms.unwrap_or(0)),
            task.attempts
        ),
        Status::Sleeping { task } => suspended(task, "sleeping", "resumes"),
        Status::AwaitingSignal { task } => suspended(task, "awaiting a signal", "times out"),
        Status::Blocked { task } => blocked(task),
        Status::Place { task } => place(task),
        Status::Dead { name, record } => format!(
            "{name}: dead ({})",
            record["reason"].as_str().unwrap_or("?")
        ),
        Status::Completed { record } => completed(record),
        Status::NotFound => "not found".into(),
        // A state added later: as it serializes.
        other => serde_json::json!(other).to_string(),
    };
    format!("{described}{paused}")
}

/// A held task: by whom, until when, how far its handler says it is.
fn leased(task: &TaskInfo) -> String {
    let lease = task.lease.as_ref().expect("leased");
    let holder = lease.consumer_id.as_deref().unwrap_or("?");
    let done = (lease.progress.as_ref()).map_or(String::new(), |p| format!(", at {}", progress(p)));
    format!(
        "{}: leased by {holder}, expires in {}{done}",
        task.name,
        seconds(lease.expires_in_ms)
    )
}

/// A child waiting for its parents, or for its group to reach its place.
fn blocked(task: &TaskInfo) -> String {
    let waiting_on = (task.envelope.as_ref()).map_or(Vec::new(), |e| e.waiting_on.clone());
    let placed = task.envelope.as_ref().is_some_and(|e| e.placed.is_some());
    let id = task.id.as_deref().unwrap_or(&task.name);
    match (waiting_on.is_empty(), placed) {
        (true, true) => {
            format!("{id}: its parents completed; it runs when its group reaches its place")
        }
        _ => format!(
            "{id}: waiting for {} parent(s): {}",
            waiting_on.len(),
            waiting_on.join(", ")
        ),
    }
}

/// A completed task: when, after how many attempts, what its sink answered.
fn completed(record: &event_bridge::queue::DoneRecord) -> String {
    let answer = match &record.delivered {
        Some(event_bridge::handler::Delivered {
            sink: Some(sink),
            status: Some(status),
            ..
        }) => format!(", {sink} {status}"),
        Some(event_bridge::handler::Delivered {
            sink: Some(sink), ..
        }) => format!(", {sink}"),
        _ => String::new(),
    };
    format!(
        "{}: completed at {} after {} attempts{answer}{}",
        record.task,
        at(record.completed_at_ms),
        record.attempts,
        result(record)
    )
}

/// A place: whose turn it keeps, in which group, and what that task waits for.
fn place(task: &event_bridge::inspect::TaskInfo) -> String {
    use event_bridge::task::StandsFor;
    let id = task.id.as_deref().unwrap_or("?");
    let Some(place) = &task.place else {
        return format!("{}: a place", task.name);
    };
    let waits = match &place.stands_for {
        StandsFor::Parents => format!("task {id}, which waits for its parents (status {id})"),
        StandsFor::Debounce { key } => {
            format!("the debounced publish {id} of key {key:?} (status {id})")
        }
        StandsFor::Dead { letter, .. } => {
            format!("{letter}, dead: the group pauses when its turn comes")
        }
    };
    format!(
        "{}: a place in group {:?}, keeping the turn of {waits}",
        task.name, place.group
    )
}

/// A pending debounced publish: its key, when it is due, when its maximum wait ends.
fn debounced(pending: &DebouncedInfo) -> String {
    let due = match pending.due_in_ms {
        left if left > 0 => format!("in {}", seconds(left)),
        late => format!("{} ago: the next run fires it", seconds(-late)),
    };
    let max = match pending.max_wait_until_ms {
        Some(ms) => format!("; its maximum wait ends at {}", at(ms)),
        None => String::new(),
    };
    format!(
        "{}: debounced under key {:?} ({}), due at {} ({due}){max}",
        pending.id,
        pending.key,
        pending.event_type,
        at(pending.due_at_ms)
    )
}

/// A held task's progress: `40% copied 4 of 10 files`.
fn progress(p: &event_bridge::progress::ProgressReport) -> String {
    match p.message.as_str() {
        "" => format!("{}%", p.percent),
        message => format!("{}% {message}", p.percent),
    }
}

/// A completion record's result, on the status line: its JSON, cut at 200 characters, or what
/// it was when it was not kept.
fn result(record: &event_bridge::queue::DoneRecord) -> String {
    if let Some(value) = &record.result {
        let text = value.to_string();
        return match text.char_indices().nth(200) {
            Some((cut, _)) => format!(", result {}…", &text[..cut]),
            None => format!(", result {text}"),
        };
    }
    let Some(omitted) = &record.result_omitted else {
        return String::new();
    };
    let bytes = omitted
        .bytes
        .map_or("size unknown".into(), |b| format!("{b} bytes"));
    let kind = omitted.content_type.as_deref().unwrap_or("no content type");
    format!(", result not kept ({}: {bytes}, {kind})", omitted.reason)
}

/// Milliseconds since the epoch, in RFC 3339.
fn at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(|| "?".into(), |t| t.to_rfc3339())
}

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// The last audit's findings: none, or each line it kept.
fn stuck(stats: &event_bridge::stats::Stats) -> std::io::Result<()> {
    let Some(audit) = &stats.audit else {
        out!("stuck        0 (as of the last reaper run)");
        return Ok(());
    };
    out!(
        "stuck        {} (reaper run at {} ms; {} repaired)",
        audit.stuck_tasks,
        audit.at_ms,
        audit.repaired
    );
    for line in &audit.lines {
        out!("  {line}");
    }
    Ok(())
}
