//! Reading input: JSON lines into envelopes, and durations such as `30s` or `1d`.

use std::io::BufRead;
use std::time::Duration;

use event_bridge::Envelope;
use event_bridge::feature::Features;

/// The envelopes of a JSON-lines input (a file, or `-` for stdin), with the fields `features`
/// read, one at a time, each with its line's number (from 1); a bad line is an error naming its number. Blank lines are
/// skipped.
pub(crate) fn envelopes(
    path: &str,
    default_type: &str,
    features: &Features,
) -> Result<impl Iterator<Item = Result<(usize, Envelope), String>>, String> {
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let (path, default_type) = (path.to_string(), default_type.to_string());
    let features = features.clone();
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
                    (features.envelope_from_item(value, Some(&default_type)))
                        .map(|envelope| (i + 1, envelope))
                        .map_err(|e| format!("{path}:{}: {e}", i + 1))
                }),
        )
    }))
}

/// A duration as a JSON line's `"delay"` takes it (`1500ms`, `30s`, `5m`, `2h`, `1d`: the one
/// parser, [`event_bridge::task::parse_delay`], at most a year), or a bare number of seconds.
pub(crate) fn parse_delay(raw: &str) -> Result<Duration, String> {
    let seconds = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    let text = match seconds {
        true => format!("{raw}s"),
        false => raw.to_string(),
    };
    event_bridge::task::parse_delay("duration", &text).map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_take_a_unit_as_a_lines_delay_does() {
        assert_eq!(parse_delay("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_delay("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_delay("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_delay("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_delay("366d").unwrap_err().contains("a year"));
        assert!(parse_delay("m").is_err());
        assert!(parse_delay("99999999999999999h").is_err());
        let bad = format!("\u{1b}[31m\n{}", "x".repeat(100_000));
        let refused = parse_delay(&bad).unwrap_err();
        assert!(
            refused.len() < 300 && !refused.contains('\u{1b}'),
            "{refused:.300}"
        );
    }
}
