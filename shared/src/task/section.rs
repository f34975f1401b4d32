//! A feature's section of the envelope: a top-level field the feature owns, typed by the
//! feature, carried by the core without reading it.
//!
//! A section lives in the envelope's `extra` (the fields the core does not know, kept as they
//! are, see [`Envelope::extra`]), under the section's [`Section::KEY`]. So a task written by a
//! version that knows no such feature reads as it did, an envelope written by a version that
//! does reads on one that does not (its section kept, not understood), and the core moves a
//! task from lane to lane, and through every retry, with its sections untouched.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Envelope;

/// A feature's typed part of the envelope, stored as the top-level field [`Section::KEY`].
pub trait Section: Serialize + DeserializeOwned {
    /// The envelope's field that holds it; also the field a JSON line or an HTTP publish item
    /// sets it with.
    const KEY: &'static str;
}

impl Envelope {
    /// The section `S` of this envelope: `Ok(None)` when the envelope has none, an error
    /// naming the field when its value is not an `S`.
    pub fn section<S: Section>(&self) -> Result<Option<S>, String> {
        match self.extra.get(S::KEY) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(value) => S::deserialize(value)
                .map(Some)
                .map_err(|e| format!("\"{}\" is malformed: {e}", S::KEY)),
        }
    }

    /// Sets the section `S` (replacing the one it had).
    pub fn set_section<S: Section>(&mut self, section: &S) {
        let value = serde_json::to_value(section).expect("a section serializes to JSON");
        self.extra.insert(S::KEY.to_string(), value);
    }

    /// Whether it carries the top-level field `field`: a section (set, even to `null`), or,
    /// for the few fields the envelope still types itself that a feature reads
    /// (`idempotency_key`, `batch`), that field set. A feature's hooks are asked only about
    /// envelopes that carry a field it names (`Feature::item_fields`,
    /// `Feature::envelope_fields`).
    pub fn carries(&self, field: &str) -> bool {
        match field {
            "idempotency_key" => self.idempotency_key.is_some(),
            "batch" => self.batch.is_some(),
            "concurrency_key" => self.concurrency_key.is_some(),
            "resume" => self.resume.is_some(),
            _ => self.extra.contains_key(field),
        }
    }

    /// Removes the section `S`, if it had one.
    pub fn remove_section<S: Section>(&mut self) {
        self.extra.remove(S::KEY);
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::task::{Body, parse};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Colour {
        hue: u16,
    }

    impl Section for Colour {
        const KEY: &'static str = "colour";
    }

    #[test]
    fn a_section_rides_in_the_envelope_and_reads_back() {
        let mut envelope = Envelope::new("t", json!({}));
        assert_eq!(envelope.section::<Colour>(), Ok(None));
        envelope.set_section(&Colour { hue: 120 });
        let bytes = envelope.to_bytes().unwrap();
        let written: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(written["colour"], json!({"hue": 120}));
        let Body::Envelope(read) = parse(&bytes) else {
            panic!("not an envelope")
        };
        assert_eq!(read.section::<Colour>(), Ok(Some(Colour { hue: 120 })));
        let mut read = read;
        read.remove_section::<Colour>();
        assert_eq!(read.section::<Colour>(), Ok(None));
    }

    #[test]
    fn a_malformed_section_names_its_field() {
        let mut envelope = Envelope::new("t", json!({}));
        envelope.extra.insert("colour".into(), json!("red"));
        let problem = envelope.section::<Colour>().unwrap_err();
        assert!(problem.starts_with("\"colour\" is malformed"), "{problem}");
    }
}
