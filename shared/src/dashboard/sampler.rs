//! Samples the queue every so often while the dashboard runs: a point of the chart and the
//! Prometheus figures of `/metrics`. One sample is the cheap look of
//! [`crate::inspect::detailed_stats`] (one multi-read of three stats, a stat per waiting
//! bucket, and the oldest [`crate::inspect::SAMPLE`] tasks for the type counts), whatever the
//! backlog.

use std::collections::BTreeSet;
use std::time::Duration;

use metrics::{counter, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::Shared;
use super::history::Sample;
use crate::error::Result;
use crate::inspect::{self, DetailedStats};
use crate::queue::Queue;
use crate::run_metrics::queue as names;

/// Installs the process's Prometheus recorder; its handle renders `/metrics`.
pub(super) fn install_recorder() -> std::result::Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

/// Samples every `every` until the task is aborted.
pub(super) async fn run(shared: Shared, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut types = BTreeSet::new();
    loop {
        ticker.tick().await;
        match shared
            .session
            .run(|queue| async move { take(&queue).await })
            .await
        {
            Ok((sample, detailed)) => {
                record(&sample, &detailed, &mut types);
                shared.history.lock().expect("history lock").push(sample);
            }
            Err(e) => tracing::warn!(error = %e, "dashboard sample failed"),
        }
    }
}

/// One look at the queue ([`inspect::detailed_stats`], whose stats carry the counters).
async fn take(queue: &Queue) -> Result<(Sample, DetailedStats)> {
    let detailed = inspect::detailed_stats(queue, &queue.server_time().await?, false).await?;
    let counters = detailed.stats.counters;
    let sample = Sample {
        at_ms: chrono::Utc::now().timestamp_millis(),
        depth: counters.depth,
        leased: counters.leased,
        dead: counters.dead,
        removed: counters.tasks_removed,
    };
    counter!(names::CREATED).absolute(counters.tasks_created);
    counter!(names::REMOVED).absolute(counters.tasks_removed);
    Ok((sample, detailed))
}

/// Sets the gauges; a type seen before and gone from the sample drops to zero.
fn record(sample: &Sample, detailed: &DetailedStats, types: &mut BTreeSet<String>) {
    let stats = &detailed.stats;
    gauge!(names::DEPTH).set(sample.depth as f64);
    gauge!(names::LEASED).set(sample.leased as f64);
    gauge!(names::DELAYED).set(stats.delayed as f64);
    gauge!(names::DEAD).set(sample.dead as f64);
    gauge!(names::BLOCKED).set(stats.blocked as f64);
    gauge!(crate::run_metrics::STUCK_TASKS).set(stats.stuck_tasks as f64);
    let age = stats.oldest_task_age_ms.unwrap_or(0).max(0) as f64 / 1000.0;
    gauge!(names::OLDEST_AGE).set(age);
    let paused = crate::features::pause::Paused::in_stats(stats);
    gauge!(names::PAUSED).set(if paused.queue.is_some() { 1.0 } else { 0.0 });
    for gone in types.iter().filter(|t| !detailed.by_type.contains_key(*t)) {
        gauge!(names::PENDING_BY_TYPE, "type" => gone.clone()).set(0.0);
    }
    for (event_type, count) in &detailed.by_type {
        gauge!(names::PENDING_BY_TYPE, "type" => event_type.clone()).set(*count as f64);
        types.insert(event_type.clone());
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        names::DEPTH,
        "Tasks pending in tasks/, leased ones included"
    );
    describe_gauge!(names::LEASED, "Leases held");
    describe_gauge!(names::DELAYED, "Tasks waiting out a backoff or a delay");
    describe_gauge!(names::DEAD, "Dead letters");
    describe_gauge!(
        names::OLDEST_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest pending task, by ZooKeeper's clock"
    );
    describe_gauge!(
        names::PENDING_BY_TYPE,
        "Pending tasks by type, of the oldest 1000 (the stats sample)"
    );
    describe_gauge!(names::PAUSED, "1 while the whole queue is paused");
    describe_counter!(
        names::CREATED,
        "Tasks created under tasks/ (published, redriven, back from a wait)"
    );
    describe_counter!(
        names::REMOVED,
        "Tasks removed from tasks/ (completed, dead-lettered, cancelled, set to wait)"
    );
}
