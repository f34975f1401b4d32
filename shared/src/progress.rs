//! A running handler's progress: how far it is (a percent) and a short message, reported
//! through the [`Progress`] handle on its [`Task`](crate::task::Task).
//!
//! Reporting writes nothing: the handle keeps the latest report in memory, and the holder's
//! next lease extension (a third of `LEASE_TIMEOUT_MS` after the last) carries it in the
//! lease's data, the write it makes anyway. So a report shows in `status`, `list` and the
//! dashboard from that extension on, and a task done before its first extension never shows
//! one. A report that breaks the rules below is refused with [`Error::BadProgress`] and the
//! report before it stays.
//!
//! Progress costs no request and no operation, only its bytes in the lease (at most about 220),
//! and shows up to a third of `LEASE_TIMEOUT_MS` late. An extension sent again (after a dropped
//! link, or after a reply was lost and the lease read back as ours) writes the latest report, not
//! the one of its first try. A 000-design reader sees the lease's two fields and ignores the
//! third.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// The longest message a report may carry, in bytes of UTF-8: a lease is rewritten with it
/// every extension, and operators read it on one line.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 200;

/// One report: `percent` from 0 to 100 and a message (may be empty).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressReport {
    /// How far the handler is, from 0 to 100.
    pub percent: u8,
    /// What it is doing, in a few words (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ProgressReport {
    /// A report, checked: `percent` at most 100, `message` at most
    /// [`MAX_PROGRESS_MESSAGE_BYTES`] bytes and without control characters.
    ///
    /// # Notable errors
    /// - [`Error::BadProgress`] naming the rule broken.
    pub fn new(percent: u8, message: &str) -> Result<Self> {
        if percent > 100 {
            return Err(Error::BadProgress(format!(
                "percent is {percent}: report 0 to 100"
            )));
        }
        if message.len() > MAX_PROGRESS_MESSAGE_BYTES {
            return Err(Error::BadProgress(format!(
                "message is {} bytes: shorten it to {MAX_PROGRESS_MESSAGE_BYTES} bytes at most",
                message.len()
            )));
        }
        if message.chars().any(char::is_control) {
            return Err(Error::BadProgress(
                "message has a control character: report one line of text".into(),
            ));
        }
        Ok(ProgressReport {
            percent,
            message: message.to_string(),
        })
    }
}

/// Reads a lease's `progress` leniently: one another writer made malformed (a percent over
/// 100, a message too long) reads as no progress, never as an unreadable lease.
pub(crate) fn lenient<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<ProgressReport>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value
        .and_then(|v| serde_json::from_value::<ProgressReport>(v).ok())
        .and_then(|p| ProgressReport::new(p.percent, &p.message).ok()))
}

/// Where a handler reports its progress: a cheap handle (clones share one report), given to
/// the handler on its [`Task`](crate::task::Task). Every handle compares equal to every other:
/// progress is not part of what a task is.
#[derive(Clone, Debug, Default)]
pub struct Progress(Arc<Mutex<Option<ProgressReport>>>);

impl Progress {
    /// Keeps `percent` and `message` as the latest report; the holder's next lease extension
    /// writes it. See [`ProgressReport::new`] for the rules.
    ///
    /// # Notable errors
    /// - [`Error::BadProgress`]: nothing is kept, the report before stays.
    pub fn report(&self, percent: u8, message: &str) -> Result<()> {
        let report = ProgressReport::new(percent, message)?;
        *self.0.lock().expect("progress lock") = Some(report);
        Ok(())
    }

    /// The latest report, if any.
    pub fn latest(&self) -> Option<ProgressReport> {
        self.0.lock().expect("progress lock").clone()
    }
}

impl PartialEq for Progress {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_checked_and_a_refused_one_keeps_the_last() {
        let progress = Progress::default();
        assert_eq!(progress.latest(), None);
        progress.report(40, "copied 4 of 10 files").unwrap();
        let long = "x".repeat(MAX_PROGRESS_MESSAGE_BYTES + 1);
        for (percent, message, problem) in [
            (101, "", "percent is 101: report 0 to 100"),
            (
                50,
                long.as_str(),
                "201 bytes: shorten it to 200 bytes at most",
            ),
            (50, "two\nlines", "control character"),
        ] {
            let err = progress.report(percent, message).unwrap_err().to_string();
            assert!(err.contains(problem), "{err}");
        }
        assert_eq!(
            progress.latest(),
            Some(ProgressReport::new(40, "copied 4 of 10 files").unwrap())
        );
        let shared = progress.clone();
        shared.report(100, "").unwrap();
        assert_eq!(progress.latest().unwrap().percent, 100);
        let max = "é".repeat(MAX_PROGRESS_MESSAGE_BYTES / 2);
        assert!(progress.report(0, &max).is_ok(), "the limit itself is fine");
    }

    #[derive(Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "lenient")]
        progress: Option<ProgressReport>,
    }

    #[test]
    fn a_malformed_progress_reads_as_none() {
        for (json, want) in [
            (r#"{}"#, None),
            (r#"{"progress":null}"#, None),
            (r#"{"progress":{"percent":7}}"#, Some((7, ""))),
            (
                r#"{"progress":{"percent":7,"message":"m"}}"#,
                Some((7, "m")),
            ),
            (r#"{"progress":{"percent":300}}"#, None),
            (r#"{"progress":{"percent":101}}"#, None),
            (r#"{"progress":"half"}"#, None),
        ] {
            let read: Holder = serde_json::from_str(json).unwrap();
            let want = want.map(|(p, m)| ProgressReport::new(p, m).unwrap());
            assert_eq!(read.progress, want, "{json}");
        }
    }
}
