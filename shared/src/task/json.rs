//! Reading JSON from znodes with a depth limit of our own.
//!
//! serde_json stops at 128 levels of nesting. A plain body 127 levels deep is valid, but
//! wrapped in an envelope on its first claim it is one level deeper, and a dead-letter record
//! adds another: with serde_json's limit such a task would turn into "not JSON" on its next
//! read. Here the limit is [`MAX_DEPTH`], checked by a scan that does not recurse before the
//! parser (which then needs no limit of its own) runs, so the stack stays bounded.

use serde::Deserialize;
use serde_json::Value;

/// The deepest nesting read. A plain body may be one level less (its envelope adds one).
pub const MAX_DEPTH: usize = 256;

/// How deeply `text`'s arrays and objects nest (0 for a scalar). Not a validator: brackets
/// inside strings are skipped, anything else is counted as it comes.
pub fn depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses `text` as one JSON value nested at most [`MAX_DEPTH`] deep.
pub fn parse(text: &str) -> Result<Value, String> {
    let deepest = depth(text.as_bytes());
    if deepest > MAX_DEPTH {
        return Err(format!(
            "nested {deepest} levels deep, over the limit of {MAX_DEPTH}"
        ));
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    reader.disable_recursion_limit();
    let value = Value::deserialize(&mut reader).map_err(|e| e.to_string())?;
    reader.end().map_err(|e| e.to_string())?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        for (text, want) in [
            ("1", 0),
            ("[]", 1),
            (r#"{"a": [1, {"b": []}]}"#, 4),
            (r#"["[[[", "\"[["]"#, 1),
            (r#""\\" ["#, 1),
        ] {
            assert_eq!(depth(text.as_bytes()), want, "{text}");
        }
    }

    #[test]
    fn values_up_to_the_limit_parse_and_deeper_ones_say_why() {
        assert!(parse(&nested(MAX_DEPTH)).is_ok());
        assert!(
            serde_json::from_str::<Value>(&nested(129)).is_err(),
            "serde_json's own limit"
        );
        let err = parse(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(err.contains("257 levels"), "{err}");
        assert!(parse("{not json").is_err());
        assert!(parse("[] trailing").is_err());
    }
}
