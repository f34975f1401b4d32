//! Reading one variable each: durations, numbers, flags, sizes, the metrics namespace and
//! dimensions, the root, the route table's source, the ZooKeeper credential, the handler and
//! what the reaper does with a gone parent.
//! Every error names its variable.

use std::time::Duration;

use super::{ConfigError, DAY_MS, RouteSource};
use super::{GoneParents, HandlerKind};
use crate::secret::Secret;

pub(super) fn invalid(
    variable: &'static str,
    value: &str,
    problem: impl Into<String>,
) -> ConfigError {
    ConfigError {
        variable,
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// A duration written with its unit (`1500ms`, `90s`, `30m`, `1h`, `7d`), from `min_ms` to
/// `max_ms`.
pub(super) fn span(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    min_ms: u64,
    max_ms: u64,
) -> Result<Option<Duration>, ConfigError> {
    let Some(raw) = get(variable) else {
        return Ok(None);
    };
    let ms = crate::clock::span_ms(&raw).ok_or_else(|| {
        invalid(
            variable,
            &raw,
            "set it to a number with a unit: ms, s, m, h or d (e.g. 90s)",
        )
    })?;
    if !(min_ms..=max_ms).contains(&ms) {
        let problem = format!("set it to at least {min_ms} ms and at most {max_ms} ms");
        return Err(invalid(variable, &raw, problem));
    }
    Ok(Some(Duration::from_millis(ms)))
}

/// A number of bytes from `min` to `max` (a multi-op must stay under ZooKeeper's 1 MB).
pub(super) fn bytes(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    min: usize,
    max: usize,
) -> Result<Option<usize>, ConfigError> {
    match number::<usize>(get, variable, min)? {
        Some(n) if n > max => {
            let raw = n.to_string();
            Err(invalid(variable, &raw, format!("set it to at most {max}")))
        }
        other => Ok(other),
    }
}

/// A CloudWatch namespace: 1 to 255 characters, not starting with `AWS/`.
pub(super) fn namespace(raw: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let text = raw.trim();
    if text.is_empty() || text.len() > 255 || text.starts_with("AWS/") {
        let problem = "set it to 1 to 255 characters, not starting with AWS/";
        return Err(invalid("METRICS_NAMESPACE", &raw, problem));
    }
    Ok(Some(text.to_string()))
}

/// `Name=value,…`: at most 28 more dimensions (CloudWatch takes 30, two are ours), names not
/// starting with `:`, values not empty.
pub(super) fn dimensions(raw: Option<String>) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let mut dims = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            invalid(
                "METRICS_DIMENSIONS",
                &raw,
                "set it to Name=value pairs, comma-separated (names other than Function and Queue)",
            )
        };
        let (name, value) = pair.split_once('=').ok_or_else(bad)?;
        let (name, value) = (name.trim(), value.trim());
        let ours = ["Function", "Queue"].contains(&name);
        if name.is_empty() || name.starts_with(':') || value.is_empty() || ours {
            return Err(bad());
        }
        dims.push((name.to_string(), value.to_string()));
    }
    if dims.len() > 28 {
        return Err(invalid(
            "METRICS_DIMENSIONS",
            &raw,
            "set at most 28 dimensions",
        ));
    }
    Ok(dims)
}

/// A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case).
pub(super) fn flag(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<Option<bool>, ConfigError> {
    let Some(raw) = get(variable) else {
        return Ok(None);
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(Some(true)),
        "0" | "false" | "no" | "off" => Ok(Some(false)),
        _ => Err(invalid(
            variable,
            &raw,
            "set it to 1, true, yes, on, 0, false, no or off",
        )),
    }
}

pub(super) fn number<T>(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    min: T,
) -> Result<Option<T>, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(raw) = get(variable) else {
        return Ok(None);
    };
    match raw.trim().parse::<T>() {
        Ok(n) if n >= min => Ok(Some(n)),
        Ok(_) => Err(invalid(variable, &raw, format!("set it to at least {min}"))),
        Err(_) => Err(invalid(variable, &raw, "set it to a whole number")),
    }
}

/// A duration in milliseconds, from `min` to `max`: every duration is checked at start, so no
/// arithmetic on it can overflow later (lease expiry compares `i64` milliseconds).
pub(super) fn millis(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    min: u64,
    max: u64,
) -> Result<Option<Duration>, ConfigError> {
    let Some(ms) = number(get, variable, min)? else {
        return Ok(None);
    };
    if ms > max {
        let problem = format!("set it to at most {max} ({})", human(max));
        return Err(invalid(variable, &ms.to_string(), problem));
    }
    Ok(Some(Duration::from_millis(ms)))
}

/// `ms` in the largest whole unit, for messages.
pub(super) fn human(ms: u64) -> String {
    match ms {
        ms if ms % DAY_MS == 0 => format!("{} days", ms / DAY_MS),
        ms if ms % 60_000 == 0 => format!("{} minutes", ms / 60_000),
        ms => format!("{ms} ms"),
    }
}

pub(super) fn root(raw: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let trimmed = raw.trim_end_matches('/');
    let ok = trimmed.starts_with('/')
        && trimmed
            .split('/')
            .skip(1)
            .all(|p| !p.is_empty() && p != "." && p != "..");
    if ok {
        Ok(Some(trimmed.to_string()))
    } else {
        let problem = "set it to an absolute znode path such as /event-bridge";
        Err(invalid("EVENT_BRIDGE_ROOT", &raw, problem))
    }
}

pub(super) fn routes(
    inline: Option<String>,
    file: Option<String>,
) -> Result<Option<RouteSource>, ConfigError> {
    match (inline, file) {
        (None, None) => Ok(None),
        (Some(_), Some(path)) => Err(invalid(
            "ROUTES_FILE",
            &path,
            "set ROUTES or ROUTES_FILE, not both",
        )),
        (Some(text), None) => Ok(Some(RouteSource {
            variable: "ROUTES",
            origin: "<inline JSON>".into(),
            text,
        })),
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(RouteSource {
                variable: "ROUTES_FILE",
                origin: path,
                text,
            })),
            Err(e) => Err(invalid(
                "ROUTES_FILE",
                &path,
                format!("cannot read it ({e}): set it to a readable file's path, or use ROUTES"),
            )),
        },
    }
}

pub(super) fn digest(raw: Option<String>) -> Result<Option<Secret>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    match raw.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => {
            Ok(Some(Secret::new(raw)))
        }
        // The value is a credential: never echo it.
        _ => Err(invalid(
            "ZOOKEEPER_AUTH",
            "<hidden>",
            "set it to user:password",
        )),
    }
}

pub(super) fn gone_parents(raw: Option<String>) -> Result<Option<GoneParents>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    GoneParents::parse(raw.trim())
        .map(Some)
        .ok_or_else(|| invalid("GONE_PARENTS", raw.trim(), "must be stuck or completed"))
}

pub(super) fn handler(raw: Option<String>) -> Result<Option<HandlerKind>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    HandlerKind::parse(raw.trim())
        .map(Some)
        .ok_or_else(|| invalid("EVENT_BRIDGE_HANDLER", raw.trim(), "set it to log or noop"))
}
