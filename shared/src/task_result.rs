//! What a handler answered for a task, kept in its completion record (`KEEP_DONE`) as
//! `result` when it is JSON of at most [`MAX_RESULT_BYTES`], else as `result_omitted`: its
//! size and type.
//!
//! The HTTP sink's result is the webhook's answer ([`TaskResult::from_answer`]); a handler of
//! one's own returns one with [`TaskResult::json`], which refuses a value over the limit. A
//! value over it that reaches a completion anyway (a [`TaskResult::Json`] built by hand) is
//! kept as `result_omitted`, never failing the completion: a completion multi-op must stay
//! under ZooKeeper's `jute.maxbuffer`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The most a kept result may be, as compact JSON: 64 KiB.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// What a handler answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskResult {
    /// A JSON value, kept as it is.
    Json(Value),
    /// An answer not kept: what it was.
    Omitted(ResultOmitted),
}

/// An answer not kept in the record: its size and type, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultOmitted {
    /// Its size in bytes; absent when unknown (an HTTP answer over the limit whose response
    /// had no `Content-Length`: the sink stops reading at the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Its `Content-Type`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `not JSON`, or `over 65536 bytes`.
    pub reason: String,
}

impl TaskResult {
    /// `value` as a result, when its compact JSON is at most [`MAX_RESULT_BYTES`].
    ///
    /// # Notable errors
    /// - [`Error::ResultTooLarge`] with its size: nothing is built.
    pub fn json(value: Value) -> Result<Self> {
        let bytes = serde_json::to_vec(&value)?.len();
        if bytes > MAX_RESULT_BYTES {
            return Err(Error::ResultTooLarge {
                bytes,
                limit: MAX_RESULT_BYTES,
            });
        }
        Ok(TaskResult::Json(value))
    }

    /// A webhook's answer: `read` is its body as read, at most one byte past the limit;
    /// `length` the response's `Content-Length`. JSON of at most the limit is kept; an empty
    /// body is no result.
    pub fn from_answer(
        read: &[u8],
        length: Option<u64>,
        content_type: Option<&str>,
    ) -> Option<Self> {
        let omitted = |bytes, reason: String| {
            Some(TaskResult::Omitted(ResultOmitted {
                bytes,
                content_type: content_type.map(str::to_string),
                reason,
            }))
        };
        if read.len() > MAX_RESULT_BYTES {
            return omitted(length, over());
        }
        if read.is_empty() {
            return None;
        }
        match serde_json::from_slice::<Value>(read) {
            Ok(value) => Some(TaskResult::Json(value)),
            Err(_) => omitted(Some(read.len() as u64), "not JSON".into()),
        }
    }

    /// The record's `result` and `result_omitted`: a JSON value over the limit becomes its
    /// summary.
    pub fn kept(self) -> (Option<Value>, Option<ResultOmitted>) {
        match self {
            TaskResult::Json(value) => {
                let bytes = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
                if bytes <= MAX_RESULT_BYTES {
                    return (Some(value), None);
                }
                let summary = ResultOmitted {
                    bytes: Some(bytes as u64),
                    content_type: Some("application/json".into()),
                    reason: over(),
                };
                (None, Some(summary))
            }
            TaskResult::Omitted(omitted) => (None, Some(omitted)),
        }
    }
}

fn over() -> String {
    format!("over {MAX_RESULT_BYTES} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn big(bytes: usize) -> Value {
        // `"…"`: two bytes of quotes.
        Value::String("x".repeat(bytes - 2))
    }

    #[test]
    fn json_takes_up_to_the_limit_and_refuses_one_byte_more() {
        assert!(TaskResult::json(big(MAX_RESULT_BYTES)).is_ok());
        let err = TaskResult::json(big(MAX_RESULT_BYTES + 1)).unwrap_err();
        assert!(
            (err.to_string())
                .starts_with("result is 65537 bytes of JSON, over the 65536-byte limit"),
            "{err}"
        );
    }

    #[test]
    fn a_value_over_the_limit_is_kept_as_its_size() {
        let (result, omitted) = TaskResult::Json(big(MAX_RESULT_BYTES + 1)).kept();
        assert_eq!(result, None);
        let omitted = omitted.unwrap();
        assert_eq!(omitted.bytes, Some(65_537));
        assert_eq!(omitted.reason, "over 65536 bytes");
        let (result, omitted) = TaskResult::Json(json!({"ok": true})).kept();
        assert_eq!((result, omitted), (Some(json!({"ok": true})), None));
    }

    #[test]
    fn answers_are_read_by_what_they_hold() {
        let json_type = Some("application/json");
        let cases: [(&[u8], Option<u64>, Option<TaskResult>); 4] = [
            (b"", Some(0), None),
            (
                br#"{"receipt": 7}"#,
                Some(14),
                Some(TaskResult::Json(json!({"receipt": 7}))),
            ),
            (
                b"ok",
                Some(2),
                Some(TaskResult::Omitted(ResultOmitted {
                    bytes: Some(2),
                    content_type: json_type.map(Into::into),
                    reason: "not JSON".into(),
                })),
            ),
            (
                &[b' '; MAX_RESULT_BYTES + 1],
                None,
                Some(TaskResult::Omitted(ResultOmitted {
                    bytes: None,
                    content_type: json_type.map(Into::into),
                    reason: "over 65536 bytes".into(),
                })),
            ),
        ];
        for (read, length, want) in cases {
            assert_eq!(TaskResult::from_answer(read, length, json_type), want);
        }
    }
}
