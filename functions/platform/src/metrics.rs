//! CloudWatch Embedded Metric Format: one JSON line per invocation that CloudWatch Logs turns
//! into metrics, so Lambda users get metrics and alarms with no agent. Pure: the handlers
//! print what these functions build.
//!
//! The line's namespace is `METRICS_NAMESPACE` (default `EventBridge/Queue`); its dimensions
//! are `Function` (the function's name) and `Queue` (the queue's root), plus any
//! `METRICS_DIMENSIONS` (`Name=value,…`). `METRICS_EMF` turns the lines on or off (default:
//! on when running on Lambda, where `AWS_LAMBDA_FUNCTION_NAME` is set).

use event_bridge::stats::Stats;
use event_bridge::{Config, ProcessReport, ReapReport};
use serde_json::{Map, Value, json};

/// One metric: its name, value and CloudWatch unit.
pub type Metric = (&'static str, f64, &'static str);

/// The EMF document for `metrics` with `config`'s namespace and dimensions, for function
/// `function`, stamped `timestamp_ms`.
pub fn document(config: &Config, function: &str, metrics: &[Metric], timestamp_ms: i64) -> Value {
    let mut dimensions = vec![
        ("Function".to_string(), function.to_string()),
        ("Queue".to_string(), config.root.clone()),
    ];
    dimensions.extend(config.metrics_dimensions.iter().cloned());
    let mut root = Map::new();
    for (name, value) in &dimensions {
        root.insert(name.clone(), json!(value));
    }
    for (name, value, _) in metrics {
        root.insert((*name).to_string(), json!(value));
    }
    let names: Vec<&str> = dimensions.iter().map(|(n, _)| n.as_str()).collect();
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|(name, _, unit)| json!({ "Name": name, "Unit": unit }))
        .collect();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": config.metrics_namespace,
                "Dimensions": [names],
                "Metrics": definitions,
            }],
        }),
    );
    Value::Object(root)
}

/// Milliseconds since the epoch, by this machine's clock (the line's timestamp).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one `process_events` run reports, with the queue's state after it.
pub fn process_metrics(report: &ProcessReport, stats: Option<&Stats>) -> Vec<Metric> {
    let mut metrics = vec![
        ("Claimed", f64::from(report.claimed), "Count"),
        ("Completed", f64::from(report.completed), "Count"),
        ("Retried", f64::from(report.retried), "Count"),
        ("DeadLettered", f64::from(report.dead_lettered), "Count"),
        ("LeaseConflicts", f64::from(report.lease_conflicts), "Count"),
        ("Duration", report.duration_ms as f64, "Milliseconds"),
    ];
    if let Some(depth) = report.remaining_depth {
        metrics.push(("Depth", depth as f64, "Count"));
    }
    metrics.extend(state(stats));
    metrics
}

/// What one `reap_leases` run reports, with the queue's state.
pub fn reap_metrics(report: &ReapReport) -> Vec<Metric> {
    let mut metrics = vec![
        ("Reaped", f64::from(report.reaped), "Count"),
        ("OrphansRemoved", f64::from(report.orphans_removed), "Count"),
        ("StuckTasks", report.audit.stuck.len() as f64, "Count"),
        ("StuckRepaired", report.audit.repaired() as f64, "Count"),
        ("Depth", report.stats.depth as f64, "Count"),
        ("Duration", report.duration_ms as f64, "Milliseconds"),
    ];
    metrics.extend(state(Some(&report.stats)));
    metrics
}

fn state(stats: Option<&Stats>) -> Vec<Metric> {
    let Some(stats) = stats else {
        return Vec::new();
    };
    let mut metrics = vec![
        ("Leased", stats.leased as f64, "Count"),
        ("Dead", stats.dead as f64, "Count"),
        ("Waiting", stats.delayed as f64, "Count"),
    ];
    if let Some(age) = stats.oldest_task_age_ms {
        metrics.push(("OldestTaskAge", age as f64, "Milliseconds"));
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_names_its_dimensions_and_metrics_at_the_root() {
        let mut config = Config::default();
        config.metrics_dimensions = vec![("Stage".into(), "prod".into())];
        let doc = document(
            &config,
            "process_events",
            &[("Claimed", 3.0, "Count")],
            1_000,
        );
        assert_eq!(doc["Function"], "process_events");
        assert_eq!(doc["Queue"], "/event-bridge");
        assert_eq!(doc["Stage"], "prod");
        assert_eq!(doc["Claimed"], 3.0);
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "EventBridge/Queue");
        assert_eq!(
            directive["Dimensions"],
            json!([["Function", "Queue", "Stage"]])
        );
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "Claimed", "Unit": "Count"}])
        );
        assert_eq!(doc["_aws"]["Timestamp"], 1_000);
    }
}
