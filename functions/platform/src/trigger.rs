//! What an invocation was asked to do, read from a Lambda event or an HTTP request.
//! Pure functions, shared by the Lambda and Vercel binaries.

use std::time::Duration;

use serde_json::Value;

/// The two kinds of run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A scheduled run: claim up to `MAX_TASKS_PER_RUN` tasks.
    Scheduled,
    /// A manual drain: claim until the queue is empty, the cap is reached or time runs out.
    Drain { max_tasks: Option<u32> },
}

impl Trigger {
    /// The claim cap for this trigger under `config`.
    pub fn max_tasks(&self, config: &event_bridge::Config) -> u32 {
        match *self {
            Trigger::Scheduled => config.max_tasks_per_run,
            Trigger::Drain { max_tasks } => max_tasks.unwrap_or(config.drain_max_tasks),
        }
    }

    /// Tasks in flight at once: one at a time for a scheduled run of one task.
    pub fn concurrency(&self, config: &event_bridge::Config) -> usize {
        (self.max_tasks(config) as usize).clamp(1, config.drain_concurrency)
    }
}

/// How a Lambda event asked to be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A plain JSON result (scheduled and manual invocations).
    Json,
    /// An HTTP response object (Function URL requests).
    Http,
}

/// Reads a Lambda event: a Function URL request or `{"mode":"drain"}` drains, an EventBridge
/// schedule, `{"mode":"scheduled"}` or an empty event runs one scheduled batch.
pub fn from_lambda_event(event: &Value) -> Result<(Trigger, Reply), String> {
    if event.pointer("/requestContext/http").is_some() {
        let query = event
            .get("rawQueryString")
            .and_then(Value::as_str)
            .unwrap_or("");
        // The Function URL exists for manual draining: every request to it drains.
        let max_tasks = match from_query(query)? {
            Trigger::Drain { max_tasks } => max_tasks,
            Trigger::Scheduled => query_cap(query)?,
        };
        return Ok((Trigger::Drain { max_tasks }, Reply::Http));
    }
    if event.get("source").and_then(Value::as_str) == Some("aws.events") {
        return Ok((Trigger::Scheduled, Reply::Json));
    }
    let max_tasks = match event.get("max_tasks") {
        None | Some(Value::Null) => None,
        Some(v) => Some(cap(v.as_u64(), &v.to_string())?),
    };
    match event.get("mode").and_then(Value::as_str) {
        Some("drain") => Ok((Trigger::Drain { max_tasks }, Reply::Json)),
        _ if max_tasks.is_some() => {
            Err("max_tasks applies to a drain: send {\"mode\": \"drain\", \"max_tasks\": N}".into())
        }
        Some("scheduled") | None => Ok((Trigger::Scheduled, Reply::Json)),
        Some(other) => Err(format!(
            "unknown mode {other:?}: send \"drain\" or \"scheduled\""
        )),
    }
}

/// The `max_tasks` of a query string, if any.
fn query_cap(query: &str) -> Result<Option<u32>, String> {
    match from_query(&format!("{query}&drain=1"))? {
        Trigger::Drain { max_tasks } => Ok(max_tasks),
        Trigger::Scheduled => Ok(None),
    }
}

/// Reads an HTTP query string: `drain=1` (or `true`) drains, `max_tasks=N` caps it.
pub fn from_query(query: &str) -> Result<Trigger, String> {
    let mut drain = false;
    let mut max_tasks = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "drain" => drain = matches!(value, "" | "1" | "true" | "yes"),
            "max_tasks" => max_tasks = Some(cap(value.parse().ok(), value)?),
            _ => {}
        }
    }
    Ok(if drain {
        Trigger::Drain { max_tasks }
    } else {
        Trigger::Scheduled
    })
}

fn cap(parsed: Option<u64>, raw: &str) -> Result<u32, String> {
    match parsed {
        Some(n) if (1..=u32::MAX as u64).contains(&n) => Ok(n as u32),
        _ => Err(format!("max_tasks is {raw}: send a positive whole number")),
    }
}

/// The time left to an invocation whose platform deadline is `deadline_ms` (ms since the
/// epoch; 0 when there is none) at `now_ms`. A deadline in the past or over 15 minutes away is
/// not believed (`cargo lambda watch` sends one just after 1970), and `budget` applies.
pub fn time_left(deadline_ms: u64, now_ms: u64, budget: Duration) -> Duration {
    const LAMBDA_MAX: u64 = 15 * 60 * 1000;
    match deadline_ms.checked_sub(now_ms) {
        Some(left) if left > 0 && left <= LAMBDA_MAX => Duration::from_millis(left),
        _ => budget,
    }
}

/// Whether an `Authorization` header carries `Bearer <secret>` (the scheme's name in any
/// case, as HTTP has it); with no secret set, whether unauthenticated requests were explicitly
/// allowed (`open`). The token is compared in constant time.
pub fn authorized(header: Option<&str>, secret: Option<&str>, open: bool) -> bool {
    let Some(secret) = secret else { return open };
    let Some(token) = header.and_then(bearer_token) else {
        return false;
    };
    let (a, b) = (token.as_bytes(), secret.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of a `Bearer` credential: after the scheme's name (any case) and one space.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case("bearer ").then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lambda_events_map_to_triggers() {
        let cases = [
            (
                json!({"source": "aws.events", "detail-type": "Scheduled Event"}),
                Trigger::Scheduled,
                Reply::Json,
            ),
            (json!({}), Trigger::Scheduled, Reply::Json),
            (
                json!({"mode": "drain"}),
                Trigger::Drain { max_tasks: None },
                Reply::Json,
            ),
            (
                json!({"mode": "drain", "max_tasks": 500}),
                Trigger::Drain {
                    max_tasks: Some(500),
                },
                Reply::Json,
            ),
            (
                json!({"rawQueryString": "", "requestContext": {"http": {"method": "POST"}}}),
                Trigger::Drain { max_tasks: None },
                Reply::Http,
            ),
            (
                json!({"rawQueryString": "max_tasks=7&drain=1", "requestContext": {"http": {"method": "GET"}}}),
                Trigger::Drain { max_tasks: Some(7) },
                Reply::Http,
            ),
        ];
        for (event, trigger, reply) in cases {
            assert_eq!(from_lambda_event(&event), Ok((trigger, reply)), "{event}");
        }
    }

    #[test]
    fn bad_lambda_events_say_why() {
        assert!(
            from_lambda_event(&json!({"mode": "flush"}))
                .unwrap_err()
                .contains("unknown mode")
        );
        assert!(
            from_lambda_event(&json!({"mode": "drain", "max_tasks": 0}))
                .unwrap_err()
                .contains("max_tasks")
        );
        assert!(from_lambda_event(&json!({"mode": "drain", "max_tasks": "x"})).is_err());
        let unclear = from_lambda_event(&json!({"max_tasks": 500})).unwrap_err();
        assert!(unclear.contains("mode"), "{unclear}");
    }

    #[test]
    fn queries_map_to_triggers() {
        assert_eq!(from_query(""), Ok(Trigger::Scheduled));
        assert_eq!(
            from_query("drain=1"),
            Ok(Trigger::Drain { max_tasks: None })
        );
        assert_eq!(from_query("drain=0"), Ok(Trigger::Scheduled));
        assert_eq!(
            from_query("drain&max_tasks=3"),
            Ok(Trigger::Drain { max_tasks: Some(3) })
        );
        assert!(from_query("drain=1&max_tasks=-2").is_err());
    }

    #[test]
    fn implausible_deadlines_fall_back_to_the_budget() {
        let budget = Duration::from_secs(50);
        let now = 1_800_000_000_000;
        assert_eq!(
            time_left(now + 30_000, now, budget),
            Duration::from_secs(30)
        );
        assert_eq!(time_left(600_000, now, budget), budget); // cargo lambda watch
        assert_eq!(time_left(0, now, budget), budget);
        assert_eq!(time_left(now + 3_600_000, now, budget), budget);
    }

    #[test]
    fn bearer_tokens_must_match_the_secret() {
        for open in [false, true] {
            assert!(authorized(Some("Bearer s3"), Some("s3"), open));
            assert!(!authorized(None, Some("s3"), open));
            assert!(!authorized(Some("Bearer s4"), Some("s3"), open));
            assert!(!authorized(Some("s3"), Some("s3"), open));
            assert!(!authorized(Some("Bearer s33"), Some("s3"), open));
            // The scheme's name is case-insensitive (RFC 9110, 11.1); the token is not.
            assert!(authorized(Some("bearer s3"), Some("s3"), open));
            assert!(authorized(Some("BEARER s3"), Some("s3"), open));
            assert!(!authorized(Some("Bearer S3"), Some("s3"), open));
            assert!(!authorized(Some("Bearers3"), Some("s3"), open));
        }
    }

    #[test]
    fn without_a_secret_only_an_explicit_opt_out_lets_requests_in() {
        assert!(!authorized(None, None, false));
        assert!(!authorized(Some("Bearer anything"), None, false));
        assert!(authorized(None, None, true));
    }
}
