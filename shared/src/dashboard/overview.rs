//! `/`: the queue at a glance: counts, the oldest task's age, what is paused, the concurrency
//! keys in flight, the chart, the held tasks with their holders and progress, counts by type, paused groups
//! and schedules. Reloads itself
//! every ten seconds.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::shell::{Here, duration, page as shell_page, time};
use super::{Shared, chart, unavailable};
use crate::error::Result;
use crate::features::pause::Paused;
use crate::features::schedules::{Schedules, StoredSchedule};
use crate::inspect::{self, DetailedStats, TaskInfo};
use crate::progress::ProgressReport;
use crate::queue::{BatchRead, Queue};
use crate::stats::Stats;

/// Held tasks the page lists, at most.
const LEASES_SHOWN: usize = 100;

/// What the page shows, read at one request.
struct Look {
    detailed: DetailedStats,
    leased: Vec<TaskInfo>,
    leases_total: usize,
    schedules: Vec<(String, std::result::Result<StoredSchedule, String>)>,
    batches: Vec<BatchRead>,
    batches_total: usize,
    now_ms: i64,
}

/// Batches shown, at most (by name).
const BATCHES_SHOWN: usize = 50;

pub(super) async fn page(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let look = shared
        .session
        .run(|queue| async move { look(&queue).await })
        .await;
    let look = match look {
        Ok(look) => look,
        Err(e) => return unavailable(&shared, &headers, &e),
    };
    let viewer = shared.access.viewer(&headers);
    let chart = {
        let history = shared.history.lock().expect("history lock");
        chart::chart(&history, chrono::Utc::now().timestamp_millis())
    };
    let body = html! {
        h1 { "Queue " code { (shared.session.config().root) } }
        (cards(&look.detailed.stats))
        (paused(&look.detailed.stats))
        (keys(&look.detailed.stats))
        h2 { "Depth and throughput" }
        p.legend.muted {
            span.depth { "— depth" } span.rate { "- - tasks leaving the queue per minute" }
            "sampled while this dashboard runs, the last hour at most"
        }
        (chart)
        (leased(&look))
        (by_type(&look.detailed))
        (schedules(&look))
        (batches(&look))
    };
    shell_page("Overview", Here::Overview, &viewer, Some(10), body).into_response()
}

async fn look(queue: &Queue) -> Result<Look> {
    let now = queue.server_time().await?;
    let detailed = inspect::detailed_stats(queue, &now, false).await?;
    let (leased, leases_total) = inspect::leased(queue, &now, LEASES_SHOWN).await?;
    let (batches, batches_total) = queue.batches().list(BATCHES_SHOWN).await?;
    Ok(Look {
        batches,
        batches_total,
        detailed,
        leased,
        leases_total,
        schedules: Schedules::new(queue).list().await?,
        now_ms: now.now_ms(),
    })
}

fn cards(stats: &Stats) -> Markup {
    let oldest = stats.oldest_task_age_ms.map_or("—".to_string(), duration);
    html! {
        div.cards {
            (card("Pending", "depth", &stats.depth.to_string(), false))
            (card("Leased", "leased", &stats.leased.to_string(), false))
            (card("In backoff or delayed", "delayed", &stats.delayed.to_string(), false))
            (card("Debounced", "debounced", &stats.debounced.to_string(), false))
            (card("Waiting for parents", "blocked", &stats.blocked.to_string(), false))
            (card("Dead letters", "dead", &stats.dead.to_string(), stats.dead > 0))
            (card("Stuck", "stuck", &stats.stuck_tasks.to_string(), stats.stuck_tasks > 0))
            (card("Oldest task", "oldest", &oldest, false))
        }
        @if let Some(audit) = &stats.audit {
            ul.muted #stuck-lines {
                @for line in &audit.lines { li { (line) } }
            }
        }
        p.muted #lanes {
            "Pending by lane: high " span data-lane="high" { (stats.lanes.high) }
            " · normal " span data-lane="normal" { (stats.lanes.normal) }
            " · low " span data-lane="low" { (stats.lanes.low) }
            " (of normal's, " span data-lane="keyed" { (stats.lanes.keyed) }
            " in the lanes of " span data-lane="keys" { (stats.lanes.keys) } " keys)"
        }
    }
}

fn card(name: &str, figure: &str, value: &str, bad: bool) -> Markup {
    html! {
        div class={ "card" @if bad { " bad" } } {
            div.name { (name) }
            div.value data-figure=(figure) { (value) }
        }
    }
}

fn paused(stats: &Stats) -> Markup {
    let paused = Paused::in_stats(stats);
    html! {
        @if let Some(since) = paused.queue {
            p.notice data-paused="queue" { "The whole queue is paused since " (time(since.since)) "." }
        }
        @for (event_type, since) in &paused.types {
            p.notice data-paused=(event_type) {
                "Type " code { (event_type) } " is paused since " (time(since.since)) "."
            }
        }
        @if !stats.paused_groups.is_empty() {
            h2 { "Paused groups" }
            table {
                tr { th { "Group" } th { "Why" } }
                @for (group, why) in &stats.paused_groups {
                    tr { td { code { (group) } } td { (why) } }
                }
            }
            p.muted { "Go on with " code { "event-bridge resume --group NAME" } "." }
        }
    }
}

/// The concurrency keys with tasks in flight, those at their cap marked.
fn keys(stats: &Stats) -> Markup {
    html! {
        @if !stats.keys_in_flight.is_empty() {
            h2 { "Concurrency keys in flight (" (stats.keys_at_limit) " at their cap)" }
            table id="keys" {
                tr { th { "Route" } th { "Key" } th { "In flight" } th { "Cap" } }
                @for key in &stats.keys_in_flight {
                    tr data-key=(key.key) class={ @if key.at_limit() { "bad" } } {
                        td { code { (key.route) } }
                        td { code { (key.key) } }
                        td { (key.in_flight) }
                        td {
                            @match key.max_in_flight {
                                Some(max) => { (max) @if key.at_limit() { " (at its cap)" } }
                                None => span.muted { "rate only" },
                            }
                        }
                    }
                }
            }
        }
    }
}

fn leased(look: &Look) -> Markup {
    html! {
        h2 { "Leased (" (look.leases_total) ")" }
        @if look.leased.is_empty() {
            p.muted { "No task is held." }
        } @else {
            table id="leased" {
                tr {
                    th { "Task" } th { "Type" } th { "Attempts" } th { "Holder" }
                    th { "Fencing token" } th { "Expires in" } th { "Progress" }
                }
                @for task in &look.leased {
                    @let lease = task.lease.as_ref();
                    tr {
                        td { code { (task.name) } }
                        td { (task.event_type.as_deref().unwrap_or("—")) }
                        td.num { (task.attempts) }
                        td { (lease.and_then(|l| l.consumer_id.as_deref()).unwrap_or("?")) }
                        td.num { (lease.map_or(0, |l| l.fencing_token)) }
                        td.num { (lease.map_or("—".into(), |l| duration(l.expires_in_ms))) }
                        td { (progress(lease.and_then(|l| l.progress.as_ref()))) }
                    }
                }
            }
            @if look.leases_total > look.leased.len() {
                p.muted { "The first " (look.leased.len()) " of " (look.leases_total) "." }
            }
        }
    }
}

/// A held task's latest progress, as of its holder's last extension: a bar and its message.
fn progress(report: Option<&ProgressReport>) -> Markup {
    html! {
        @if let Some(report) = report {
            progress max="100" value=(report.percent) {}
            " " (report.percent) "%"
            @if !report.message.is_empty() { " " span.muted { (report.message) } }
        } @else {
            "—"
        }
    }
}

fn by_type(detailed: &DetailedStats) -> Markup {
    let paused = Paused::in_stats(&detailed.stats);
    html! {
        h2 { "Pending by type" }
        @if detailed.by_type.is_empty() {
            p.muted { "Nothing pending." }
        } @else {
            table id="by-type" {
                tr { th { "Type" } th { "Tasks" } th { "Paused" } }
                @for (event_type, count) in &detailed.by_type {
                    tr {
                        td { code { (event_type) } }
                        td.num data-type=(event_type) { (count) }
                        td { @if paused.covers(event_type) { "paused" } }
                    }
                }
            }
            @if !detailed.full {
                p.muted { "Of the oldest " (detailed.counted) " pending tasks "
                    "(" code { "event-bridge stats --full" } " counts them all)." }
            }
        }
    }
}

fn schedules(look: &Look) -> Markup {
    html! {
        @if !look.schedules.is_empty() {
            h2 { "Schedules" }
            table id="schedules" {
                tr { th { "Name" } th { "Cron" } th { "Zone" } th { "Type" } th { "State" } th { "Next slot" } }
                @for (name, read) in &look.schedules {
                    @match read {
                        Ok(stored) => {
                            @let s = &stored.schedule;
                            tr {
                                td { code { (name) } }
                                td { code { (s.cron) } }
                                td { (s.tz) }
                                td { (s.event_type) }
                                td { @if s.paused { "paused" } @else { "active" } }
                                td { (next_slot(stored, look.now_ms)) }
                            }
                        }
                        Err(problem) => tr { td { code { (name) } } td colspan="5" { "unreadable: " (problem) } },
                    }
                }
            }
        }
    }
}

fn batches(look: &Look) -> Markup {
    html! {
        @if !look.batches.is_empty() {
            h2 { "Batches" }
            @if look.batches_total > look.batches.len() {
                p.muted { "the first " (look.batches.len()) " of " (look.batches_total) " by name" }
            }
            table id="batches" {
                tr { th { "Name" } th { "Members" } th { "Pending" } th { "Completed" } th { "Dead" } th { "State" } th { "Callback" } }
                @for (name, read) in &look.batches {
                    @match read {
                        Ok(b) => tr data-batch=(name) {
                            td { code { (name) } }
                            td { (b.total) } td { (b.pending()) } td { (b.completed) } td { (b.dead) }
                            td { @if b.over() { "called back" } @else if b.sealed { "sealed" } @else { "open" } }
                            td { @match b.callback.as_ref().or(b.callback_id.as_ref()) { Some(c) => code { (c) }, None => "—" } }
                        },
                        Err(problem) => tr { td { code { (name) } } td colspan="6" { "unreadable: " (problem) } },
                    }
                }
            }
        }
    }
}

fn next_slot(stored: &StoredSchedule, now_ms: i64) -> String {
    let schedule = &stored.schedule;
    let from = schedule.last_slot_ms.unwrap_or(now_ms).max(now_ms);
    match schedule.timing().ok().and_then(|t| t.next_after(from)) {
        Some(slot) => time(slot),
        None => "—".into(),
    }
}
