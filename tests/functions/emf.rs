//! The CloudWatch Embedded Metric Format lines the functions print, checked against the
//! specification's rules (root node, metadata object, MetricDirective, dimension sets, metric
//! definitions and their units), on a real run.

use event_bridge::Config;
use serde_json::Value;

use harness::TestQueue;

/// The units CloudWatch accepts for a metric definition.
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Every rule of the specification a document must keep; the first one broken, if any.
fn emf_violation(doc: &Value) -> Option<String> {
    let root = doc.as_object()?;
    let Some(aws) = root.get("_aws").and_then(Value::as_object) else {
        return Some("the root has no _aws object".into());
    };
    let stamped = aws
        .get("Timestamp")
        .and_then(Value::as_i64)
        .is_some_and(|t| t > 0);
    if !stamped {
        return Some("_aws.Timestamp must be a number of ms since the epoch".into());
    }
    let Some(directives) = aws.get("CloudWatchMetrics").and_then(Value::as_array) else {
        return Some("_aws.CloudWatchMetrics must be an array".into());
    };
    for directive in directives {
        let namespace = directive["Namespace"].as_str().unwrap_or("");
        if namespace.is_empty() || namespace.len() > 255 {
            return Some(format!(
                "Namespace {namespace:?} must be 1 to 255 characters"
            ));
        }
        let Some(sets) = directive["Dimensions"].as_array() else {
            return Some("Dimensions must be an array of dimension sets".into());
        };
        for set in sets {
            let Some(names) = set.as_array() else {
                return Some("a dimension set must be an array".into());
            };
            if names.len() > 30 {
                return Some("a dimension set holds at most 30 dimensions".into());
            }
            for name in names {
                let name = name.as_str().unwrap_or("");
                let value = root.get(name).and_then(Value::as_str);
                if name.is_empty() || name.len() > 255 || name.starts_with(':') {
                    return Some(format!("dimension name {name:?}"));
                }
                if !value.is_some_and(|v| !v.is_empty() && v.len() <= 1024) {
                    return Some(format!("dimension {name} needs a string value at the root"));
                }
            }
        }
        let Some(metrics) = directive["Metrics"].as_array() else {
            return Some("Metrics must be an array".into());
        };
        if metrics.len() > 100 {
            return Some("at most 100 metrics a directive".into());
        }
        for metric in metrics {
            let name = metric["Name"].as_str().unwrap_or("");
            if name.is_empty() || name.len() > 1024 {
                return Some(format!("metric name {name:?}"));
            }
            if !root.get(name).is_some_and(Value::is_number) {
                return Some(format!("metric {name} needs a number at the root"));
            }
            if let Some(unit) = metric.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                return Some(format!("metric {name}: unit {unit} is not CloudWatch's"));
            }
        }
    }
    None
}

#[tokio::test]
async fn process_events_prints_an_emf_line_cloudwatch_accepts() {
    let tq = TestQueue::with(|c: &mut Config| {
        c.metrics_emf = true;
        c.metrics_dimensions = vec![("Stage".into(), "test".into())];
    })
    .await;
    tq.publish(3).await;
    let app = process_events::App::open(tq.config.clone(), "test")
        .await
        .unwrap();
    let trigger = platform::trigger::Trigger::Drain { max_tasks: None };
    let report = process_events::run(&app, trigger, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let line = process_events::metrics_line(&app, &report)
        .await
        .expect("on");
    println!("{line}");
    assert_eq!(emf_violation(&line), None, "{line}");
    assert_eq!(
        (line["Completed"].as_f64(), line["Depth"].as_f64()),
        (Some(3.0), Some(0.0))
    );
    assert_eq!(line["Stage"], "test");
    for name in [
        "Claimed",
        "Retried",
        "DeadLettered",
        "LeaseConflicts",
        "Leased",
        "Dead",
        "Duration",
    ] {
        assert!(line[name].is_number(), "{name}: {line}");
    }
}

/// What the Lambda handler prints for a drain of one task, with `METRICS_EMF` on or off.
async fn printed_by_a_lambda_run(metrics_emf: bool) -> String {
    let tq = TestQueue::with(|c: &mut Config| c.metrics_emf = metrics_emf).await;
    tq.publish(1).await;
    let app = process_events::App::open(tq.config.clone(), "test")
        .await
        .unwrap();
    let event = lambda_runtime::LambdaEvent::new(
        serde_json::json!({ "mode": "drain" }),
        lambda_runtime::Context::default(),
    );
    let mut out = Vec::new();
    let report = process_events::lambda::handle_printing_to(&app, event, &mut out)
        .await
        .unwrap();
    assert_eq!(report["completed"], 1, "{report}");
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn without_metrics_emf_nothing_is_printed() {
    assert_eq!(printed_by_a_lambda_run(false).await, "");
    // The same run with it on prints its one line: the check above can fail.
    let on = printed_by_a_lambda_run(true).await;
    assert_eq!(on.lines().count(), 1, "{on}");
    assert!(on.contains("\"_aws\""), "{on}");
}

#[test]
fn the_checker_catches_what_the_specification_forbids() {
    let good: Value = serde_json::from_str(
        r#"{"_aws": {"Timestamp": 1, "CloudWatchMetrics": [{"Namespace": "N",
        "Dimensions": [["F"]], "Metrics": [{"Name": "M", "Unit": "Count"}]}]}, "F": "f", "M": 1}"#,
    )
    .unwrap();
    assert_eq!(emf_violation(&good), None);
    for (path, bad) in [
        ("/M", Value::String("1".into())),
        ("/F", Value::from(1)),
        ("/_aws/Timestamp", Value::String("now".into())),
        (
            "/_aws/CloudWatchMetrics/0/Metrics/0/Unit",
            Value::String("Tasks".into()),
        ),
        (
            "/_aws/CloudWatchMetrics/0/Namespace",
            Value::String(String::new()),
        ),
    ] {
        let mut doc = good.clone();
        *doc.pointer_mut(path).unwrap() = bad;
        assert!(emf_violation(&doc).is_some(), "{path}");
    }
}
