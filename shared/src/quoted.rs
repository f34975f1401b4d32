//! A value quoted for a message: a bad value a refusal names is quoted whole when short, else
//! its head and how long it is, so that a 100 KB name does not come back in full. A leaf.

/// The most of a bad value a message quotes, in bytes.
pub const SHOWN_BYTES: usize = 100;

/// `value` quoted for a message: whole when short, else its first [`SHOWN_BYTES`] (cut at a
/// character's boundary) and how long it is.
pub fn shown(value: &str) -> String {
    match head(value) {
        None => format!("{value:?}"),
        Some(head) => format!("{head:?}… ({} bytes)", value.len()),
    }
}

/// `value` as it is for a message, when short; else as [`shown`] cuts it (unquoted).
pub fn clipped(value: &str) -> String {
    match head(value) {
        None => value.to_string(),
        Some(head) => format!("{head}… ({} bytes)", value.len()),
    }
}

/// The first [`SHOWN_BYTES`] of `value`, cut at a character's boundary, when it is longer.
fn head(value: &str) -> Option<&str> {
    if value.len() <= SHOWN_BYTES {
        return None;
    }
    let mut end = SHOWN_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Some(&value[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_quoted_short_and_cut_at_a_character() {
        assert_eq!(shown("tenant-7"), "\"tenant-7\"");
        assert_eq!(clipped("tenant-7"), "tenant-7");
        assert!(clipped(&"x".repeat(500)).ends_with("x… (500 bytes)"));
        let long = "é".repeat(60_000);
        let quoted = shown(&long);
        assert!(quoted.len() < 140, "{quoted}");
        assert!(quoted.ends_with("… (120000 bytes)"), "{quoted}");
    }
}
