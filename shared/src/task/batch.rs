//! A batch's znode (`batches/<name>`): what it asked for, its counters, and the callback
//! tasks published once it is sealed and settled (see [`crate::batch`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Envelope;

/// Dead members named in a batch (and its callback), at most; the count goes on past it.
pub const MAX_DEAD_NAMES: usize = 100;
/// A batch's payload, at most, as JSON (the batch's znode and its callbacks carry it, and the
/// multi-op that publishes them must fit one request with a completion's other writes).
pub const MAX_BATCH_PAYLOAD_BYTES: usize = 4 * 1024;
/// What one batch's tally may add to a multi-op, at most: its state and two callbacks, each
/// bounded by the payload, the name and the dead members' names.
pub const MAX_TALLY_BYTES: usize = 40 * 1024;
/// A batch name's limit, as a znode name.
const MAX_BATCH_NAME_BYTES: usize = 512;

/// `batches/<name>`'s JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchState {
    /// The batch's name: its znode's.
    pub name: String,
    /// The event type of the callback published once it is sealed and settled.
    pub on_complete: String,
    /// The event type of the callback published besides, when no member is dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<String>,
    /// What the opener asked the callbacks to carry.
    #[serde(default)]
    pub payload: Value,
    /// When it was opened (ZooKeeper ms).
    pub opened_at_ms: i64,
    /// No member joins any more; the callback is due once nothing is pending.
    #[serde(default)]
    pub sealed: bool,
    /// Members that joined, counted in the multi-op of each member's publish.
    #[serde(default)]
    pub total: u64,
    /// Members that completed, counted in the multi-op that removed each.
    #[serde(default)]
    pub completed: u64,
    /// Members that went to the dead letters, counted in the multi-op that buried each.
    #[serde(default)]
    pub dead: u64,
    /// The first [`MAX_DEAD_NAMES`] dead members' task names.
    #[serde(default)]
    pub dead_members: Vec<String>,
    /// The callback's envelope id, set in the write that published it; then the batch is
    /// over and counts nothing more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_id: Option<String>,
    /// The `on_success` callback's envelope id, when it was published too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_callback_id: Option<String>,
    /// The callback task's name, written just after (absent if that write was lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
}

/// What `batch status` answers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct BatchStatus {
    /// The batch's name.
    pub name: String,
    /// Members that joined.
    pub total: u64,
    /// Members not yet completed or dead: `total - completed - dead`.
    pub pending: u64,
    /// Members that completed.
    pub completed: u64,
    /// Members that went to the dead letters.
    pub dead: u64,
    /// Whether it is sealed (no member joins any more).
    pub sealed: bool,
    /// The callback task's name (its id until the name is written), or null.
    pub callback: Option<String>,
    /// The `on_complete` callback's envelope id, once published.
    pub callback_id: Option<String>,
    /// The `on_success` callback's envelope id, once published.
    pub success_callback_id: Option<String>,
    /// The first dead members' task names (at most [`MAX_DEAD_NAMES`]).
    pub dead_members: Vec<String>,
    /// The event type of the callback published once it is sealed and settled.
    pub on_complete: String,
    /// The event type of the callback published besides when no member is dead, if asked.
    pub on_success: Option<String>,
}

impl BatchState {
    pub(crate) fn open(
        name: &str,
        on_complete: String,
        on_success: Option<String>,
        payload: Value,
        now_ms: i64,
    ) -> Self {
        BatchState {
            name: name.to_string(),
            on_complete,
            on_success,
            payload,
            opened_at_ms: now_ms,
            sealed: false,
            total: 0,
            completed: 0,
            dead: 0,
            dead_members: Vec::new(),
            callback_id: None,
            success_callback_id: None,
            callback: None,
        }
    }

    /// Members neither completed nor dead.
    pub fn pending(&self) -> u64 {
        self.total.saturating_sub(self.completed + self.dead)
    }

    /// Its callback was published: it counts nothing more.
    pub fn over(&self) -> bool {
        self.callback_id.is_some()
    }

    /// Counts `completed` members completed and `dead` ones buried; `false` (nothing
    /// changed) once the batch is over.
    pub(crate) fn settle(&mut self, completed: u64, dead: &[String]) -> bool {
        if self.over() {
            return false;
        }
        // More settled than ever joined: a member the batch never counted (a producer that
        // wrote `batch` into a body by hand). Refused, though one settled before the counted
        // ones are cannot be told from them.
        if self.completed + self.dead + completed + dead.len() as u64 > self.total {
            tracing::warn!(batch = %self.name, total = self.total, "a member the batch never counted was settled; not counted");
            return false;
        }
        self.completed += completed;
        self.dead += dead.len() as u64;
        let room = MAX_DEAD_NAMES.saturating_sub(self.dead_members.len());
        self.dead_members.extend(dead.iter().take(room).cloned());
        true
    }

    /// Counts dead member `name` pending again (it was redriven); `false` (nothing changed)
    /// once the batch is over, or when it counts no dead member.
    pub(crate) fn rejoin(&mut self, name: &str) -> bool {
        if self.over() || self.dead == 0 {
            return false;
        }
        self.dead -= 1;
        if let Some(at) = self.dead_members.iter().position(|n| n == name) {
            self.dead_members.remove(at);
        }
        true
    }

    /// Sealed, with nothing pending, and no callback yet: its callback is due now.
    pub(crate) fn due(&self) -> bool {
        self.sealed && self.pending() == 0 && !self.over()
    }

    /// What `batch status` shows of this state; `pending` is derived from the counters.
    pub fn status(&self) -> BatchStatus {
        BatchStatus {
            name: self.name.clone(),
            total: self.total,
            pending: self.pending(),
            completed: self.completed,
            dead: self.dead,
            sealed: self.sealed,
            callback: self.callback.clone().or_else(|| self.callback_id.clone()),
            callback_id: self.callback_id.clone(),
            success_callback_id: self.success_callback_id.clone(),
            dead_members: self.dead_members.clone(),
            on_complete: self.on_complete.clone(),
            on_success: self.on_success.clone(),
        }
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a batch serializes")
    }
}

/// A batch name: at least one character, at most 512 bytes as a znode name.
pub fn check_batch_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("\"batch\" is empty: give a name of at least one character, or none".into());
    }
    crate::segment::fits_as_name("batch", name, MAX_BATCH_NAME_BYTES)
}

/// The callback envelopes of `state` (which is due): one of `on_complete`, and one of
/// `on_success` too when it asks for one and no member is dead. Their ids are set in `state`.
pub(crate) fn callback_envelopes(state: &mut BatchState) -> Vec<Envelope> {
    let mut out = vec![envelope(state, &state.on_complete, "complete")];
    state.callback_id = Some(out[0].id.clone());
    if let Some(on_success) = state.on_success.clone().filter(|_| state.dead == 0) {
        let success = envelope(state, &on_success, "success");
        state.success_callback_id = Some(success.id.clone());
        out.push(success);
    }
    out
}

fn envelope(state: &BatchState, event_type: &str, outcome: &str) -> Envelope {
    Envelope::new(
        event_type,
        json!({
            "batch": state.name,
            "outcome": outcome,
            "payload": state.payload,
            "total": state.total,
            "completed": state.completed,
            "dead": state.dead,
            "dead_members": state.dead_members,
            "dead_members_truncated": state.dead > state.dead_members.len() as u64,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> BatchState {
        BatchState::open("b", "done".into(), None, Value::Null, 0)
    }

    #[test]
    fn due_only_when_sealed_and_nothing_pending() {
        let mut b = batch();
        b.total = 2;
        assert!(b.settle(1, &["task-1".into()]));
        assert!(!b.due(), "not sealed");
        b.sealed = true;
        assert!(b.due());
        b.total = 3;
        assert!(!b.due(), "one pending");
    }

    #[test]
    fn a_member_never_counted_is_not_counted_when_settled() {
        let mut b = batch();
        b.total = 1;
        b.sealed = true;
        assert!(!b.settle(2, &[]));
        assert_eq!((b.completed, b.due()), (0, false));
    }

    #[test]
    fn an_over_batch_counts_nothing() {
        let mut b = batch();
        b.callback_id = Some("x".into());
        assert!(!b.settle(1, &[]));
        assert_eq!(b.completed, 0);
    }

    #[test]
    fn dead_names_are_capped_not_the_count() {
        let mut b = batch();
        b.total = 150;
        let names: Vec<String> = (0..150).map(|n| format!("task-{n}")).collect();
        b.settle(0, &names);
        assert_eq!((b.dead, b.dead_members.len()), (150, MAX_DEAD_NAMES));
    }

    #[test]
    fn a_redriven_member_is_pending_again_until_the_batch_is_over() {
        let mut b = batch();
        b.total = 2;
        b.settle(1, &["task-2".into()]);
        assert!(b.rejoin("task-2"));
        assert_eq!((b.pending(), b.dead, b.dead_members.len()), (1, 0, 0));
        assert!(!b.rejoin("task-2"), "no dead member left to count");
        b.settle(0, &["task-2".into()]);
        b.callback_id = Some("x".into());
        assert!(!b.rejoin("task-2"), "over");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_batch_name("").is_err());
        assert!(check_batch_name(&"x".repeat(600)).is_err());
        assert!(check_batch_name("import-2026-11").is_ok());
    }
}
