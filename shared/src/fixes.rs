//! Every error a user can hit names its fix: the one list of the library's user-facing
//! messages (its [`Error`]s, the configuration's, the route table's), each built as the code
//! builds it, with the fix its message must carry. A fix is what the user does: it starts
//! with a verb of [`DOING`], or is a command in backquotes. A new variant of [`Error`] fails
//! [`every_error_variant_is_listed`] until it has its row here (or a reason in
//! [`UNMENDED`]). The functions' HTTP answers have their list in `event-bridge-platform`'s
//! `reply.rs`.

use std::collections::HashMap;

use zookeeper_client as zk;

use crate::config::{Config, ConfigError};
use crate::error::Error;

/// The verbs a fix starts with.
const DOING: &[&str] = &[
    "set ", "run ", "create ", "check ", "correct ", "publish ", "return ", "report ", "shorten ",
    "keep ", "give ", "pass ", "build ", "start ", "grant ", "unset ",
];

/// Variants whose message is made at each of their call sites, with no fix every site shares;
/// not mended yet.
const UNMENDED: &[(&str, &str)] = &[
    (
        "Schedule",
        "a bad pattern, zone or template: each site's problem",
    ),
    (
        "Batch",
        "unknown, sealed, opened twice, a bad name: each site's problem",
    ),
    (
        "Signal",
        "a bad key or a payload too large: each site's problem",
    ),
];

/// A configuration read from `vars`, or its error.
fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<&str, &str> = vars.iter().copied().collect();
    Config::from_lookup(|name| map.get(name).map(|v| v.to_string()))
}

fn config_error(vars: &[(&str, &str)]) -> String {
    config(vars).expect_err("a bad value").to_string()
}

fn zk_error(source: zk::Error) -> String {
    Error::zk("get", "/event-bridge/tasks", source).to_string()
}

/// Each message, and the fix it must name.
fn rows() -> Vec<(String, &'static str)> {
    let mut rows = vec![
        (
            config_error(&[("LEASE_TIMEOUT_MS", "5m")]),
            "set it to a whole number",
        ),
        (
            config_error(&[("LEASE_TIMEOUT_MS", "5000")]),
            "set it to at least 10000",
        ),
        (
            config_error(&[("LEASE_TIMEOUT_MS", "9300000000000000000")]),
            "set it to at most",
        ),
        (
            config_error(&[("KEEP_DONE", "1 hour")]),
            "set it to a number with a unit",
        ),
        (
            config_error(&[("KEEP_DONE", "31d")]),
            "set it to at least 1000 ms and at most",
        ),
        (
            config_error(&[("PUBLISH_MAX_BYTES", "2000000")]),
            "set it to at most 921600",
        ),
        (
            config_error(&[("METRICS_NAMESPACE", "AWS/Lambda")]),
            "set it to 1 to 255 characters",
        ),
        (
            config_error(&[("METRICS_DIMENSIONS", "Stage")]),
            "set it to Name=value pairs",
        ),
        (
            config_error(&[("ALLOW_UNAUTHENTICATED", "maybe")]),
            "set it to 1, true, yes",
        ),
        (
            config_error(&[("EVENT_BRIDGE_ROOT", "queue")]),
            "set it to an absolute znode path",
        ),
        (
            config_error(&[("EVENT_BRIDGE_HANDLER", "http")]),
            "set it to log or noop",
        ),
        (
            config_error(&[("ZOOKEEPER_AUTH", "bridge")]),
            "set it to user:password",
        ),
        (
            config_error(&[("LANE_WEIGHTS", "high=1")]),
            "set it as high=6,normal=3,low=1",
        ),
        (
            config_error(&[("DEADLINE_MARGIN_MS", "60000")]),
            "set it below TIME_BUDGET_MS",
        ),
        (
            config_error(&[("ROUTES", "{}"), ("ROUTES_FILE", "/r.json")]),
            "set ROUTES or ROUTES_FILE, not both",
        ),
        (
            config_error(&[("ROUTES_FILE", "/nonexistent/routes.json")]),
            "set it to a readable file's path",
        ),
        (
            Error::Unreachable {
                address: "10.0.0.1:2181".into(),
                timeout_ms: 5_000,
                reason: "timed out".into(),
            }
            .to_string(),
            "check that it runs and that ZOOKEEPER_CONNECTION_STRING names it",
        ),
        (
            zk_error(zk::Error::NoAuth),
            "set ZOOKEEPER_AUTH to credentials its ACL grants",
        ),
        (zk_error(zk::Error::NoNode), "run `event-bridge init`"),
        (
            zk_error(zk::Error::ConnectionLoss),
            "run it again; `event-bridge doctor`",
        ),
        (
            Error::Timeout {
                op: "publish",
                path: "/event-bridge".into(),
                timeout_ms: 60_000,
            }
            .to_string(),
            "run it again once ZooKeeper answers",
        ),
        (
            Error::TooLarge {
                size: 2_000_000,
                limit: 1_000_000,
            }
            .to_string(),
            "keep large data elsewhere and publish a reference to it",
        ),
        (
            Error::Unpublishable {
                item: 2,
                problem: "id a is also task 1's".into(),
            }
            .to_string(),
            "correct it and publish again",
        ),
        (
            Error::InDoubt {
                item: 3,
                id: "a-3".into(),
                problem: "the connection was lost".into(),
                cut: None,
            }
            .to_string(),
            "run `event-bridge status a-3`",
        ),
        (
            Error::from(serde_json::from_str::<serde_json::Value>("{").unwrap_err()).to_string(),
            "correct it",
        ),
        (
            config_error(&[("EVENT_BRIDGE_KICK", "on")]),
            "set it to process_events' HTTP trigger",
        ),
        (
            Error::Kick {
                target: "https://shop.example/api/process_events?drain=1".into(),
                problem: "answered 401 Unauthorized".into(),
            }
            .to_string(),
            "check EVENT_BRIDGE_KICK_URL and CRON_SECRET",
        ),
        (
            Error::Unreadable {
                path: "/event-bridge/paused".into(),
                problem: "not JSON".into(),
            }
            .to_string(),
            "correct or delete it",
        ),
        (
            Error::Parent {
                parent: "task-0000000001".into(),
                problem: "no such task".into(),
            }
            .to_string(),
            "correct the task's `after`",
        ),
        (
            Error::NotRedrivable {
                name: "task-0000000017".into(),
                problem: "its record keeps no body".into(),
            }
            .to_string(),
            "publish its task again, then purge it",
        ),
        (
            Error::ResultTooLarge {
                bytes: 70_000,
                limit: 65_536,
            }
            .to_string(),
            "return a smaller result",
        ),
        (progress(101, ""), "report 0 to 100"),
        (
            progress(1, &"x".repeat(201)),
            "shorten it to 200 bytes at most",
        ),
        (progress(1, "a\nb"), "report one line of text"),
        (
            Error::Dashboard {
                listen: "127.0.0.1:8080".into(),
                problem: "cannot listen (address in use): pass another --listen address".into(),
            }
            .to_string(),
            "pass another --listen address",
        ),
    ];
    rows.extend(route_rows());
    rows
}

fn progress(percent: u8, message: &str) -> String {
    let report = crate::progress::ProgressReport::new(percent, message);
    report.expect_err("a bad report").to_string()
}

/// The route table's errors, as the sinks' parser reports them.
#[cfg(any(feature = "http", feature = "sqs"))]
fn route_rows() -> Vec<(String, &'static str)> {
    let bad = r#"{"routes": {"a": {"sink": "kafka"}}}"#;
    let source = config(&[("ROUTES", bad)]).unwrap().routes.unwrap();
    let err = crate::sink::route::from_source(&source, &|_: &str| None).unwrap_err();
    vec![(err.to_string(), "correct the table")]
}

#[cfg(not(any(feature = "http", feature = "sqs")))]
fn route_rows() -> Vec<(String, &'static str)> {
    Vec::new()
}

#[test]
fn every_listed_error_names_its_fix() {
    for (message, fix) in rows() {
        assert!(
            DOING.iter().any(|verb| fix.starts_with(verb)) || fix.starts_with('`'),
            "the fix {fix:?} says nothing to do"
        );
        assert!(message.contains(fix), "{message:?} does not say {fix:?}");
        let first = message.chars().next().unwrap();
        // Lower case, as the crate's messages are, or a variable's or a path's name.
        assert!(
            first.is_lowercase()
                || first == '/'
                || message
                    .split(':')
                    .next()
                    .unwrap()
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_'),
            "{message:?} starts with {first:?}"
        );
    }
}

#[test]
fn every_error_variant_is_listed() {
    let source = include_str!("error.rs");
    let this = include_str!("fixes.rs");
    let enum_body = &source[source.find("pub enum Error {").unwrap()..];
    let enum_body = &enum_body[..enum_body.find("\n}\n").unwrap()];
    let variants: Vec<&str> = (enum_body.lines())
        .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        .map(str::trim)
        .filter(|l| l.starts_with(char::is_uppercase))
        .map(|l| l.split([' ', '(', '{', ',']).next().unwrap())
        .collect();
    assert!(variants.len() >= 17, "{variants:?}");
    for variant in variants {
        let listed = this.contains(&format!("Error::{variant} "))
            || this.contains(&format!("Error::{variant}("))
            || this.contains(&format!("Error::{variant} {{"))
            || UNMENDED.iter().any(|(v, _)| *v == variant);
        let listed = listed
            || match variant {
                // Built through their constructors above.
                "Config" => this.contains("config_error("),
                "Zk" => this.contains("Error::zk("),
                "Json" => this.contains("serde_json::from_str"),
                "BadProgress" => this.contains("fn progress("),
                _ => false,
            };
        assert!(listed, "Error::{variant} has no row in fixes.rs");
    }
}
