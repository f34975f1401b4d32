//! Reading input: JSON lines into envelopes, and delays such as `30s`.

use std::io::BufRead;
use std::time::Duration;

use event_bridge::Envelope;

/// The envelopes of a JSON-lines input (a file, or `-` for stdin), one at a time, each with
/// its line's number (from 1); a bad line is an error naming its number. Blank lines are
/// skipped.
pub(crate) fn envelopes(
    path: &str,
    default_type: &str,
) -> Result<impl Iterator<Item = Result<(usize, Envelope), String>>, String> {
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let (path, default_type) = (path.to_string(), default_type.to_string());
    Ok(reader.lines().enumerate().filter_map(move |(i, line)| {
        let line = match line {
            Ok(line) if line.trim().is_empty() => return None,
            Ok(line) => line,
            Err(e) => return Some(Err(format!("{path}: {e}"))),
        };
        Some(
            serde_json::from_str(&line)
                .map_err(|e| format!("{path}:{}: not JSON: {e}", i + 1))
                .and_then(|value| {
                    event_bridge::task::envelope_from_value(value, Some(&default_type))
                        .map(|envelope| (i + 1, envelope))
                        .map_err(|e| format!("{path}:{}: {e}", i + 1))
                }),
        )
    }))
}

/// `1500ms`, `30s`, `5m`, `2h`, or a bare number of seconds.
pub(crate) fn parse_delay(raw: &str) -> Result<Duration, String> {
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} is not a delay such as 30s or 5m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{raw:?}: unit must be ms, s, m or h")),
    };
    const YEAR_MS: u64 = 365 * 24 * 3_600_000;
    let ms = ms
        .filter(|ms| *ms <= YEAR_MS)
        .ok_or_else(|| format!("{raw:?}: a delay is at most a year"))?;
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_take_a_unit() {
        assert_eq!(parse_delay("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_delay("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_delay("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_delay("5d").is_err());
        assert!(parse_delay("m").is_err());
        assert!(parse_delay("99999999999999999h").is_err());
    }
}
