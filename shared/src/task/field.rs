//! A task's text fields as a publish takes them: what can never work is refused where it
//! enters, and a bad value is quoted short in the message that refuses it.
//!
//! An id, a type, a group or a key travels as an HTTP header (`X-Event-Bridge-Group`,
//! `Idempotency-Key`…) and names znodes; a control character in one makes every delivery fail
//! ("cannot be sent as an HTTP header"), so the publish refuses it, naming the field.

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

/// Refuses a `field` whose `value` holds a control character (C0, which takes CR, LF and NUL
/// in, or DEL), naming the field and where the character is.
pub fn check_text(field: &str, value: &str) -> Result<(), String> {
    let Some((at, c)) = value.char_indices().find(|(_, c)| is_control(*c)) else {
        return Ok(());
    };
    Err(format!(
        "\"{field}\" holds a control character (U+{:04X} at byte {at}), which no header or \
         znode name can carry: {}",
        c as u32,
        shown(value)
    ))
}

/// Refuses an empty `field`, or one holding a control character.
pub fn check_named(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!(
            "\"{field}\" is empty: give one of at least one character"
        ));
    }
    check_text(field, value)
}

fn is_control(c: char) -> bool {
    c <= '\u{1f}' || c == '\u{7f}'
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

    #[test]
    fn control_characters_are_refused_naming_the_field() {
        for bad in [
            "a\rb",
            "a\nb",
            "a\0b",
            "\u{1b}[31m",
            "del\u{7f}",
            "tab\there",
        ] {
            let refused = check_text("group", bad).unwrap_err();
            assert!(
                refused.starts_with("\"group\" holds a control character"),
                "{refused}"
            );
        }
        assert!(check_text("group", "customer 9 / ü").is_ok());
        assert!(
            check_named("type", "")
                .unwrap_err()
                .contains("\"type\" is empty")
        );
        let at = check_text("id", "ab\ncd").unwrap_err();
        assert!(at.contains("U+000A at byte 2"), "{at}");
    }
}
