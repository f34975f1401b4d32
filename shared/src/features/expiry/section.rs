//! The expiry's section of the envelope: `expires_at`, an RFC 3339 time.

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::task::{Envelope, Section};

/// When a task that has not started expires: `expires_at` in the envelope (RFC 3339).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExpiresAt(pub DateTime<Utc>);

impl Section for ExpiresAt {
    const KEY: &'static str = "expires_at";
}

impl ExpiresAt {
    /// The moment `ms` since the epoch (ZooKeeper's time, as a claim judges it); `None` out of
    /// chrono's range.
    pub fn at_ms(ms: i64) -> Option<Self> {
        Utc.timestamp_millis_opt(ms).single().map(ExpiresAt)
    }

    /// Its moment in ms since the epoch.
    pub fn ms(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The expiry `envelope` asks for: `Ok(None)` without one; an error naming the field and
    /// the form it takes when it is not a time.
    pub fn of(envelope: &Envelope) -> Result<Option<Self>, String> {
        envelope.section::<ExpiresAt>().map_err(|problem| {
            format!("{problem}: give an RFC 3339 time, such as 2030-01-01T12:00:00Z")
        })
    }

    /// Sets it as `envelope`'s expiry.
    pub fn set(self, envelope: &mut Envelope) {
        envelope.set_section(&self);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn it_is_written_as_rfc_3339_and_read_with_any_offset() {
        let mut envelope = Envelope::new("t", json!({}));
        assert_eq!(ExpiresAt::of(&envelope), Ok(None));
        ExpiresAt::at_ms(1_800_000_000_123)
            .expect("in range")
            .set(&mut envelope);
        let written: serde_json::Value =
            serde_json::from_slice(&envelope.to_bytes().unwrap()).unwrap();
        assert_eq!(written["expires_at"], json!("2027-01-15T08:00:00.123Z"));
        envelope
            .extra
            .insert("expires_at".into(), json!("2027-01-15T09:00:00.123+01:00"));
        let read = ExpiresAt::of(&envelope).unwrap().expect("set");
        assert_eq!(read.ms(), 1_800_000_000_123);
    }

    #[test]
    fn a_value_that_is_no_time_is_refused_naming_the_field_and_its_form() {
        for bad in [json!("tomorrow"), json!(1_800_000_000_000_i64), json!({})] {
            let mut envelope = Envelope::new("t", json!({}));
            envelope.extra.insert("expires_at".into(), bad.clone());
            let problem = ExpiresAt::of(&envelope).unwrap_err();
            assert!(
                problem.starts_with("\"expires_at\" is malformed") && problem.contains("RFC 3339"),
                "{bad}: {problem}"
            );
        }
    }
}
