//! FIFO queues: told by their URL; group and deduplication ids, and the rule that makes any
//! value an id SQS accepts.

use sha2::{Digest, Sha256};

use super::DEFAULT_GROUP;
use crate::task::Envelope;

/// Whether `queue_url` names a FIFO queue.
pub fn is_fifo(queue_url: &str) -> bool {
    queue_url.trim_end_matches('/').ends_with(".fifo")
}

/// The last segment of a queue URL: the queue's name.
pub(super) fn queue_name(queue_url: &str) -> &str {
    let url = queue_url.trim_end_matches('/');
    url.rsplit('/').next().unwrap_or(url)
}

/// The `MessageGroupId` of `envelope` on a FIFO queue: its group, else `default_group`, else
/// [`DEFAULT_GROUP`]; through [`fifo_token`].
pub fn message_group_id(envelope: &Envelope, default_group: Option<&str>) -> String {
    let group = [envelope.group.as_deref(), default_group]
        .into_iter()
        .flatten()
        .find(|g| !g.is_empty())
        .unwrap_or(DEFAULT_GROUP);
    fifo_token(group)
}

/// The `MessageDeduplicationId` of `envelope` on a FIFO queue: its idempotency key, else its
/// id; through [`fifo_token`].
pub fn deduplication_id(envelope: &Envelope) -> String {
    let key = envelope
        .idempotency_key
        .as_deref()
        .filter(|k| !k.is_empty())
        .unwrap_or(&envelope.id);
    fifo_token(key)
}

/// `value` if SQS accepts it as a group or deduplication id (1 to 128 characters from ASCII `!`
/// to `~`), else `sha256-` and the lowercase hex SHA-256 of its UTF-8 bytes.
pub fn fifo_token(value: &str) -> String {
    let fits =
        (1..=128).contains(&value.len()) && value.bytes().all(|b| (b'!'..=b'~').contains(&b));
    if fits {
        return value.to_string();
    }
    let digest = Sha256::digest(value.as_bytes());
    let mut token = String::with_capacity(7 + 64);
    token.push_str("sha256-");
    for byte in digest {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fifo_is_read_from_the_url() {
        let cases = [
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
                true,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo/",
                true,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
                false,
            ),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/fifo",
                false,
            ),
        ];
        for (url, fifo) in cases {
            assert_eq!(is_fifo(url), fifo, "{url}");
        }
        assert_eq!(
            queue_name("http://127.0.0.1:5000/123456789012/q.fifo"),
            "q.fifo"
        );
    }

    #[test]
    fn fifo_tokens_pass_what_sqs_accepts_and_hash_the_rest() {
        // Hashed values start with the prefix given; the empty string's is SHA-256's published
        // test vector, so the whole token is checked there.
        let empty = "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let cases: [(&str, Option<&str>); 7] = [
            ("order-7", None),
            ("a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~Z9", None),
            (&"k".repeat(128), None),
            (&"k".repeat(129), Some("sha256-")),
            ("with space", Some("sha256-")),
            ("ключ", Some("sha256-")),
            ("", Some(empty)),
        ];
        for (value, hashed) in cases {
            let token = fifo_token(value);
            match hashed {
                None => assert_eq!(token, value),
                Some(prefix) => {
                    assert!(token.starts_with(prefix), "{value:?} gave {token}");
                    assert_eq!(token.len(), 71, "{token}");
                    assert_eq!(token, fifo_token(value), "stable");
                }
            }
        }
        assert_ne!(fifo_token("with space"), fifo_token("with  space"));
    }

    #[test]
    fn group_and_deduplication_id_fall_back_in_order() {
        let mut e = Envelope::new("a.b", json!({}));
        assert_eq!(message_group_id(&e, None), "default");
        assert_eq!(message_group_id(&e, Some("")), "default");
        assert_eq!(message_group_id(&e, Some("fallback")), "fallback");
        assert_eq!(deduplication_id(&e), e.id);
        e.group = Some(String::new());
        e.idempotency_key = Some(String::new());
        assert_eq!(message_group_id(&e, Some("fallback")), "fallback");
        assert_eq!(deduplication_id(&e), e.id);
        e.group = Some("tenant-1".into());
        e.idempotency_key = Some("order-7".into());
        assert_eq!(message_group_id(&e, Some("fallback")), "tenant-1");
        assert_eq!(deduplication_id(&e), "order-7");
        e.idempotency_key = Some("x".repeat(200));
        assert!(deduplication_id(&e).starts_with("sha256-"));
    }
}
