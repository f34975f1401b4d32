//! What a resumable task has done so far, as its envelope keeps it (`resume`), and the replay
//! of it: the handler asks for its steps in order, and each ask is matched against what was
//! recorded at that position. A recorded step answers with its result; an ask past the end is
//! new work; an ask that differs from the record is a non-deterministic resume.
//!
//! The envelope keeps only the record's tail: its first `stored` entries are kept in step
//! znodes of their own (`steps/<id>/`, see [`super::store`]), so that a step's write does not
//! grow with the steps before it. A record written before that (every entry in `done`) has
//! `stored` 0 and reads as it did.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A resumable task's record, kept in its envelope as `resume`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The handler version the task's first step ran under (`EVENT_BRIDGE_HANDLER_VERSION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How many of the first entries are kept in step znodes rather than in `done`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stored: usize,
    /// How many of those `stored` entries are steps (what `status` counts without reading them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stored_steps: usize,
    /// Each step, sleep, wait and patch the handler asked for, in order, from position `stored`
    /// on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub done: Vec<Entry>,
    /// The handler's own checkpoint ([`super::Steps::checkpoint`], a webhook's `202` answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
}

/// One thing the handler asked for, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A step that ran, and its result.
    Step {
        /// The step's name.
        name: String,
        /// What the step returned, as JSON: a resume answers it instead of running the step.
        result: Value,
    },
    /// A durable sleep until this ZooKeeper time (ms since the epoch).
    Sleep {
        /// When the sleep ends.
        until_ms: i64,
    },
    /// A wait for any one of `keys` until `until_ms`; `outcome` once it ended.
    Wait {
        /// The signal keys, any one of which ends the wait.
        keys: Vec<String>,
        /// When the wait times out (ZooKeeper ms).
        until_ms: i64,
        /// How it ended; absent while it waits.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<WaitOutcome>,
    },
    /// The handler took the new path of change `id` ([`super::Steps::patched`]).
    Patch {
        /// The change's id.
        id: String,
    },
}

/// How a wait ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum WaitOutcome {
    /// Signal `key` came, with its payload.
    Signal {
        /// The key signalled.
        key: String,
        /// The signal's payload.
        payload: Value,
    },
    /// Its timeout passed first.
    Timeout,
}

/// What the handler asks for at a position.
#[derive(Clone, Debug, PartialEq)]
pub enum Ask<'a> {
    /// A step of this name.
    Step(&'a str),
    /// A durable sleep.
    Sleep,
    /// A wait for any one of these keys.
    Wait(&'a [String]),
    /// The new path of the change with this id.
    Patch(&'a str),
}

/// What the record answers an ask with.
#[derive(Debug, PartialEq)]
pub enum Replayed<'r> {
    /// Recorded at this position: the entry.
    Recorded(&'r Entry),
    /// Past the end of the record: new work.
    New,
    /// A patch asked for where the record has something else: the task started before the
    /// change (the position does not move).
    Unpatched,
}

/// A resume that asked for something else where the record has an entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("non-deterministic resume at step {position}: expected {expected}, got {got}")]
pub struct Mismatch {
    /// From 1.
    pub position: usize,
    /// What the record has there.
    pub expected: String,
    /// What the handler asked for.
    pub got: String,
}

impl Entry {
    /// How an error names it: `step "charge"`, `sleep`, `wait for ["a"]`, `patch "x"`.
    pub fn label(&self) -> String {
        match self {
            Entry::Step { name, .. } => format!("step {name:?}"),
            Entry::Sleep { .. } => "sleep".into(),
            Entry::Wait { keys, .. } => format!("wait for {keys:?}"),
            Entry::Patch { id } => format!("patch {id:?}"),
        }
    }

    /// Whether it answers `ask`.
    fn answers(&self, ask: &Ask<'_>) -> bool {
        match (self, ask) {
            (Entry::Step { name, .. }, Ask::Step(asked)) => name == asked,
            (Entry::Sleep { .. }, Ask::Sleep) => true,
            (Entry::Wait { keys, .. }, Ask::Wait(asked)) => keys.as_slice() == *asked,
            (Entry::Patch { id }, Ask::Patch(asked)) => id == asked,
            _ => false,
        }
    }
}

impl Ask<'_> {
    /// How an error names it, as [`Entry::label`] does.
    pub(crate) fn label(&self) -> String {
        match self {
            Ask::Step(name) => format!("step {name:?}"),
            Ask::Sleep => "sleep".into(),
            Ask::Wait(keys) => format!("wait for {keys:?}"),
            Ask::Patch(id) => format!("patch {id:?}"),
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Record {
    /// Answers `ask` at `position` (from 0); `earlier` holds the `stored` entries read from
    /// their znodes.
    ///
    /// # Errors
    /// [`Mismatch`] when the record has another entry there.
    pub fn replay<'r>(
        &'r self,
        earlier: &'r [Entry],
        position: usize,
        ask: &Ask<'_>,
    ) -> Result<Replayed<'r>, Mismatch> {
        let entry = match position.checked_sub(self.stored) {
            None => earlier.get(position),
            Some(at) => self.done.get(at),
        };
        let Some(entry) = entry else {
            return Ok(Replayed::New);
        };
        if entry.answers(ask) {
            return Ok(Replayed::Recorded(entry));
        }
        if matches!(ask, Ask::Patch(_)) {
            return Ok(Replayed::Unpatched);
        }
        Err(Mismatch {
            position: position + 1,
            expected: entry.label(),
            got: ask.label(),
        })
    }

    /// The wait or sleep it is suspended in, when its last entry is one not ended: what
    /// `status` shows.
    pub fn suspended_in(&self) -> Option<&Entry> {
        match self.done.last()? {
            entry @ Entry::Sleep { .. } => Some(entry),
            entry @ Entry::Wait { outcome: None, .. } => Some(entry),
            _ => None,
        }
    }

    /// How many steps (of kind step) it has done.
    pub fn steps_done(&self) -> usize {
        self.stored_steps + steps_in(&self.done)
    }

    /// How many entries it has, stored ones included: the position new work takes.
    pub fn len(&self) -> usize {
        self.stored + self.done.len()
    }

    /// Whether it has no entry at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its size as the envelope keeps it (the entries not yet stored included), in bytes of
    /// JSON: what `CHECKPOINT_MAX_BYTES` caps.
    pub fn size(&self) -> usize {
        serde_json::to_vec(self).map_or(usize::MAX, |b| b.len())
    }

    /// How many of `done`'s first entries the next write stores in a step znode: all but a
    /// sleep or a wait last, which `status`, a redrive and a signal read from the envelope
    /// (and a wait's outcome is written into it later).
    pub fn to_store(&self) -> usize {
        match self.done.last() {
            Some(Entry::Sleep { .. } | Entry::Wait { .. }) => self.done.len() - 1,
            _ => self.done.len(),
        }
    }

    /// The record as the envelope keeps it once `done`'s first `count` entries are stored.
    pub fn after_storing(&self, count: usize) -> Record {
        let count = count.min(self.done.len());
        Record {
            version: self.version.clone(),
            stored: self.stored + count,
            stored_steps: self.stored_steps + steps_in(&self.done[..count]),
            done: self.done[count..].to_vec(),
            checkpoint: self.checkpoint.clone(),
        }
    }
}

/// How many of `entries` are steps.
pub(crate) fn steps_in(entries: &[Entry]) -> usize {
    entries
        .iter()
        .filter(|e| matches!(e, Entry::Step { .. }))
        .count()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record() -> Record {
        Record {
            version: Some("v1".into()),
            done: vec![
                Entry::Step {
                    name: "fetch".into(),
                    result: json!(3),
                },
                Entry::Sleep { until_ms: 10 },
                Entry::Patch { id: "fix".into() },
            ],
            ..Record::default()
        }
    }

    #[test]
    fn a_recorded_ask_answers_with_its_entry_and_one_past_the_end_is_new() {
        let r = record();
        assert!(matches!(
            r.replay(&[], 0, &Ask::Step("fetch")),
            Ok(Replayed::Recorded(Entry::Step { result, .. })) if *result == json!(3)
        ));
        assert!(matches!(
            r.replay(&[], 1, &Ask::Sleep),
            Ok(Replayed::Recorded(_))
        ));
        assert!(matches!(
            r.replay(&[], 2, &Ask::Patch("fix")),
            Ok(Replayed::Recorded(_))
        ));
        assert_eq!(r.replay(&[], 3, &Ask::Step("send")), Ok(Replayed::New));
    }

    #[test]
    fn another_step_where_one_was_recorded_names_both() {
        let err = record().replay(&[], 0, &Ask::Step("charge")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "non-deterministic resume at step 1: expected step \"fetch\", got step \"charge\""
        );
        let keys = ["approval".to_string()];
        let err = record().replay(&[], 1, &Ask::Wait(&keys)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "non-deterministic resume at step 2: expected sleep, got wait for [\"approval\"]"
        );
    }

    #[test]
    fn a_patch_asked_where_the_record_has_other_work_is_not_taken() {
        assert_eq!(
            record().replay(&[], 0, &Ask::Patch("new")),
            Ok(Replayed::Unpatched)
        );
    }

    #[test]
    fn the_record_reads_back_as_written_and_says_what_it_waits_for() {
        let mut r = record();
        r.done.push(Entry::Wait {
            keys: vec!["a".into()],
            until_ms: 20,
            outcome: None,
        });
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["done"][3],
            json!({"kind": "wait", "keys": ["a"], "until_ms": 20})
        );
        let back: Record = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert!(matches!(back.suspended_in(), Some(Entry::Wait { .. })));
        assert_eq!(back.steps_done(), 1);
        r.done.pop();
        assert_eq!(r.suspended_in(), None, "a patch last: running");
    }

    #[test]
    fn a_write_stores_every_entry_but_a_sleep_or_wait_last_and_replays_across_both() {
        let r = record();
        assert_eq!(r.to_store(), 3, "a patch last is stored too");
        let mut waiting = r.clone();
        waiting.done.push(Entry::Sleep { until_ms: 30 });
        assert_eq!(
            waiting.to_store(),
            3,
            "the sleep it is in stays in the envelope"
        );
        let kept = waiting.after_storing(3);
        assert_eq!((kept.stored, kept.stored_steps, kept.len()), (3, 1, 4));
        assert_eq!(kept.done, [Entry::Sleep { until_ms: 30 }]);
        assert_eq!(kept.steps_done(), 1);
        assert!(matches!(kept.suspended_in(), Some(Entry::Sleep { .. })));
        let earlier = &r.done;
        assert!(matches!(
            kept.replay(earlier, 0, &Ask::Step("fetch")),
            Ok(Replayed::Recorded(Entry::Step { .. }))
        ));
        assert!(matches!(
            kept.replay(earlier, 3, &Ask::Sleep),
            Ok(Replayed::Recorded(Entry::Sleep { until_ms: 30 }))
        ));
        assert_eq!(kept.replay(earlier, 4, &Ask::Sleep), Ok(Replayed::New));
        let json = serde_json::to_value(&kept).unwrap();
        assert_eq!(
            (json["stored"].clone(), json["stored_steps"].clone()),
            (json!(3), json!(1))
        );
        assert!(
            serde_json::to_value(&r).unwrap().get("stored").is_none(),
            "old form unchanged"
        );
    }
}
