//! A task's text fields as a publish takes them: what can never work is refused where it
//! enters, and a bad value is quoted short in the message that refuses it.
//!
//! An id, a type, a group or a key travels as an HTTP header (`X-Event-Bridge-Group`,
//! `Idempotency-Key`…) and names znodes; a control character in one makes every delivery fail
//! ("cannot be sent as an HTTP header"), so the publish refuses it, naming the field.

use crate::quoted::shown;

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
