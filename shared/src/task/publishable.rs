//! What a publish refuses of an envelope ([`Envelope::check_publishable`], and
//! [`check_envelope_size`] for the whole), and what a consumer cannot run
//! ([`check_runnable`]): each field held to its rules (`field`, `names`, `after`, `debounce`,
//! `batch`).

use super::Envelope;
use super::after::check_after;
use super::field::{check_named, check_text};
use super::names::{
    MAX_CONCURRENCY_KEY_NAME_BYTES, MAX_GROUP_NAME_BYTES, MAX_ID_NAME_BYTES, MAX_KEY_NAME_BYTES,
    MAX_RUNNABLE_NAME_BYTES, MAX_TYPE_NAME_BYTES,
};
use super::size::MAX_BODY_BYTES;
use crate::quoted::shown;
use crate::segment::{MEASURE, encoded_len, fits_as_name};

impl Envelope {
    /// What a publish refuses before writing anything: an empty id (the schema asks for one
    /// character at least; `status` and `cancel` by id could not name the task), an empty
    /// type, group or idempotency key, a control character in any of the fields a delivery
    /// sends as a header or the queue names a znode after (id, type, group, keys, parents),
    /// and any of those over its limit as a znode name (see `task::names`). The problem
    /// names the field and the limit.
    pub fn check_publishable(&self) -> Result<(), String> {
        if self.id.is_empty() {
            return Err(
                "\"id\" is empty: give one of at least one character, or none for a fresh one"
                    .into(),
            );
        }
        check_text("id", &self.id)?;
        check_named("type", &self.event_type)?;
        if let Some(group) = &self.group {
            check_named("group", group)?;
        }
        if let Some(key) = &self.idempotency_key {
            check_named("idempotency_key", key)?;
        }
        if let Some(debounce) = &self.debounce {
            check_text("debounce_key", &debounce.key)?;
        }
        check_names(self)?;
        self.check_concurrency_key()?;
        if let Some(debounce) = &self.debounce {
            debounce.check()?;
            if self.idempotency_key.is_some() {
                return Err(
                    "\"debounce_key\" and \"idempotency_key\" do not go together: a \
                     debounced publish replaces the pending one, a keyed one refuses a second"
                        .into(),
                );
            }
        }
        if let Some(batch) = &self.batch {
            super::batch::check_batch_name(batch)?;
            if self.debounce.is_some() || self.idempotency_key.is_some() {
                return Err(
                    "\"batch\" does not go with \"debounce_key\" or \"idempotency_key\" \
                     (not supported yet: a member is counted when it is published)"
                        .into(),
                );
            }
        }
        self.check_after()?;
        match &self.idempotency_key {
            Some(key) => fits_as_name("idempotency_key", key, MAX_KEY_NAME_BYTES),
            None => Ok(()),
        }
    }

    /// Dependencies: parents named well, and not with what counts a task when it is published
    /// (a batch, a key, a debounce).
    fn check_after(&self) -> Result<(), String> {
        if self.after.is_empty() {
            if self.on_parent_dead.is_some() {
                return Err("\"on_parent_dead\" needs \"after\"".into());
            }
            return Ok(());
        }
        check_after(&self.id, &self.after)?;
        if self.batch.is_some() || self.debounce.is_some() || self.idempotency_key.is_some() {
            return Err(
                "\"after\" does not go with \"batch\", \"debounce_key\" or \"idempotency_key\" \
                 (not supported yet: each counts a task when it is published)"
                    .into(),
            );
        }
        Ok(())
    }

    /// A concurrency key must name its gate: at least one character, and at most
    /// [`MAX_CONCURRENCY_KEY_NAME_BYTES`] as a znode name. (Consumers bury a task whose key
    /// breaks this, with the problem as the reason.)
    pub fn check_concurrency_key(&self) -> Result<(), String> {
        let Some(key) = &self.concurrency_key else {
            return Ok(());
        };
        if key.is_empty() {
            return Err(
                "\"concurrency_key\" is empty: give one of at least one character, or none".into(),
            );
        }
        check_text("concurrency_key", key)?;
        fits_as_name("concurrency_key", key, MAX_CONCURRENCY_KEY_NAME_BYTES)
    }
}

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

/// Refuses `envelope` when its body would be over [`MAX_BODY_BYTES`], saying how large it is;
/// measured as it is written out, without keeping what is written.
pub fn check_envelope_size(envelope: &Envelope) -> Result<(), String> {
    let mut counted = Counted(0);
    serde_json::to_writer(&mut counted, envelope)
        .map_err(|e| format!("the task is not serializable: {e}"))?;
    if counted.0 > MAX_BODY_BYTES {
        return Err(format!(
            "the task is {} bytes as JSON, over the {MAX_BODY_BYTES} a task may be (ZooKeeper's \
             znode limit): put large data elsewhere and a reference in the payload",
            counted.0
        ));
    }
    Ok(())
}

/// A writer that only counts what it is given.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_empty_id_or_a_key_too_long_as_a_znode_name_is_not_publishable() {
        let mut e = Envelope::new("a", json!({}));
        assert_eq!(e.check_publishable(), Ok(()));
        e.idempotency_key = Some("k".repeat(MAX_KEY_NAME_BYTES));
        assert_eq!(e.check_publishable(), Ok(()));
        // Two bytes of UTF-8, six as a znode name.
        e.idempotency_key = Some("é".repeat(MAX_KEY_NAME_BYTES / 6 + 1));
        let problem = e.check_publishable().unwrap_err();
        assert!(
            problem.contains("\"idempotency_key\" is 1366 bytes, 4098"),
            "{problem}"
        );
        e.idempotency_key = None;
        e.concurrency_key = Some(String::new());
        assert!(
            e.check_publishable()
                .unwrap_err()
                .contains("\"concurrency_key\" is empty")
        );
        e.concurrency_key = Some("/".repeat(MAX_CONCURRENCY_KEY_NAME_BYTES / 3 + 1));
        let problem = e.check_publishable().unwrap_err();
        assert!(
            problem.contains("\"concurrency_key\" is 342 bytes, 1026"),
            "{problem}"
        );
        e.concurrency_key = Some("tenant-7".into());
        assert_eq!(e.check_publishable(), Ok(()));
        e.concurrency_key = None;
        e.id = String::new();
        assert!(
            e.check_publishable()
                .unwrap_err()
                .contains("\"id\" is empty")
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

    #[test]
    fn an_envelope_is_measured_as_it_is_written() {
        let fits = Envelope::new("a", json!("x".repeat(MAX_BODY_BYTES - 1_000)));
        assert_eq!(check_envelope_size(&fits), Ok(()));
        let over = Envelope::new("a", json!("x".repeat(MAX_BODY_BYTES)));
        let size = serde_json::to_vec(&over).unwrap().len();
        let problem = check_envelope_size(&over).unwrap_err();
        assert!(
            problem.starts_with(&format!(
                "the task is {size} bytes as JSON, over the 1000000"
            )),
            "{problem}"
        );
    }
}
