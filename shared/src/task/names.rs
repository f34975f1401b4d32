//! How long a task's names and keys may be. Each becomes a znode name, where every byte other
//! than ASCII letters, digits, `-` and `_` takes three ([`crate::segment::encode_segment`]): the
//! group's lock, the id's entries (`done/…/@<id>`, `after/<id>`, `dependents/<id>`), the keys.
//! Claims, completions and burials write up to 32 tasks' names in one multi-op, which must stay
//! within the megabyte ZooKeeper takes in one request: a larger one makes the server drop the
//! connection, and every request on it fails.
//!
//! What a publish takes, each measured as its znode name:
//!
//! | Field | At most |
//! |---|---|
//! | `id`, each of `after` | [`MAX_ID_NAME_BYTES`] (256) |
//! | `type` | [`MAX_TYPE_NAME_BYTES`] (256) |
//! | `group` | [`MAX_GROUP_NAME_BYTES`] (256) |
//! | `idempotency_key` | [`MAX_KEY_NAME_BYTES`] (4 096) |
//! | `concurrency_key` | [`MAX_CONCURRENCY_KEY_NAME_BYTES`] (1 024) |
//! | `debounce_key` | [`super::MAX_DEBOUNCE_KEY_NAME_BYTES`] (1 024) |
//! | `batch` | 512 (see [`super::batch::check_batch_name`]) |
//!
//! A task already in the queue (written by another producer, or by a version without these
//! limits) is run while each of its names is at most [`MAX_RUNNABLE_NAME_BYTES`]; past that its
//! body is poison ([`super::parse`]), buried on its first claim with the reason, and the tasks
//! claimed beside it go on.

use super::Envelope;
use super::field::check_text;
use crate::quoted::shown;
use crate::segment::{MEASURE, encoded_len, fits_as_name};

/// The longest an id may be as a znode name (and each parent `after` names).
pub const MAX_ID_NAME_BYTES: usize = 256;

/// The longest an event type may be as a znode name (a limited route's gate is named after it).
pub const MAX_TYPE_NAME_BYTES: usize = 256;

/// The longest a group may be as a znode name (`groups/<group>`, its lock).
pub const MAX_GROUP_NAME_BYTES: usize = 256;

/// The longest an idempotency key may be as a znode name (`keys/<key>`). A completion writes
/// that name twice (the key and its expiry entry) in a multi-op it shares with up to 31 other
/// tasks.
pub const MAX_KEY_NAME_BYTES: usize = 4_096;

/// The longest a concurrency key may be as a znode name (`concurrency/<route>/<key>`): a claim
/// writes it twice per task (the key's gate and the task's slot under it), for up to 32 tasks
/// in one request.
pub const MAX_CONCURRENCY_KEY_NAME_BYTES: usize = 1_024;

/// The longest any name of a task in the queue may be, as a znode name, for a consumer to run
/// it: the largest a publish takes (an idempotency key's). Past it, a claim's or a completion's
/// multi-op of the task could be larger than ZooKeeper takes.
pub const MAX_RUNNABLE_NAME_BYTES: usize = MAX_KEY_NAME_BYTES;

/// What a publish refuses of `envelope`'s id, type, group and parents: one over its limit (the
/// keys and the batch are checked with their own rules).
pub(super) fn check_names(envelope: &Envelope) -> Result<(), String> {
    fits_as_name("id", &envelope.id, MAX_ID_NAME_BYTES)?;
    fits_as_name("type", &envelope.event_type, MAX_TYPE_NAME_BYTES)?;
    if let Some(group) = &envelope.group {
        fits_as_name("group", group, MAX_GROUP_NAME_BYTES)?;
    }
    for parent in &envelope.after {
        check_text("after", parent)?;
        let name = encoded_len(parent);
        if name > MAX_ID_NAME_BYTES {
            return Err(format!(
                "\"after\" names {}: {} bytes, {name} as a znode name ({MEASURE}), over the \
                 {MAX_ID_NAME_BYTES} an id may take",
                shown(parent),
                parent.len()
            ));
        }
    }
    Ok(())
}

/// Why a consumer cannot run a task whose envelope is `envelope`: one of its names is over
/// [`MAX_RUNNABLE_NAME_BYTES`] as a znode name.
pub(super) fn check_runnable(envelope: &Envelope) -> Result<(), String> {
    let debounce = envelope.debounce.as_ref().map(|d| d.key.as_str());
    let named = [
        ("id", Some(envelope.id.as_str())),
        ("type", Some(envelope.event_type.as_str())),
        ("group", envelope.group.as_deref()),
        ("idempotency_key", envelope.idempotency_key.as_deref()),
        ("concurrency_key", envelope.concurrency_key.as_deref()),
        ("debounce_key", debounce),
        ("batch", envelope.batch.as_deref()),
        ("placed", envelope.placed.as_deref()),
    ];
    let parents = envelope.after.iter().map(|p| ("after", Some(p.as_str())));
    for (field, value) in named.into_iter().chain(parents) {
        if let Some(value) = value {
            fits_as_name(field, value, MAX_RUNNABLE_NAME_BYTES)
                .map_err(|problem| format!("{problem}: no claim of it could be sent"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::segment::encode_segment;

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

    #[test]
    fn a_publish_refuses_an_id_a_type_a_group_or_a_parent_over_its_limit() {
        let fits = |change: &dyn Fn(&mut Envelope)| {
            let mut envelope = Envelope::new("a", json!({}));
            change(&mut envelope);
            check_names(&envelope)
        };
        assert_eq!(fits(&|e| e.id = "i".repeat(256)), Ok(()));
        type Change = fn(&mut Envelope);
        let cases: [(&str, Change); 4] = [
            ("\"id\" is 257", |e| e.id = "i".repeat(257)),
            ("\"type\" is 257", |e| e.event_type = "t".repeat(257)),
            ("\"group\" is 600000", |e| {
                e.group = Some("g".repeat(600_000))
            }),
            ("\"after\" names", |e| e.after = vec!["/".repeat(86)]),
        ];
        for (field, change) in cases {
            let problem = fits(&change).unwrap_err();
            assert!(problem.starts_with(field), "{problem}");
            assert!(problem.len() < 300, "quotes little: {problem}");
        }
    }

    #[test]
    fn a_task_in_the_queue_runs_with_names_up_to_the_largest_a_publish_takes() {
        let mut envelope = Envelope::new("a", json!({}));
        envelope.idempotency_key = Some("k".repeat(MAX_KEY_NAME_BYTES));
        envelope.group = Some("g".repeat(MAX_RUNNABLE_NAME_BYTES));
        assert_eq!(check_runnable(&envelope), Ok(()));
        envelope.group = Some("g".repeat(600_000));
        let problem = check_runnable(&envelope).unwrap_err();
        assert!(
            problem.starts_with("\"group\" is 600000 bytes") && problem.contains("over the 4096"),
            "{problem}"
        );
    }
}
