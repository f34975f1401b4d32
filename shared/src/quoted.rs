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

/// `value` as it is for a message (unquoted, control characters escaped), when short; else as
/// [`shown`] cuts it.
pub fn clipped(value: &str) -> String {
    match head(value) {
        None => one_line(value, usize::MAX),
        Some(head) => format!("{}… ({} bytes)", one_line(head, usize::MAX), value.len()),
    }
}

/// `text` as one line of at most about `most` bytes: control characters (line breaks, terminal
/// escapes) written as escapes (`\n`, `\u{1b}`), and the rest cut at a character's boundary
/// with `…`.
pub fn one_line(text: &str, most: usize) -> String {
    let mut out = String::with_capacity(text.len().min(most.saturating_add(4)));
    for c in text.chars() {
        if out.len() >= most {
            out.push('…');
            break;
        }
        match c.is_control() {
            true => out.extend(c.escape_debug()),
            false => out.push(c),
        }
    }
    out
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
        assert_eq!(clipped("a\nb\u{1b}"), "a\\nb\\u{1b}");
        let long = "é".repeat(60_000);
        let quoted = shown(&long);
        assert!(quoted.len() < 140, "{quoted}");
        assert!(quoted.ends_with("… (120000 bytes)"), "{quoted}");
    }

    #[test]
    fn one_line_escapes_control_characters_and_cuts_at_a_character() {
        assert_eq!(one_line("a\nb\u{1b}[31m", 100), "a\\nb\\u{1b}[31m");
        assert_eq!(one_line("éé", 100), "éé");
        assert_eq!(one_line(&"é".repeat(100), 5), "ééé…");
        assert!(one_line(&"x".repeat(100_000), 200).len() < 210);
    }
}
