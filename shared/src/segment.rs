//! How a text becomes one znode name and back, and whether it fits as one (a leaf: `lane`,
//! `layout`, `task` and `resume` take it from here).

/// `text` as one znode name: bytes other than ASCII letters, digits, `-` and `_` become `%XX`
/// (so `/`, `.` and `..` never appear), and the empty text is `%`.
pub fn encode_segment(text: &str) -> String {
    if text.is_empty() {
        return "%".into();
    }
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// How long [`encode_segment`] makes `text`, without making it.
pub fn encoded_len(text: &str) -> usize {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    match text.len() {
        0 => 1,
        _ => text.bytes().map(|b| if plain(&b) { 1 } else { 3 }).sum(),
    }
}

/// How a znode name is measured, as messages say it.
pub(crate) const MEASURE: &str = "a byte other than ASCII letters, digits, - and _ takes three";

/// Refuses `value` (the value of field `field`: an envelope's, a signal's key) when its znode
/// name is over `most` bytes, saying how long it is both ways, and quoting none of it.
pub(crate) fn fits_as_name(field: &str, value: &str, most: usize) -> Result<(), String> {
    let name = encoded_len(value);
    if name > most {
        return Err(format!(
            "\"{field}\" is {} bytes, {name} as a znode name ({MEASURE}), over the {most} it \
             may take",
            value.len()
        ));
    }
    Ok(())
}

/// The text [`encode_segment`] made `name` of (a malformed escape stays as it is).
pub fn decode_segment(name: &str) -> String {
    if name == "%" {
        return String::new();
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = name
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_measured_as_its_znode_name() {
        for text in ["", "order-42_a", "a/b", "é", "customer 9 / ü", "100%"] {
            assert_eq!(encoded_len(text), encode_segment(text).len(), "{text:?}");
        }
        assert_eq!(fits_as_name("group", &"g".repeat(256), 256), Ok(()));
        let over = fits_as_name("group", &"é".repeat(43), 256).unwrap_err();
        assert!(
            over.starts_with("\"group\" is 86 bytes, 258 as a znode name"),
            "{over}"
        );
    }
}
