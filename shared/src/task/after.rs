//! Dependencies as they are written: what a child asks of its parents (`after`,
//! `on_parent_dead`), and the marker a parent with children leaves at `dependents/<id>`.
//!
//! A marker's data is empty while its parent is unsettled; the write that settles the parent
//! sets it to a [`ParentEnd`] in the same multi-op. The queue side is in `queue::parents`
//! (publishing a child) and `queue::dependents` (settling the children).

use serde::{Deserialize, Serialize};

/// The most parents one task may wait for.
pub const MAX_PARENTS: usize = 16;

/// What a child does when one of its parents goes to the dead letters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnParentDead {
    /// It goes to the dead letters too, with a reason that names the parent.
    #[default]
    Fail,
    /// It runs anyway, once its other parents are settled.
    Run,
}

impl OnParentDead {
    /// `fail` or `run`; an error naming the field for anything else.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "fail" => Ok(OnParentDead::Fail),
            "run" => Ok(OnParentDead::Run),
            other => Err(format!(
                "\"on_parent_dead\" must be fail or run, not {other:?}"
            )),
        }
    }
}

/// How a parent ended (completed or dead), as its marker keeps it until its children are
/// seen to. Its JSON tag stays `settled`, as the wire format has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "settled", rename_all = "snake_case")]
pub enum ParentEnd {
    /// The parent completed: its children may run.
    Completed {
        /// The parent's task name.
        task: String,
    },
    /// The parent went to the dead letters: each child fails or runs as its `on_parent_dead` says.
    Dead {
        /// The parent's task name.
        task: String,
        /// Why it went to the dead letters.
        reason: String,
    },
}

impl ParentEnd {
    /// The marker's data: JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a settlement is plain data")
    }

    /// A marker's data: `None` while its parent is unsettled (empty), or when it is not ours.
    pub fn parse(data: &[u8]) -> Option<Self> {
        if data.is_empty() {
            return None;
        }
        serde_json::from_slice(data).ok()
    }

    /// The reason a child that fails with its parent goes to the dead letters with.
    pub fn child_reason(&self, parent_id: &str) -> Option<String> {
        match self {
            ParentEnd::Completed { .. } => None,
            ParentEnd::Dead { task, reason } => Some(format!(
                "parent {task} (id {parent_id}) went to the dead letters: {reason}"
            )),
        }
    }
}

/// A child's entry under its parent's marker (`dependents/<parent id>/<child id>`): the name
/// the parent had where the child's publish found it, so that the audit finds a parent still
/// there with one read instead of a walk of the queue. Empty data (an entry of an earlier
/// version, a parent published in the same call, one waiting for parents of its own) says
/// nothing of where it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEntry {
    /// The parent's task name (in its lane, or waiting under `delayed/` under that name).
    pub parent_task: String,
}

impl ChildEntry {
    /// The entry's data: JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an entry is plain data")
    }

    /// An entry's data: `None` when empty or not ours.
    pub fn parse(data: &[u8]) -> Option<Self> {
        serde_json::from_slice(data).ok()
    }
}

/// What a publish refuses in `after` (the ids or names of the parents) of the task with id
/// `id`: none given, too many, an empty one, the task itself.
pub fn check_after(id: &str, after: &[String]) -> Result<(), String> {
    if after.len() > MAX_PARENTS {
        return Err(format!(
            "\"after\" names {} parents, over the {MAX_PARENTS} a task may wait for",
            after.len()
        ));
    }
    if after.iter().any(String::is_empty) {
        return Err("\"after\" has an empty name".into());
    }
    if after.iter().any(|a| a == id) {
        return Err(format!(
            "\"after\" names the task itself ({}): a cycle of dependencies",
            super::clipped(id)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_name_the_parent() {
        let dead = ParentEnd::Dead {
            task: "task-0000000004".into(),
            reason: "HTTP 500".into(),
        };
        assert_eq!(ParentEnd::parse(&dead.to_bytes()), Some(dead.clone()));
        assert_eq!(ParentEnd::parse(b""), None);
        assert_eq!(
            dead.child_reason("p-1").unwrap(),
            "parent task-0000000004 (id p-1) went to the dead letters: HTTP 500"
        );
        let done = ParentEnd::Completed { task: "t".into() };
        assert_eq!(done.child_reason("p"), None);
        let entry = ChildEntry {
            parent_task: "task-0000000004".into(),
        };
        assert_eq!(ChildEntry::parse(&entry.to_bytes()), Some(entry));
        assert_eq!(ChildEntry::parse(b""), None);
    }

    #[test]
    fn after_refuses_itself_empties_and_too_many() {
        assert!(check_after("a", &["b".into()]).is_ok());
        assert!(
            check_after("a", &["a".into()])
                .unwrap_err()
                .contains("cycle")
        );
        assert!(
            check_after("a", &["".into()])
                .unwrap_err()
                .contains("empty")
        );
        let many: Vec<String> = (0..=MAX_PARENTS).map(|i| i.to_string()).collect();
        assert!(check_after("a", &many).unwrap_err().contains("over the 16"));
        assert_eq!(OnParentDead::parse("run"), Ok(OnParentDead::Run));
        assert!(
            OnParentDead::parse("x")
                .unwrap_err()
                .contains("on_parent_dead")
        );
    }
}
