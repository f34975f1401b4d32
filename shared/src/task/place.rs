//! A place: the node that keeps a grouped task's turn in its group's order while the task
//! waits outside its lane.
//!
//! An ordered group runs its tasks in the order of their numbers in their lane. A grouped task
//! that waits elsewhere (for its parents under `after/`, debounced under `debounce/`) would join
//! its lane only when it is let go, behind tasks of its group published after it. So when such a
//! task is published, a place is created at the tail of its lane in the same multi-op, and the
//! task takes the place's number when it is let go. A place is also left where a pending
//! grouped task went to the dead letters before its turn, when its group pauses on a death: the
//! group pauses when its turn comes, not while an earlier task of it still runs.
//!
//! A place's body is shaped as an envelope (its type, group, `on_dead`; no payload) with a
//! `place` field saying what it stands for, and a due time at the end of year 9999: a consumer
//! of the previous version, which knows no places, takes it for a grouped task not due yet and
//! leaves it where it is, holding back its group, as a place does.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::envelope::{Envelope, OnDead};

/// The due time a place's body carries: 9999-12-31T23:59:59Z, in ms.
pub const PLACE_DUE_MS: i64 = 253_402_300_799_000;

/// The field that tells a place from a task.
const FIELD: &str = "place";

/// What a place stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StandsFor {
    /// A child waiting for its parents under `after/<id>` (the place's id).
    Parents,
    /// A debounced publish pending under `debounce/<key>`, whose first publish had the
    /// place's id.
    Debounce {
        /// The debounce key.
        key: String,
    },
    /// A task that went to the dead letters (as `letter`, for `reason`) before its turn: its
    /// group pauses when the turn comes.
    Dead {
        /// The dead letter's name.
        letter: String,
        /// Why it went there.
        reason: String,
    },
}

/// A place, as read from its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    /// The id it stands under: the task's, or (debounced) the id of the publish that started
    /// its key.
    pub id: String,
    /// The event type of the task it stands for.
    pub event_type: String,
    /// The group whose order it keeps.
    pub group: String,
    /// What the task asked its group to do when it goes to the dead letters.
    pub on_dead: Option<OnDead>,
    /// When the task it stands for was published (its envelope's time).
    pub time: DateTime<Utc>,
    /// Why the place exists: where the task waits, or that it is dead.
    pub stands_for: StandsFor,
}

impl Place {
    /// The place of grouped `task` (of group `group`), standing for `stands_for` under `id`.
    pub fn of(task: &Envelope, group: &str, id: &str, stands_for: StandsFor) -> Place {
        Place {
            id: id.to_string(),
            event_type: task.event_type.clone(),
            group: group.to_string(),
            on_dead: task.on_dead,
            time: task.time,
            stands_for,
        }
    }

    /// The place's body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut body = Envelope::new(self.event_type.clone(), Value::Null);
        body.id = self.id.clone();
        body.time = self.time;
        body.group = Some(self.group.clone());
        body.on_dead = self.on_dead;
        body.retry_at = Some(PLACE_DUE_MS);
        let stands_for = serde_json::to_value(&self.stands_for).expect("a plain enum");
        body.extra = Map::from_iter([(FIELD.to_string(), stands_for)]);
        serde_json::to_vec(&body).expect("an envelope serializes")
    }

    /// The place an envelope read from a lane is, when it is one (`Err`: a `place` field that
    /// says nothing this version knows, with the problem).
    pub(super) fn from_envelope(envelope: &Envelope) -> Option<Result<Place, String>> {
        let field = envelope.extra.get(FIELD)?;
        let Some(group) = envelope.group.clone() else {
            return Some(Err("a place without a group".into()));
        };
        let stands_for = match serde_json::from_value(field.clone()) {
            Ok(stands_for) => stands_for,
            Err(e) => return Some(Err(format!("a place standing for nothing known: {e}"))),
        };
        Some(Ok(Place {
            id: envelope.id.clone(),
            event_type: envelope.event_type.clone(),
            group,
            on_dead: envelope.on_dead,
            time: envelope.time,
            stands_for,
        }))
    }
}
