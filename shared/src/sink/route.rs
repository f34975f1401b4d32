//! The route table: which sink each event type goes to, read from `ROUTES` (JSON inline) or
//! `ROUTES_FILE` (a JSON file) and validated at cold start.
//!
//! ```json
//! {
//!   "routes": {
//!     "user.signup":  {"sink": "http", "url": "https://hooks.example.com/signup",
//!                      "secret_env": "SIGNUP_HOOK_SECRET", "timeout_ms": 5000},
//!     "invoice.paid": {"sink": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/invoices.fifo",
//!                      "group": "billing"},
//!     "audit.trail":  {"sink": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/audit",
//!                      "batch": false}
//!   },
//!   "default": {"sink": "log"},
//!   "no_route": "dead_letter"
//! }
//! ```
//!
//! A route (or the default) may add `"max_in_flight": 3` (at most that many of its tasks run at
//! once, across every consumer) and `"rate": "10/s"` (`/s`, `/min`, `/h`): a task over either
//! waits without costing an attempt (see [`crate::limit`]). `"per_key": {"max_in_flight": 2,
//! "rate": "1/s"}` (either or both) sets the same limits for each value of a task's
//! `concurrency_key` among the route's tasks.
//!
//! A route (or the default) may add `"on_dead": "pause"`: a group whose task of that type goes
//! to the dead letters then stays paused until `event-bridge resume --group` (a task's own
//! `on_dead` comes first).
//!
//! An event type with no route goes to `default`; with no default either, `no_route` decides:
//! `dead_letter` (the default: the task is buried as a permanent failure, last error "no route
//! for event type …") or `skip`
//! (completed without delivery).
//!
//! An `sqs` route takes `queue_url`, `group` (the FIFO group of tasks without one) and `batch`
//! (default `true`): concurrent deliveries to the queue share `SendMessageBatch` requests of
//! up to 10 messages, each task still getting its own result (see `sink::sqs`, "Batching");
//! `false` sends one `SendMessage` per task. Secrets are never written in the table: `secret_env` names
//! the environment variable that holds one.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::error::InvalidSpec;
use super::redact::{redacted, shown};
use super::route_limits::{take_limit, take_on_dead};
use crate::config::{ConfigError, RouteSource};
use crate::limit::RouteLimits;
use crate::secret::Secret;
use crate::task::OnDeadPolicy;

/// A validated route table.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteTable {
    /// Each event type with a route of its own, and where it delivers.
    pub routes: BTreeMap<String, SinkSpec>,
    /// Where types without a route of their own deliver, if anywhere.
    pub default: Option<SinkSpec>,
    /// What happens to a type with no route when there is no default.
    pub no_route: NoRoute,
    /// What groups do when a task goes to the dead letters, from the routes' `on_dead`.
    pub on_dead: OnDeadPolicy,
    /// The routes' `max_in_flight` and `rate`.
    pub limits: RouteLimits,
}

/// Where one route delivers. Its `Debug` output hides credentials and queries in URLs.
#[derive(Clone, PartialEq)]
pub enum SinkSpec {
    /// Log the task and succeed.
    Log,
    /// POST the envelope to `url`, signed with `secret` when there is one, by `signature`.
    Http {
        /// The webhook's URL.
        url: String,
        /// The signing secret, read from the route's `secret_env` variable.
        secret: Option<Secret>,
        /// How requests are signed.
        signature: SignatureScheme,
        /// Bounds one attempt.
        timeout: Duration,
    },
    /// Send the payload to an SQS queue; `group` is the FIFO group when the task has none;
    /// `batch` lets concurrent deliveries share `SendMessageBatch` requests.
    Sqs {
        /// The queue's URL.
        queue_url: String,
        /// The FIFO message group for tasks without a group.
        group: Option<String>,
        /// Whether deliveries may share batch requests.
        batch: bool,
    },
}

/// How an HTTP route signs its requests (with its secret).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureScheme {
    /// `X-Event-Bridge-Signature: sha256=<hex>` (the default).
    #[default]
    Hmac,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`,
    /// with a `whsec_` secret.
    Standard,
}

/// What happens to a task whose event type has no route and there is no default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoRoute {
    /// It fails for good: the task goes to the dead letters (the default).
    #[default]
    DeadLetter,
    /// It is logged and counts as delivered.
    Skip,
}

/// What a route table's error says to do.
pub const ROUTE_FIX: &str =
    "correct the table (the book's \"Routes, sinks and limits\" lists every field)";

/// The default HTTP timeout.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    #[serde(default)]
    routes: BTreeMap<String, Value>,
    default: Option<Value>,
    #[serde(default)]
    no_route: NoRoute,
}

#[derive(Deserialize)]
#[serde(tag = "sink", rename_all = "lowercase", deny_unknown_fields)]
enum RawSink {
    Log,
    Http {
        url: String,
        secret_env: Option<String>,
        #[serde(default)]
        signature: SignatureScheme,
        timeout_ms: Option<u64>,
    },
    Sqs {
        queue_url: String,
        group: Option<String>,
        batch: Option<bool>,
    },
}

/// Parses the configured table (`ROUTES` or `ROUTES_FILE`); an error names that variable, the
/// table's origin and the route.
pub fn from_source(
    source: &RouteSource,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<RouteTable, ConfigError> {
    parse(&source.text, lookup).map_err(|InvalidSpec(problem)| ConfigError {
        variable: source.variable,
        value: source.origin.clone(),
        problem: format!("{problem}; {ROUTE_FIX}"),
    })
}

/// Parses and validates a route table; `lookup` reads the variables that `secret_env` names.
/// Every error names the route it is about.
pub fn parse(
    text: &str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<RouteTable, InvalidSpec> {
    parse_table(text, lookup).map_err(InvalidSpec)
}

fn parse_table(text: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<RouteTable, String> {
    let raw: RawTable =
        serde_json::from_str(text).map_err(|e| format!("not a route table: {e}"))?;
    let mut routes = BTreeMap::new();
    let mut on_dead = OnDeadPolicy::default();
    let mut limits = RouteLimits::default();
    for (event_type, mut spec) in raw.routes {
        let named = |e| format!("route {event_type:?}: {e}");
        if let Some(when_dead) = take_on_dead(&mut spec).map_err(named)? {
            on_dead.types.insert(event_type.clone(), when_dead);
        }
        let limit = take_limit(&mut spec).map_err(named)?;
        limits.types.insert(event_type.clone(), limit);
        let sink = sink(spec, lookup).map_err(named)?;
        routes.insert(event_type, sink);
    }
    let default = match raw.default {
        Some(mut spec) => {
            let named = |e| format!("default route: {e}");
            on_dead.default = take_on_dead(&mut spec).map_err(named)?.unwrap_or_default();
            limits.default = take_limit(&mut spec).map_err(named)?;
            Some(sink(spec, lookup).map_err(named)?)
        }
        None => None,
    };
    Ok(RouteTable {
        routes,
        default,
        no_route: raw.no_route,
        on_dead,
        limits,
    })
}

fn sink(spec: Value, lookup: &impl Fn(&str) -> Option<String>) -> Result<SinkSpec, String> {
    let raw: RawSink = serde_json::from_value(spec).map_err(|e| e.to_string())?;
    Ok(match raw {
        RawSink::Log => SinkSpec::Log,
        RawSink::Http {
            url,
            secret_env,
            signature,
            timeout_ms,
        } => {
            http_url(&url)?;
            let secret = match &secret_env {
                Some(var) => Some(Secret::new(
                    lookup(var).ok_or(format!("secret_env {var} is not set"))?,
                )),
                None => None,
            };
            if signature == SignatureScheme::Standard {
                standard_secret(secret_env.as_deref(), secret.as_ref())?;
            }
            let timeout = timeout_ms.map_or(HTTP_TIMEOUT, Duration::from_millis);
            SinkSpec::Http {
                url,
                secret,
                signature,
                timeout,
            }
        }
        RawSink::Sqs {
            queue_url,
            group,
            batch,
        } => {
            http_url(&queue_url)?;
            SinkSpec::Sqs {
                queue_url,
                group,
                batch: batch.unwrap_or(true),
            }
        }
    })
}

fn http_url(raw: &str) -> Result<(), String> {
    match url::Url::parse(raw) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(()),
        Ok(url) => Err(format!("{:?} is not an http(s) URL", shown(&url))),
        // Unparsable: it may still hold a secret, so only its length is shown.
        Err(e) => Err(format!(
            "a {}-character value is not a URL: {e}",
            raw.chars().count()
        )),
    }
}

/// A standard signature needs a secret, `whsec_` and base64 (the variable is named, never
/// its value).
fn standard_secret(var: Option<&str>, secret: Option<&Secret>) -> Result<(), String> {
    let (Some(var), Some(secret)) = (var, secret) else {
        return Err("\"signature\": \"standard\" needs a secret_env (a whsec_ secret)".into());
    };
    let Some(encoded) = secret.expose().strip_prefix("whsec_") else {
        return Err(format!(
            "secret_env {var}: a standard signature's secret starts with whsec_"
        ));
    };
    use base64::Engine;
    match base64::engine::general_purpose::STANDARD.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(()),
        _ => Err(format!(
            "secret_env {var}: a standard signature's secret is whsec_ and base64 of its key"
        )),
    }
}

impl std::fmt::Debug for SinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSpec::Log => f.write_str("Log"),
            SinkSpec::Http {
                url,
                secret,
                signature,
                timeout,
            } => f
                .debug_struct("Http")
                .field("url", &redacted(url))
                .field("secret", secret)
                .field("signature", signature)
                .field("timeout", timeout)
                .finish(),
            SinkSpec::Sqs {
                queue_url,
                group,
                batch,
            } => f
                .debug_struct("Sqs")
                .field("queue_url", &redacted(queue_url))
                .field("group", group)
                .field("batch", batch)
                .finish(),
        }
    }
}

impl RouteTable {
    /// The sink for `event_type`: its route, else the default.
    pub fn sink_for(&self, event_type: &str) -> Option<&SinkSpec> {
        self.routes.get(event_type).or(self.default.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "HOOK_SECRET").then(|| "s3cret".to_string())
    }

    #[test]
    fn a_full_table_parses() {
        let table = parse(
            r#"{"routes": {
                  "a": {"sink": "http", "url": "https://h.example/x", "secret_env": "HOOK_SECRET", "timeout_ms": 500},
                  "b": {"sink": "sqs", "queue_url": "http://127.0.0.1:5000/1/q.fifo", "group": "g"}},
                "default": {"sink": "log"}, "no_route": "skip"}"#,
            &env,
        )
        .unwrap();
        assert_eq!(
            table.sink_for("a"),
            Some(&SinkSpec::Http {
                url: "https://h.example/x".into(),
                secret: Some(Secret::new("s3cret")),
                signature: SignatureScheme::Hmac,
                timeout: Duration::from_millis(500)
            })
        );
        assert!(
            matches!(table.sink_for("b"), Some(SinkSpec::Sqs { group: Some(g), batch: true, .. }) if g == "g"),
            "batching is on by default"
        );
        assert_eq!(table.sink_for("other"), Some(&SinkSpec::Log));
        assert_eq!(table.no_route, NoRoute::Skip);
    }

    #[test]
    fn an_sqs_route_can_turn_batching_off() {
        let table = parse(
            r#"{"routes": {
                  "on": {"sink": "sqs", "queue_url": "http://127.0.0.1:5000/1/q", "batch": true},
                  "off": {"sink": "sqs", "queue_url": "http://127.0.0.1:5000/1/q", "batch": false}}}"#,
            &env,
        )
        .unwrap();
        assert!(matches!(
            table.sink_for("on"),
            Some(SinkSpec::Sqs { batch: true, .. })
        ));
        assert!(matches!(
            table.sink_for("off"),
            Some(SinkSpec::Sqs { batch: false, .. })
        ));
        let err = parse(
            r#"{"routes": {"a": {"sink": "sqs", "queue_url": "http://h/1/q", "batch": "yes"}}}"#,
            &env,
        )
        .unwrap_err()
        .0;
        assert!(err.starts_with(r#"route "a": invalid type"#), "{err}");
        let err = parse(
            r#"{"routes": {"a": {"sink": "http", "url": "http://h/x", "batch": true}}}"#,
            &env,
        )
        .unwrap_err()
        .0;
        assert!(
            err.contains("unknown field `batch`"),
            "only sqs routes batch: {err}"
        );
    }

    #[test]
    fn without_a_default_an_unrouted_type_has_no_sink_and_dead_letters() {
        let table = parse(r#"{"routes": {"a": {"sink": "log"}}}"#, &env).unwrap();
        assert_eq!(table.sink_for("b"), None);
        assert_eq!(table.no_route, NoRoute::DeadLetter);
    }

    #[test]
    fn urls_lose_credentials_in_errors_and_debug_output() {
        let table =
            r#"{"routes": {"a": {"sink": "http", "url": "https://u:pw@h.example/x?token=t0k"}}}"#;
        let debug = format!("{:?}", parse(table, &env).unwrap());
        assert!(!debug.contains("pw") && !debug.contains("t0k"), "{debug}");
        let err = parse(
            r#"{"routes": {"a": {"sink": "http", "url": "ftp://u:pw@h/x?token=t0k"}}}"#,
            &env,
        )
        .unwrap_err()
        .0;
        assert!(!err.contains("pw") && !err.contains("t0k"), "{err}");
    }

    #[test]
    fn errors_name_the_route() {
        for (text, want) in [
            (
                r#"{"routes": {"a.b": {"sink": "kafka"}}}"#,
                r#"route "a.b": unknown variant `kafka`"#,
            ),
            (
                r#"{"routes": {"a.b": {"sink": "http", "url": "ftp://x/y"}}}"#,
                r#"route "a.b": "ftp://x/y" is not an http(s) URL"#,
            ),
            (
                r#"{"routes": {"a.b": {"sink": "http", "url": "not a url"}}}"#,
                r#"route "a.b": a 9-character value is not a URL"#,
            ),
            (
                r#"{"routes": {"a.b": {"sink": "http", "url": "https://x", "secret_env": "NOPE"}}}"#,
                "secret_env NOPE is not set",
            ),
            (
                r#"{"routes": {"a.b": {"sink": "sqs"}}}"#,
                r#"route "a.b": missing field `queue_url`"#,
            ),
            (
                r#"{"default": {"sink": "http"}}"#,
                "default route: missing field `url`",
            ),
            (
                r#"{"routes": {}, "no_route": "ignore"}"#,
                "not a route table",
            ),
            (r#"{"rutes": {}}"#, "not a route table"),
            (
                r#"{"routes": {"a": {"sink": "http", "url": "https://x", "signature": "standard"}}}"#,
                "\"signature\": \"standard\" needs a secret_env",
            ),
            (
                r#"{"routes": {"a": {"sink": "http", "url": "https://x", "signature": "standard", "secret_env": "HOOK_SECRET"}}}"#,
                "secret_env HOOK_SECRET: a standard signature's secret starts with whsec_",
            ),
            (
                r#"{"routes": {"a": {"sink": "http", "url": "https://x", "signature": "ed25519"}}}"#,
                "unknown variant `ed25519`",
            ),
        ] {
            let err = parse(text, &env).unwrap_err().0;
            assert!(err.starts_with(want) || err.contains(want), "{text}: {err}");
        }
    }
}
