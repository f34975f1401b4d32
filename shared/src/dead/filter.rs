//! A page of dead letters picked by event type and reason, for the dashboard: `dead/` is
//! listed once (dead letters are what operators have not dealt with yet, not the backlog),
//! and records are read [`PAGE`] to a request until the page is full.

use serde_json::Value;

use super::{PAGE, names, read_page};
use crate::error::Result;
use crate::queue::Queue;

/// Which dead letters to show: each part is ignored when empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The event type of the buried body, exactly.
    pub event_type: String,
    /// A part of the reason, in any case (`gave up` finds `gave up after 5 attempts`).
    pub reason: String,
}

impl Filter {
    /// Whether a record passes.
    pub fn admits(&self, record: &Value) -> bool {
        let type_ok =
            self.event_type.is_empty() || event_type(record).is_some_and(|t| t == self.event_type);
        let reason_ok = self.reason.is_empty()
            || record["reason"]
                .as_str()
                .is_some_and(|r| r.to_lowercase().contains(&self.reason.to_lowercase()));
        type_ok && reason_ok
    }
}

/// The event type of a record's body, when the body was an envelope.
pub fn event_type(record: &Value) -> Option<&str> {
    record.pointer("/body/type").and_then(Value::as_str)
}

/// One page of dead letters.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Page {
    /// Oldest task first, with their names.
    pub records: Vec<(String, Value)>,
    /// Where the next page starts (the name after which to go on), when there is more.
    pub next_after: Option<String>,
    /// All dead letters, whatever the filter.
    pub total: usize,
}

/// Up to `limit` dead letters passing `filter`, after the name `after` (from the oldest).
pub async fn page(
    queue: &Queue,
    filter: &Filter,
    after: Option<&str>,
    limit: usize,
) -> Result<Page> {
    let all = names(queue).await?;
    let start = after
        .and_then(|a| all.iter().position(|n| n == a))
        .map_or(0, |i| i + 1);
    let mut page = Page {
        total: all.len(),
        ..Page::default()
    };
    for chunk in all[start..].chunks(PAGE) {
        for (name, record) in read_page(queue, chunk).await? {
            if !filter.admits(&record) {
                continue;
            }
            if page.records.len() == limit {
                page.next_after = page.records.last().map(|(n, _)| n.clone());
                return Ok(page);
            }
            page.records.push((name, record));
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_filter_matches_the_body_type_exactly_and_a_part_of_the_reason() {
        let record = json!({"reason": "gave up after 5 attempts", "body": {"type": "mail.send"}});
        let by = |t: &str, r: &str| Filter {
            event_type: t.into(),
            reason: r.into(),
        };
        assert!(by("", "").admits(&record));
        assert!(by("mail.send", "GAVE UP").admits(&record));
        assert!(!by("mail", "").admits(&record));
        assert!(!by("", "cancelled").admits(&record));
        assert!(
            !by("mail.send", "").admits(&json!({"reason": "body is not JSON", "body_text": "x"}))
        );
    }
}
