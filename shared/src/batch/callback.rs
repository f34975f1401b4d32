//! A batch's callback tasks: published in the write that finds the batch sealed and settled.

use serde_json::json;

use super::BatchState;
use crate::task::Envelope;

/// The callback envelopes of `state` (which is due): one of `on_complete`, and one of
/// `on_success` too when it asks for one and no member is dead. Their ids are set in `state`.
pub fn callback_envelopes(state: &mut BatchState) -> Vec<Envelope> {
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
