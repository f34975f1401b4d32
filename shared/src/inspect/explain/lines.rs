//! How `explain` words each reason: one line a reason, times by ZooKeeper's clock; pure, so
//! each wording has a unit test here.

use super::{Parent, Reason};
use crate::queue::GateLoad;
use crate::state::State;
use crate::task::StandsFor;

/// A reason's line, times by ZooKeeper's clock (`now_ms`).
pub(super) fn line(reason: &Reason, now_ms: i64) -> String {
    match reason {
        Reason::Debounced {
            key,
            due_at_ms,
            max_wait_until_ms,
        } => debounced_line(key, *due_at_ms, *max_wait_until_ms),
        Reason::Parents { waiting_on } => parents_line(waiting_on),
        Reason::GroupTurn { group } => format!(
            "its parents are done; it waits for group {group} to reach its place in the lane"
        ),
        Reason::NotDue {
            due_at_ms,
            attempts,
            last_error,
        } => not_due(*due_at_ms, *attempts, last_error.as_deref(), now_ms),
        Reason::Sleeping {
            until_ms,
            steps_done,
        } => format!(
            "asleep after {steps_done} steps until {} (in {}): it resumes then, holding no lease meanwhile",
            at_time(*until_ms),
            span(until_ms - now_ms)
        ),
        Reason::AwaitingSignal {
            keys,
            until_ms,
            steps_done,
        } => format!(
            "waiting after {steps_done} steps for a signal on {}; its wait times out at {} (in {})",
            keys.join(" or "),
            at_time(*until_ms),
            span(until_ms - now_ms)
        ),
        Reason::GroupBehind {
            group,
            holder,
            holder_state,
            holder_why,
        } => group_behind(group, holder, *holder_state, holder_why, now_ms),
        Reason::GroupUnread { group, numbers } => format!(
            "group {group}: the {numbers} numbers of its lane before it were not read for a \
             task of its group, which would go first (`event-bridge explain` reads them)"
        ),
        Reason::GroupPaused { group, task, why } => {
            format!("group {group} paused at {task}: {why}; `resume --group {group}` lets it go on")
        }
        Reason::AtCap { gate } => at_cap(gate),
        Reason::RateLimited { gate } => rate_limited(gate, now_ms),
        Reason::Poison { problem } => {
            format!("cannot run ({problem}): it goes to the dead letters when claimed")
        }
        Reason::Ready => "ready: nothing holds it back; the next run claims it".to_string(),
        Reason::Feature { says, .. } => says.clone(),
        Reason::HeldBy(held) => held.line.clone(),
        other => ended_line(other, now_ms),
    }
}

/// The line of a reason that is no waiting: held, ended, a place, nowhere.
fn ended_line(reason: &Reason, now_ms: i64) -> String {
    match reason {
        Reason::Held {
            consumer_id,
            fencing_token,
            expires_in_ms,
        } => held(
            consumer_id.as_deref(),
            *fencing_token,
            *expires_in_ms,
            now_ms,
        ),
        Reason::Dead { name, why } => {
            format!("dead: {why}; `dead redrive {name}` queues it again")
        }
        Reason::Completed {
            task,
            completed_at_ms,
            attempts,
        } => format!(
            "completed as {task} at {} after {attempts} attempt{}",
            at_time(*completed_at_ms),
            if *attempts == 1 { "" } else { "s" }
        ),
        Reason::Place {
            group,
            task_id,
            stands_for,
        } => {
            let waits = match stands_for {
                StandsFor::Parents => "waits for its parents",
                StandsFor::Debounce { .. } => "waits for its debounce",
                StandsFor::Dead { .. } => "died: the group pauses here",
            };
            format!("a place: the turn in group {group} of task {task_id}, which {waits}")
        }
        Reason::NotFound => {
            "not found: no task, waiting task, dead letter or kept record has this name or id"
                .to_string()
        }
        waiting => unreachable!("{waiting:?} is a wait: `line` says it"),
    }
}

/// The line of a grouped task behind `holder`, with what holds that one back in turn.
fn group_behind(
    group: &str,
    holder: &str,
    state: Option<State>,
    why: &[Reason],
    now_ms: i64,
) -> String {
    let is_place = matches!(why, [Reason::Place { .. }]);
    let state = match (state, is_place) {
        (Some(state), _) => state.name(),
        (None, true) => "a place",
        (None, false) => "not found",
    };
    let first = format!("group {group}: behind {holder} ({state}), which goes first");
    let lines: Vec<String> = why.iter().map(|r| line(r, now_ms)).collect();
    match (is_place, lines.is_empty()) {
        (_, true) => first,
        (true, false) => format!("{first}; {holder} is {}", lines.join("; ")),
        (false, false) => format!("{first}; {holder} is held back: {}", lines.join("; ")),
    }
}

fn debounced_line(key: &str, due_at_ms: i64, max_wait_until_ms: Option<i64>) -> String {
    let most = max_wait_until_ms.map_or(String::new(), |at| {
        format!(" (at the latest {})", at_time(at))
    });
    format!(
        "debounced under key {key}: fires at {}{most} unless a later publish of the key \
         replaces it; `cancel` withdraws it",
        at_time(due_at_ms)
    )
}

fn parent(parent: &Parent) -> String {
    match (parent.state, parent.gone) {
        (_, true) => format!("{} (gone)", parent.id),
        (Some(state), false) => format!("{} ({})", parent.id, state.name()),
        (None, false) => parent.id.clone(),
    }
}

/// A waiting child's line: its parents, and when one is gone, the ways out.
fn parents_line(waiting_on: &[Parent]) -> String {
    let each: Vec<String> = waiting_on.iter().map(parent).collect();
    let each = each.join(" and ");
    let gone: Vec<&str> = (waiting_on.iter())
        .filter(|p| p.gone)
        .map(|p| p.id.as_str())
        .collect();
    if gone.is_empty() {
        return format!("waiting for its parents {each}: it goes to its lane when they complete");
    }
    let which = match gone[..] {
        [one] => format!("{one} is"),
        _ => format!("{} are", gone.join(" and ")),
    };
    let ends: Vec<String> = (gone.iter())
        .map(|id| format!("`event-bridge end-parent {id} --as completed`"))
        .collect();
    format!(
        "waiting for its parents {each}: {which} gone from the queue without an end (not \
         pending, held, waiting, dead, nor completed with a record: a 000-design consumer \
         completed it, or it was deleted by hand), so it never goes to its lane by itself; {} \
         lets it go on once its other parents complete (`--as dead` takes a parent as dead: it \
         then fails or runs as its on_parent_dead says), or `event-bridge cancel` ends it",
        ends.join(" and ")
    )
}

fn not_due(due_at_ms: i64, attempts: u32, last_error: Option<&str>, now_ms: i64) -> String {
    let when = format!(
        "due at {} (in {})",
        at_time(due_at_ms),
        span(due_at_ms - now_ms)
    );
    match (attempts, last_error) {
        (0, _) => format!("{when}: delayed by its producer"),
        (n, Some(error)) => format!("{when}: backoff after attempt {n}: {error}"),
        (n, None) => format!("{when}: backoff after attempt {n}"),
    }
}

fn at_cap(gate: &GateLoad) -> String {
    let what = gate_name(gate);
    let max = gate.max_in_flight.unwrap_or_default();
    let holders: Vec<String> = (gate.slots.iter())
        .map(|(lead, tasks)| match tasks {
            1 => lead.clone(),
            n => format!("{lead} and {} more of its claim", n - 1),
        })
        .collect();
    format!(
        "{what} at its cap {}/{max}: held by {}; it goes when one of them ends",
        gate.in_flight,
        holders.join(", ")
    )
}

fn rate_limited(gate: &GateLoad, now_ms: i64) -> String {
    let at = gate.next_token_at_ms.unwrap_or(now_ms);
    format!(
        "{} at its rate: its next token comes at {} (in {}); it goes then",
        gate_name(gate),
        at_time(at),
        span(at - now_ms)
    )
}

/// A gate as a line names it: a key of a route, or a route.
fn gate_name(gate: &GateLoad) -> String {
    match &gate.key {
        Some(key) => format!("key {key} of route {}", gate.route),
        None => format!("route {}", gate.route),
    }
}

fn held(consumer: Option<&str>, token: i64, expires_in_ms: i64, now_ms: i64) -> String {
    let consumer = consumer.unwrap_or("an unnamed consumer");
    let until = at_time(now_ms + expires_in_ms);
    match expires_in_ms > 0 {
        true => format!(
            "leased by {consumer} (fencing token {token}) until {until}: if that consumer \
             dies, the reaper frees it then"
        ),
        false => format!(
            "leased by {consumer} (fencing token {token}), expired at {until}: the next \
             reaper run frees it"
        ),
    }
}

/// `ms` since the epoch as a UTC time to the second.
fn at_time(ms: i64) -> String {
    crate::clock::shown(ms)
}

/// A span of ms, to the second.
fn span(ms: i64) -> String {
    let s = (ms.max(0) as u64).div_ceil(1000);
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 7_200 => format!("{} min", s.div_ceil(60)),
        s => format!("{} h", s.div_ceil(3_600)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_and_spans_round_up() {
        assert_eq!(at_time(1_795_000_000_000), "2026-11-18 11:06:40 UTC");
        assert_eq!(span(1), "1 s");
        assert_eq!(span(90_000), "90 s");
        assert_eq!(span(600_001), "11 min");
        assert_eq!(span(-5), "0 s");
    }

    #[test]
    fn a_backoff_names_its_attempt_and_error_and_a_delay_its_producer() {
        let now = 1_795_000_000_000;
        let backoff = not_due(now + 30_000, 2, Some("503 from https://x"), now);
        assert_eq!(
            backoff,
            "due at 2026-11-18 11:07:10 UTC (in 30 s): backoff after attempt 2: 503 from https://x"
        );
        assert!(not_due(now + 1_000, 0, None, now).ends_with("delayed by its producer"));
    }

    #[test]
    fn a_gate_out_of_tokens_says_when_the_next_comes() {
        let now = 1_795_000_000_000;
        let gate = GateLoad {
            route: "sms.send".into(),
            key: None,
            in_flight: 0,
            max_in_flight: None,
            slots: Vec::new(),
            next_token_at_ms: Some(now + 4_000),
        };
        assert_eq!(
            rate_limited(&gate, now),
            "route sms.send at its rate: its next token comes at 2026-11-18 11:06:44 UTC (in 4 s); \
             it goes then"
        );
    }

    #[test]
    fn a_gate_at_its_cap_names_its_holders() {
        let gate = GateLoad {
            route: "email.send".into(),
            key: Some("tenant-7".into()),
            in_flight: 2,
            max_in_flight: Some(2),
            slots: vec![("task-0000000003".into(), 1), ("task-0000000009".into(), 1)],
            next_token_at_ms: None,
        };
        assert!(gate.at_cap());
        assert_eq!(
            at_cap(&gate),
            "key tenant-7 of route email.send at its cap 2/2: held by task-0000000003, \
             task-0000000009; it goes when one of them ends"
        );
    }
}
