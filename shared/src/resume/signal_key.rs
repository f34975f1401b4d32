//! What a signal's key may be: the keys a wait names ([`super::Steps::wait_for`]) and a signal
//! is sent to ([`crate::queue::Signals`]). Each becomes a znode name (`signals/<key>`). Pure.

/// The longest key a signal may have, as a znode name.
pub const MAX_SIGNAL_KEY_NAME_BYTES: usize = 200;

/// Refuses a key no signal can have: empty, with a control character, or too long a name.
pub fn check_signal_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a signal's key is empty".into());
    }
    if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "a signal's key has a control character (U+{:04X}) at byte {at}: a key is \
             printable text",
            c as u32
        ));
    }
    crate::segment::fits_as_name("key", key, MAX_SIGNAL_KEY_NAME_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_a_control_character_names_it_and_where() {
        let problem = check_signal_key("order\n7").unwrap_err();
        assert_eq!(
            problem,
            "a signal's key has a control character (U+000A) at byte 5: a key is printable text"
        );
        assert!(check_signal_key("order/7 ü").is_ok());
        assert!(check_signal_key("").is_err());
    }
}
