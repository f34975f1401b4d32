//! Configuration, read from environment variables in one place.
//!
//! Every variable, its default and its meaning is listed in the book's configuration table;
//! keep the two in step. A malformed value is an error that names the variable, raised at cold
//! start so a bad deploy fails at once rather than on the first task. How each kind of value
//! is read and checked (durations, numbers, flags, the route table, …) is in `parse`.

use std::time::Duration;

use crate::secret::Secret;

mod parse;

use parse::*;

pub(crate) const DAY_MS: u64 = 24 * 3_600_000;

/// The shortest lease: long enough that ZooKeeper servers' clock skew, which a leader change
/// brings into lease expiry (ARCHITECTURE, "Time"), cannot free a lease its holder still
/// extends. Extensions come every third of it; the holder gives its handler up a fifth of it
/// before expiry.
pub const MIN_LEASE_TIMEOUT_MS: u64 = 10_000;

/// A configuration variable that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {problem} (got {value:?})")]
pub struct ConfigError {
    /// The environment variable, by name.
    pub variable: &'static str,
    /// What it held (empty when unset).
    pub value: String,
    /// What is wrong with it, and what it takes.
    pub problem: String,
}

/// A route table as configured, not yet parsed: where it came from and its text.
#[derive(Clone, PartialEq, Eq)]
pub struct RouteSource {
    /// `ROUTES` or `ROUTES_FILE`: what an error about the table names.
    pub variable: &'static str,
    /// `<inline JSON>`, or the file's path.
    pub origin: String,
    /// The JSON.
    pub text: String,
}

/// The text may hold URLs with credentials in their queries: only its origin and size show.
impl std::fmt::Debug for RouteSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteSource")
            .field("variable", &self.variable)
            .field("origin", &self.origin)
            .field("bytes", &self.text.len())
            .finish()
    }
}

/// The bridge's settings. Build it with [`Config::from_env`], or [`Config::default`] in tests.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// `ZOOKEEPER_CONNECTION_STRING`: hosts, optionally with a chroot (`h1:2181,h2:2181/app`).
    pub zookeeper: String,
    /// `EVENT_BRIDGE_ROOT`: the queue's root znode.
    pub root: String,
    /// `LEASE_TIMEOUT_MS`: how long a lease lives without an extension before it may be reaped.
    pub lease_timeout: Duration,
    /// `MAX_ATTEMPTS`: claims of one task before it goes to the dead letters.
    pub max_attempts: u32,
    /// `MAX_INTERRUPTIONS`: times a task may be released unfinished at a run's deadline
    /// before it goes to the dead letters.
    pub max_interruptions: u32,
    /// `MAX_TASKS_PER_RUN`: tasks a scheduled run claims.
    pub max_tasks_per_run: u32,
    /// `DRAIN_MAX_TASKS`: tasks a drain claims when the request names no cap.
    pub drain_max_tasks: u32,
    /// `DRAIN_CONCURRENCY`: tasks a drain keeps in flight at once.
    pub drain_concurrency: usize,
    /// `BACKOFF_BASE_MS`: the delay after the first retryable failure; doubles each attempt.
    pub backoff_base: Duration,
    /// `BACKOFF_MAX_MS`: the longest backoff.
    pub backoff_max: Duration,
    /// `DEDUP_WINDOW_MS`: how long after its task completed an idempotency key still stops
    /// a publish.
    pub dedup_window: Duration,
    /// `KEEP_DONE` (`90s`, `30m`, `1h`, `7d`): how long a completed task's record is kept
    /// (`status` says `completed` with it); unset, no record is written.
    pub keep_done: Option<Duration>,
    /// `LANE_WEIGHTS` (`high=6,normal=3,low=1`): consumers share their walks among the
    /// priority lanes by these weights; unset, they take high before normal before low.
    pub lane_weights: Option<crate::lane::LaneWeights>,
    /// `CHECKPOINT_MAX_BYTES`: the largest part of a resumable task's record its envelope
    /// may keep (its checkpoint, the sleep or wait it is in, the steps not yet in step znodes,
    /// as JSON): one step's result at most this, any number of steps.
    pub checkpoint_max_bytes: usize,
    /// `SIGNAL_KEEP_MS`: how long a signal no task waits for is kept for
    /// the first wait of its key.
    pub signal_keep: Duration,
    /// `GONE_PARENTS`: what the reaper does with a parent gone from the queue without an end
    /// (see `inspect::audit`): counts its children stuck (the default), or takes it as
    /// completed.
    pub gone_parents: GoneParents,
    /// `EVENT_BRIDGE_HANDLER_VERSION`: the handler version a resumable task records when it
    /// starts (see `Steps::started_with`).
    pub handler_version: Option<String>,
    /// `TIME_BUDGET_MS`: how long a run may take when the platform gives no deadline.
    pub time_budget: Duration,
    /// `DEADLINE_MARGIN_MS`: stop claiming this long before the deadline.
    pub deadline_margin: Duration,
    /// `ZOOKEEPER_CONNECT_TIMEOUT_MS`: give up connecting after this long.
    pub connect_timeout: Duration,
    /// `ZOOKEEPER_SESSION_TIMEOUT_MS`: the session timeout asked of the server.
    pub session_timeout: Duration,
    /// `CRON_SECRET`: when set, HTTP triggers must send `Authorization: Bearer <secret>`.
    pub cron_secret: Option<Secret>,
    /// `PUBLISH_SECRET`: the bearer secret of HTTP publishing and status on Vercel (distinct
    /// from `CRON_SECRET`); unset, those requests are refused.
    pub publish_secret: Option<Secret>,
    /// `PUBLISH_MAX_BYTES`: the largest HTTP publish body.
    pub publish_max_bytes: usize,
    /// `METRICS_EMF`: print a CloudWatch Embedded Metric Format line per invocation (default:
    /// on when running on Lambda, where `AWS_LAMBDA_FUNCTION_NAME` is set).
    pub metrics_emf: bool,
    /// `METRICS_NAMESPACE`: the metrics' CloudWatch namespace.
    pub metrics_namespace: String,
    /// `METRICS_DIMENSIONS` (`Name=value,…`): dimensions added to `Function` and `Queue`.
    pub metrics_dimensions: Vec<(String, String)>,
    /// `ALLOW_UNAUTHENTICATED` (`1`/`true`): with no `CRON_SECRET`, HTTP triggers answer anyone
    /// (for local use); otherwise they refuse every request. The same for the dashboard's
    /// admin actions without `DASHBOARD_TOKEN`.
    pub allow_unauthenticated: bool,
    /// `DASHBOARD_TOKEN`: what an operator types to sign in to `serve --admin`.
    pub dashboard_token: Option<Secret>,
    /// `ZOOKEEPER_AUTH`: `user:password` for ZooKeeper digest authentication. When set, the
    /// nodes the bridge creates are readable and writable by that user only.
    pub zookeeper_auth: Option<Secret>,
    /// `ROUTES` (JSON) or `ROUTES_FILE` (path to JSON): event types to sinks, as configured.
    /// The sinks module parses and checks it where sinks are built (`process_events`, the CLI,
    /// the worker); when set they deliver through it instead of `EVENT_BRIDGE_HANDLER`.
    pub routes: Option<RouteSource>,
    /// `DEAD_LETTER_QUEUE_URL`: an SQS queue that also receives every dead letter.
    pub dead_letter_queue_url: Option<String>,
    /// `EVENT_BRIDGE_HANDLER`: `log` or `noop`.
    pub handler: HandlerKind,
    /// `EVENT_BRIDGE_KICK` (`on`/`off`), with `EVENT_BRIDGE_KICK_URL`, `KICK_STALE_MS`,
    /// `KICK_WAIT_MS` and `KICK_LINGER_MS`: whether publishers kick a drain (see
    /// [`crate::kick`]).
    pub kick: Option<KickConfig>,
}

/// Kicks, when `EVENT_BRIDGE_KICK=on`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KickConfig {
    /// `EVENT_BRIDGE_KICK_URL`: process_events' authenticated HTTP trigger, POSTed with
    /// `Authorization: Bearer $CRON_SECRET`; or `lambda:<function name or ARN>`, invoked
    /// asynchronously through Lambda's Invoke API with the standard AWS credentials.
    pub url: String,
    /// `AWS_ENDPOINT_URL_LAMBDA`, else `AWS_ENDPOINT_URL`: where a `lambda:` kick is sent
    /// instead of Lambda's endpoint in the function's region.
    pub lambda_endpoint: Option<String>,
    /// `KICK_STALE_MS`: a kick node older than this (by ZooKeeper's clock) is taken as a lost
    /// kick, and the next publisher kicks again.
    pub stale_after: Duration,
    /// `KICK_WAIT_MS`: how long a publisher waits for the trigger's answer; past it, the
    /// publish returns and the request goes on without it (connecting and sending, for up to
    /// `KICK_STALE_MS`), as does the drain it starts.
    pub wait: Duration,
    /// `KICK_LINGER_MS`: how long a kicked drain goes on looking for tasks (every 100 ms)
    /// before it clears the kick node: while it lingers, publishers do not kick, and it runs
    /// their tasks.
    pub linger: Duration,
}

impl KickConfig {
    /// The function a `lambda:` kick invokes, if the kick goes through Lambda's Invoke API.
    pub fn lambda_function(&self) -> Option<&str> {
        self.url.strip_prefix("lambda:")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            zookeeper: "127.0.0.1:2181".into(),
            root: "/event-bridge".into(),
            lease_timeout: Duration::from_secs(300),
            max_attempts: 5,
            max_interruptions: 3,
            max_tasks_per_run: 1,
            drain_max_tasks: 10_000,
            drain_concurrency: 64,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            dedup_window: Duration::from_secs(24 * 3600),
            keep_done: None,
            lane_weights: None,
            checkpoint_max_bytes: 64 * 1024,
            signal_keep: Duration::from_secs(24 * 3600),
            gone_parents: GoneParents::Stuck,
            handler_version: None,
            time_budget: Duration::from_secs(50),
            deadline_margin: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
            session_timeout: Duration::from_secs(10),
            cron_secret: None,
            publish_secret: None,
            publish_max_bytes: 512 * 1024,
            metrics_emf: false,
            metrics_namespace: "EventBridge/Queue".into(),
            metrics_dimensions: Vec::new(),
            allow_unauthenticated: false,
            dashboard_token: None,
            zookeeper_auth: None,
            routes: None,
            dead_letter_queue_url: None,
            handler: HandlerKind::Log,
            kick: None,
        }
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup`; an empty value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let d = Config::default();
        let config = Config {
            zookeeper: get("ZOOKEEPER_CONNECTION_STRING").unwrap_or(d.zookeeper),
            root: root(get("EVENT_BRIDGE_ROOT"))?.unwrap_or(d.root),
            lease_timeout: millis(&get, "LEASE_TIMEOUT_MS", MIN_LEASE_TIMEOUT_MS, DAY_MS)?
                .unwrap_or(d.lease_timeout),
            max_attempts: number(&get, "MAX_ATTEMPTS", 1)?.unwrap_or(d.max_attempts),
            max_interruptions: number(&get, "MAX_INTERRUPTIONS", 1)?.unwrap_or(d.max_interruptions),
            max_tasks_per_run: number(&get, "MAX_TASKS_PER_RUN", 1)?.unwrap_or(d.max_tasks_per_run),
            drain_max_tasks: number(&get, "DRAIN_MAX_TASKS", 1)?.unwrap_or(d.drain_max_tasks),
            drain_concurrency: number(&get, "DRAIN_CONCURRENCY", 1)?
                .map(|n: u32| n as usize)
                .unwrap_or(d.drain_concurrency),
            backoff_base: millis(&get, "BACKOFF_BASE_MS", 0, 7 * DAY_MS)?.unwrap_or(d.backoff_base),
            backoff_max: millis(&get, "BACKOFF_MAX_MS", 0, 7 * DAY_MS)?.unwrap_or(d.backoff_max),
            dedup_window: millis(&get, "DEDUP_WINDOW_MS", 1_000, 365 * DAY_MS)?
                .unwrap_or(d.dedup_window),
            keep_done: span(&get, "KEEP_DONE", 1_000, 30 * DAY_MS)?,
            lane_weights: match get("LANE_WEIGHTS") {
                Some(raw) => Some(crate::lane::LaneWeights::parse(&raw).map_err(|problem| {
                    let fix = "set it as high=6,normal=3,low=1 (each 1 to 1000)";
                    invalid("LANE_WEIGHTS", &raw, format!("{problem}: {fix}"))
                })?),
                None => None,
            },
            checkpoint_max_bytes: bytes(&get, "CHECKPOINT_MAX_BYTES", 1_024, 512 * 1024)?
                .unwrap_or(d.checkpoint_max_bytes),
            signal_keep: millis(&get, "SIGNAL_KEEP_MS", 1_000, 365 * DAY_MS)?
                .unwrap_or(d.signal_keep),
            gone_parents: gone_parents(get("GONE_PARENTS"))?.unwrap_or(d.gone_parents),
            handler_version: get("EVENT_BRIDGE_HANDLER_VERSION").filter(|v| !v.is_empty()),
            time_budget: millis(&get, "TIME_BUDGET_MS", 1_000, DAY_MS)?.unwrap_or(d.time_budget),
            deadline_margin: millis(&get, "DEADLINE_MARGIN_MS", 0, DAY_MS)?
                .unwrap_or(d.deadline_margin),
            connect_timeout: millis(&get, "ZOOKEEPER_CONNECT_TIMEOUT_MS", 100, 600_000)?
                .unwrap_or(d.connect_timeout),
            session_timeout: millis(&get, "ZOOKEEPER_SESSION_TIMEOUT_MS", 1_000, 600_000)?
                .unwrap_or(d.session_timeout),
            cron_secret: get("CRON_SECRET").map(Secret::new),
            publish_secret: get("PUBLISH_SECRET").map(Secret::new),
            publish_max_bytes: bytes(&get, "PUBLISH_MAX_BYTES", 1, 900 * 1024)?
                .unwrap_or(d.publish_max_bytes),
            allow_unauthenticated: flag(&get, "ALLOW_UNAUTHENTICATED")?.unwrap_or(false),
            dashboard_token: get("DASHBOARD_TOKEN").map(Secret::new),
            metrics_emf: flag(&get, "METRICS_EMF")?
                .unwrap_or_else(|| get("AWS_LAMBDA_FUNCTION_NAME").is_some()),
            metrics_namespace: namespace(get("METRICS_NAMESPACE"))?.unwrap_or(d.metrics_namespace),
            metrics_dimensions: dimensions(get("METRICS_DIMENSIONS"))?,
            zookeeper_auth: digest(get("ZOOKEEPER_AUTH"))?,
            routes: routes(get("ROUTES"), get("ROUTES_FILE"))?,
            dead_letter_queue_url: get("DEAD_LETTER_QUEUE_URL"),
            handler: handler(get("EVENT_BRIDGE_HANDLER"))?.unwrap_or(d.handler),
            kick: kick(&get)?,
        };
        if config.deadline_margin >= config.time_budget {
            let value = config.deadline_margin.as_millis().to_string();
            let problem = format!(
                "set it below TIME_BUDGET_MS ({} ms), or no run would ever claim",
                config.time_budget.as_millis()
            );
            return Err(invalid("DEADLINE_MARGIN_MS", &value, problem));
        }
        Ok(config)
    }
}

/// `EVENT_BRIDGE_KICK` and the settings it needs when `on`.
fn kick(get: &impl Fn(&str) -> Option<String>) -> Result<Option<KickConfig>, ConfigError> {
    if !flag(get, "EVENT_BRIDGE_KICK")?.unwrap_or(false) {
        return Ok(None);
    }
    let url = get("EVENT_BRIDGE_KICK_URL").ok_or_else(|| {
        let fix = "set it to process_events' HTTP trigger (https://…/api/process_events?drain=1) \
                   or to lambda:<its name or ARN>, or set EVENT_BRIDGE_KICK=off";
        invalid(
            "EVENT_BRIDGE_KICK_URL",
            "",
            format!("required with EVENT_BRIDGE_KICK=on: {fix}"),
        )
    })?;
    let lambda = url.strip_prefix("lambda:");
    if lambda.is_some_and(|function| function.trim().is_empty()) {
        let problem: String = "names no function: set lambda:<process_events' name or ARN>".into();
        return Err(invalid("EVENT_BRIDGE_KICK_URL", &url, problem));
    }
    if lambda.is_none() && !(url.starts_with("http://") || url.starts_with("https://")) {
        let problem = "not an http:// or https:// URL, nor lambda:<function>: set \
                       process_events' HTTP trigger, or its name or ARN";
        let problem: String = problem.into();
        return Err(invalid("EVENT_BRIDGE_KICK_URL", &url, problem));
    }
    Ok(Some(KickConfig {
        url,
        lambda_endpoint: get("AWS_ENDPOINT_URL_LAMBDA").or_else(|| get("AWS_ENDPOINT_URL")),
        stale_after: millis(get, "KICK_STALE_MS", 1_000, DAY_MS)?
            .unwrap_or(Duration::from_secs(30)),
        wait: millis(get, "KICK_WAIT_MS", 10, 600_000)?.unwrap_or(Duration::from_secs(1)),
        linger: millis(get, "KICK_LINGER_MS", 0, 600_000)?.unwrap_or(Duration::from_secs(1)),
    }))
}

/// Which built-in handler runs tasks (`EVENT_BRIDGE_HANDLER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerKind {
    /// Log each task at INFO and succeed (the default, and the demo's).
    Log,
    /// Succeed without doing anything (benchmarks).
    Noop,
}

impl HandlerKind {
    /// `log` or `noop`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "log" => Some(HandlerKind::Log),
            "noop" => Some(HandlerKind::Noop),
            _ => None,
        }
    }
}

/// What the reaper does with a parent gone from the queue without an end (`GONE_PARENTS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GoneParents {
    /// Counts its waiting children stuck, and leaves the parent to `event-bridge end-parent`
    /// (`stuck`, the default).
    #[default]
    Stuck,
    /// Takes it as completed, as a 000-design consumer's delete means, and lets its children
    /// go on (`completed`).
    Completed,
}

impl GoneParents {
    /// `stuck` or `completed`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "stuck" => Some(GoneParents::Stuck),
            "completed" => Some(GoneParents::Completed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        assert_eq!(parse(&[]).unwrap(), Config::default());
    }

    #[test]
    fn reads_every_documented_variable() {
        let c = parse(&[
            ("ZOOKEEPER_CONNECTION_STRING", "zk1:2181,zk2:2181/app"),
            ("EVENT_BRIDGE_ROOT", "/q/orders/"),
            ("LEASE_TIMEOUT_MS", "60000"),
            ("MAX_ATTEMPTS", "3"),
            ("MAX_TASKS_PER_RUN", "4"),
            ("CRON_SECRET", "s3cret"),
            ("EVENT_BRIDGE_HANDLER", "noop"),
            ("EVENT_BRIDGE_KICK", "on"),
            (
                "EVENT_BRIDGE_KICK_URL",
                "https://shop.example/api/process_events?drain=1",
            ),
            ("KICK_STALE_MS", "5000"),
            ("KICK_WAIT_MS", "250"),
            ("DEDUP_WINDOW_MS", "3600000"),
            ("ALLOW_UNAUTHENTICATED", "True"),
            ("KEEP_DONE", "1h"),
            ("PUBLISH_SECRET", "p"),
            ("PUBLISH_MAX_BYTES", "1000"),
            ("METRICS_EMF", "1"),
            ("METRICS_NAMESPACE", "Shop/Queue"),
            ("METRICS_DIMENSIONS", "Stage=prod, Team=payments"),
            ("GONE_PARENTS", "completed"),
        ])
        .unwrap();
        assert_eq!(c.gone_parents, GoneParents::Completed);
        assert!(c.metrics_emf);
        assert_eq!(c.metrics_namespace, "Shop/Queue");
        assert_eq!(c.metrics_dimensions.len(), 2);
        assert_eq!(c.publish_max_bytes, 1000);
        assert_eq!(c.publish_secret.as_ref().map(Secret::expose), Some("p"));
        assert_eq!(c.keep_done, Some(Duration::from_secs(3600)));
        assert!(c.allow_unauthenticated);
        let kick = c.kick.as_ref().expect("kicks on");
        assert_eq!(kick.url, "https://shop.example/api/process_events?drain=1");
        assert_eq!(kick.stale_after, Duration::from_secs(5));
        assert_eq!(kick.wait, Duration::from_millis(250));
        assert_eq!(c.dedup_window, Duration::from_secs(3600));
        assert_eq!(c.zookeeper, "zk1:2181,zk2:2181/app");
        assert_eq!(c.root, "/q/orders");
        assert_eq!(c.lease_timeout, Duration::from_secs(60));
        assert_eq!((c.max_attempts, c.max_tasks_per_run), (3, 4));
        assert_eq!(c.cron_secret.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(c.handler, HandlerKind::Noop);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("LEASE_TIMEOUT_MS", "5m"),
            ("LEASE_TIMEOUT_MS", "10"),
            ("LEASE_TIMEOUT_MS", "9999"),
            ("MAX_ATTEMPTS", "0"),
            ("MAX_ATTEMPTS", "-1"),
            ("EVENT_BRIDGE_ROOT", "event-bridge"),
            ("EVENT_BRIDGE_ROOT", "/a//b"),
            ("EVENT_BRIDGE_HANDLER", "http"),
            ("DEADLINE_MARGIN_MS", "60000"),
            ("ALLOW_UNAUTHENTICATED", "maybe"),
            ("EVENT_BRIDGE_KICK", "maybe"),
            ("KEEP_DONE", "1 hour"),
            ("KEEP_DONE", "3600"),
            ("KEEP_DONE", "10ms"),
            ("KEEP_DONE", "31d"),
            ("PUBLISH_MAX_BYTES", "2000000"),
            ("METRICS_NAMESPACE", "AWS/Lambda"),
            ("METRICS_DIMENSIONS", "Stage"),
            ("METRICS_DIMENSIONS", "Function=x"),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.variable, var);
            assert!(err.to_string().starts_with(var), "{err}");
        }
    }

    #[test]
    fn durations_out_of_range_name_their_variable() {
        for (var, value, problem) in [
            // Past i64 milliseconds: would wrap in expiry arithmetic and free live leases.
            ("LEASE_TIMEOUT_MS", "9300000000000000000", "at most"),
            ("LEASE_TIMEOUT_MS", "18446744073709551615", "at most"),
            // Too short to survive a leader change with its clock skew (see ARCHITECTURE).
            ("LEASE_TIMEOUT_MS", "5000", "at least 10000"),
            ("BACKOFF_MAX_MS", "9300000000000000000", "at most"),
            ("DEDUP_WINDOW_MS", "999", "at least"),
            ("BACKOFF_BASE_MS", "9300000000000000000", "at most"),
            ("TIME_BUDGET_MS", "9300000000000000000", "at most"),
            ("DEADLINE_MARGIN_MS", "9300000000000000000", "at most"),
            (
                "ZOOKEEPER_CONNECT_TIMEOUT_MS",
                "9300000000000000000",
                "at most",
            ),
            (
                "ZOOKEEPER_SESSION_TIMEOUT_MS",
                "9300000000000000000",
                "at most",
            ),
        ] {
            let err = parse(&[(var, value)]).unwrap_err();
            assert_eq!(err.variable, var, "{err}");
            assert!(err.problem.contains(problem), "{var}={value}: {err}");
        }
        assert!(parse(&[("LEASE_TIMEOUT_MS", "10000")]).is_ok());
        assert!(parse(&[("LEASE_TIMEOUT_MS", "86400000")]).is_ok());
    }

    #[test]
    fn credentials_never_show_in_debug_output_or_errors() {
        let c = parse(&[
            ("ZOOKEEPER_AUTH", "bridge:hunter2"),
            ("CRON_SECRET", "s3cret"),
        ])
        .unwrap();
        assert_eq!(
            c.zookeeper_auth.as_ref().map(Secret::expose),
            Some("bridge:hunter2")
        );
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("s3cret"),
            "{debug}"
        );
        let err = parse(&[("ZOOKEEPER_AUTH", "hunter2")]).unwrap_err();
        assert_eq!(err.variable, "ZOOKEEPER_AUTH");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn routes_come_inline_or_from_a_file_and_are_parsed_where_sinks_are_built() {
        let inline = r#"{"routes": {"a": {"sink": "kafka"}}}"#;
        let c = parse(&[("ROUTES", inline)]).unwrap();
        let source = c.routes.unwrap();
        assert_eq!((source.variable, source.text.as_str()), ("ROUTES", inline));
        let missing = parse(&[("ROUTES_FILE", "/nonexistent/routes.json")]).unwrap_err();
        assert_eq!(missing.variable, "ROUTES_FILE");
        assert!(parse(&[("ROUTES", inline), ("ROUTES_FILE", "/x")]).is_err());
    }

    #[test]
    fn the_configuration_table_lists_every_variable_read_here() {
        let readme = include_str!("../../../docs/book/src/reference/configuration.md");
        let source = [include_str!("mod.rs"), include_str!("parse.rs")].concat();
        // Every upper-case string literal of four or more characters names a variable.
        let quotes: Vec<usize> = source.match_indices('"').map(|(i, _)| i).collect();
        let mut variables: Vec<&str> = quotes
            .windows(2)
            .map(|w| &source[w[0] + 1..w[1]])
            .filter(|s| s.len() > 3 && s.as_bytes()[0].is_ascii_uppercase())
            .filter(|s| {
                s.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            })
            .collect();
        variables.sort_unstable();
        variables.dedup();
        let mut checked = 0;
        for variable in variables {
            assert!(
                readme.contains(&format!("| `{variable}` |")),
                "{variable} is missing from the book's configuration table (docs/book/src/reference/configuration.md)"
            );
            checked += 1;
        }
        assert!(checked >= 19, "only {checked} variables found");
    }

    #[test]
    fn kicks_are_off_by_default_and_need_their_url_when_on() {
        assert_eq!(parse(&[]).unwrap().kick, None);
        assert_eq!(parse(&[("EVENT_BRIDGE_KICK", "off")]).unwrap().kick, None);
        let missing = parse(&[("EVENT_BRIDGE_KICK", "on")]).unwrap_err();
        assert_eq!(missing.variable, "EVENT_BRIDGE_KICK_URL");
        assert!(
            missing
                .problem
                .contains("required with EVENT_BRIDGE_KICK=on"),
            "{missing}"
        );
        let kick = [
            ("EVENT_BRIDGE_KICK", "on"),
            ("EVENT_BRIDGE_KICK_URL", "ftp://x"),
        ];
        assert_eq!(parse(&kick).unwrap_err().variable, "EVENT_BRIDGE_KICK_URL");
        let kick = [
            ("EVENT_BRIDGE_KICK", "on"),
            ("EVENT_BRIDGE_KICK_URL", "http://x/"),
        ];
        let defaults = parse(&kick).unwrap().kick.expect("on");
        assert_eq!(defaults.stale_after, Duration::from_secs(30));
        assert_eq!(defaults.wait, Duration::from_secs(1));
        assert_eq!(defaults.linger, Duration::from_secs(1));
        assert_eq!(defaults.lambda_function(), None);
        let lambda = [
            ("EVENT_BRIDGE_KICK", "on"),
            ("EVENT_BRIDGE_KICK_URL", "lambda:process-events"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ENDPOINT_URL_LAMBDA", "http://127.0.0.1:2"),
        ];
        let lambda = parse(&lambda).unwrap().kick.expect("on");
        assert_eq!(lambda.lambda_function(), Some("process-events"));
        assert_eq!(
            lambda.lambda_endpoint.as_deref(),
            Some("http://127.0.0.1:2")
        );
        let nameless = [
            ("EVENT_BRIDGE_KICK", "on"),
            ("EVENT_BRIDGE_KICK_URL", "lambda:"),
        ];
        let nameless = parse(&nameless).unwrap_err();
        assert!(nameless.problem.contains("names no function"), "{nameless}");
    }

    #[test]
    fn an_empty_value_counts_as_unset() {
        assert_eq!(parse(&[("CRON_SECRET", " ")]).unwrap().cron_secret, None);
    }
}
