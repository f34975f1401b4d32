//! What consumers record through the `metrics` facade: tasks handled by event type and
//! outcome, and how long deliveries took by route. Recording is a no-op until a program
//! installs a recorder; with feature `prometheus`, [`serve`] installs one that answers
//! Prometheus text at `http://<listen>/metrics` (the worker's `--metrics-listen`).

use std::time::Duration;

use crate::handler::HandlerError;

/// Counter: tasks whose handler ended, by `type` and `outcome` (`delivered`, `retryable`,
/// `permanent`, `stopped`).
pub const TASKS_HANDLED: &str = "event_bridge_tasks_handled_total";
/// Histogram: how long a handler (a delivery) took, in seconds, by `route`.
pub const DELIVERY_SECONDS: &str = "event_bridge_delivery_seconds";

/// Gauge: stuck states the latest audit found (see `inspect::audit`); counter: those it
/// repaired.
pub const STUCK_TASKS: &str = "event_bridge_stuck_tasks";
/// Counter: stuck states the audits repaired.
pub const STUCK_REPAIRED: &str = "event_bridge_stuck_repaired_total";

/// Records what an audit found: `stuck` states, of which it `repaired` some.
pub fn audited(stuck: usize, repaired: usize) {
    metrics::gauge!(STUCK_TASKS).set(stuck as f64);
    metrics::counter!(STUCK_REPAIRED).increment(repaired as u64);
}

/// What the dashboard samples (`event-bridge serve`): gauges of the queue's counts, the age
/// of its oldest task, pending tasks by `type` (of the oldest [`crate::inspect::SAMPLE`]),
/// and counters of the tasks ever created under and removed from `tasks/`.
pub mod queue {
    /// Gauge: tasks pending in the lanes, held ones included.
    pub const DEPTH: &str = "event_bridge_queue_depth";
    /// Gauge: leases held.
    pub const LEASED: &str = "event_bridge_queue_leased";
    /// Gauge: tasks waiting out a backoff or a delay under `delayed/`.
    pub const DELAYED: &str = "event_bridge_queue_delayed";
    /// Gauge: dead letters.
    pub const DEAD: &str = "event_bridge_queue_dead";
    /// Gauge: children waiting under `after/` for their parents.
    pub const BLOCKED: &str = "event_bridge_queue_blocked";
    /// Gauge: the oldest pending task's age, in seconds (0 with none).
    pub const OLDEST_AGE: &str = "event_bridge_oldest_task_age_seconds";
    /// Gauge: pending tasks by `type`, of the oldest sampled; a type gone from the sample reads 0.
    pub const PENDING_BY_TYPE: &str = "event_bridge_pending_tasks";
    /// Gauge: 1 while the whole queue is paused, else 0.
    pub const PAUSED: &str = "event_bridge_queue_paused";
    /// Counter: tasks ever created in the lanes.
    pub const CREATED: &str = "event_bridge_tasks_created_total";
    /// Counter: tasks ever removed from the lanes.
    pub const REMOVED: &str = "event_bridge_tasks_removed_total";
}

/// The outcome label of a handler's result (`None`: stopped before it finished).
pub fn outcome<T>(result: Option<&Result<T, HandlerError>>) -> &'static str {
    match result {
        Some(Ok(_)) => "delivered",
        Some(Err(HandlerError::Permanent(_))) => "permanent",
        Some(Err(_)) => "retryable",
        None => "stopped",
    }
}

/// Records one handler's end with its `outcome` label.
pub fn handled(event_type: &str, route: &str, outcome: &'static str, took: Duration) {
    metrics::counter!(TASKS_HANDLED, "type" => event_type.to_string(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(DELIVERY_SECONDS, "route" => route.to_string()).record(took.as_secs_f64());
}

/// Installs the Prometheus recorder and serves `/metrics` on `listen` (a background task of
/// the current runtime).
#[cfg(feature = "prometheus")]
pub fn serve(listen: std::net::SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(listen)
        .set_buckets(&[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| format!("cannot serve metrics on {listen}: {e}"))?;
    metrics::describe_counter!(
        TASKS_HANDLED,
        "Tasks whose handler ended, by type and outcome"
    );
    metrics::describe_histogram!(
        DELIVERY_SECONDS,
        metrics::Unit::Seconds,
        "How long a delivery took, by route"
    );
    Ok(())
}
