//! A task's priority, and the lane of the queue it waits in (`layout` and `task` take it from
//! here; a key becomes a znode name as `segment` says).
//!
//! Each priority has a lane of its own: a parent of persistent sequential tasks with its own
//! numbering and head. `normal` is the 000 design's `tasks/`, with its `task-` names, so a
//! task without a priority is where any producer puts it; `high` and `low` are
//! `lanes/high/high-N` and `lanes/low/low-N`.
//!
//! A normal task with a concurrency key, in no ordered group, waits in its key's lane instead:
//! `lanes/keys/<key>/key.<key>.N` (`<key>` encoded as one znode name), so that consumers can
//! take keys in turn (see `queue::walk`). A key lane's parent is made by the first publish of
//! its key and never deleted: its numbering goes on, and a name is never given twice.
//!
//! A task's name therefore says its lane, and every path derived from a name (its lease, its
//! dead letter, its completion record) stays unique across lanes.

use serde::{Deserialize, Serialize};

/// A task's priority: consumers take high before normal before low (or, with weighted lanes,
/// in proportion to the lanes' weights).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Taken first.
    High,
    /// The default: the 000 design's `tasks/`.
    #[default]
    Normal,
    /// Taken last.
    Low,
}

impl Priority {
    /// Every priority, in the order consumers take them.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// The word publishers use for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    /// The priority `text` names, or a problem naming the field.
    pub fn parse(text: &str) -> Result<Priority, String> {
        match text {
            "high" => Ok(Priority::High),
            "normal" => Ok(Priority::Normal),
            "low" => Ok(Priority::Low),
            other => Err(format!(
                "\"priority\" must be high, normal or low, not {other:?}"
            )),
        }
    }

    /// Whether this is [`Priority::Normal`].
    pub fn is_normal(&self) -> bool {
        *self == Priority::Normal
    }

    /// Its place in [`Priority::ALL`]: 0 for high.
    pub fn rank(self) -> usize {
        self as usize
    }

    /// What ZooKeeper's sequence number is appended to in its lane.
    pub fn prefix(self) -> &'static str {
        match self {
            Priority::High => "high-",
            Priority::Normal => "task-",
            Priority::Low => "low-",
        }
    }

    /// The lane a task name is in, by its prefix (a name of no lane is normal's: `tasks/`
    /// holds whatever other producers create by name).
    pub fn of_name(name: &str) -> Priority {
        [Priority::High, Priority::Low]
            .into_iter()
            .find(|p| name.starts_with(p.prefix()))
            .unwrap_or(Priority::Normal)
    }

    /// The priority a task body asks for: its `priority` field when it is one of the three
    /// words, else normal (a plain body, or an envelope without one).
    pub fn of_body(body: &[u8]) -> Priority {
        #[derive(Deserialize)]
        struct Asks {
            priority: Option<Priority>,
        }
        serde_json::from_slice::<Asks>(body)
            .ok()
            .and_then(|asks| asks.priority)
            .unwrap_or_default()
    }
}

/// The lane a task waits in: its priority's, or (normal, with a concurrency key, in no ordered
/// group) its key's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// A priority's lane.
    Priority(Priority),
    /// A key's lane; the key as one znode name (encoded).
    Key(String),
}

/// What a key lane's task names start with, before the encoded key.
pub const KEY_PREFIX: &str = "key.";

impl Lane {
    /// The normal lane, `tasks/`.
    pub const NORMAL: Lane = Lane::Priority(Priority::Normal);

    /// The lane of concurrency key `key`.
    pub fn of_key(key: &str) -> Lane {
        Lane::Key(crate::segment::encode_segment(key))
    }

    /// Where a task of `priority`, `concurrency_key` and `group` waits: high and low tasks in
    /// their priority's lane whatever their key, a grouped task in its priority's lane (its
    /// group's order is one lane's), any other task with a key in the key's lane.
    pub fn for_task(priority: Priority, key: Option<&str>, group: Option<&str>) -> Lane {
        match (priority, key, group) {
            (Priority::Normal, Some(key), None) => Lane::of_key(key),
            _ => Lane::Priority(priority),
        }
    }

    /// What ZooKeeper's sequence number is appended to in this lane.
    pub fn prefix(&self) -> String {
        match self {
            Lane::Priority(p) => p.prefix().to_string(),
            Lane::Key(key) => format!("{KEY_PREFIX}{key}."),
        }
    }

    /// The lane a task name is in, by its prefix (a name of no lane is normal's: `tasks/`
    /// holds whatever other producers create by name).
    pub fn of_name(name: &str) -> Lane {
        // A key as `encode_segment` writes it: letters, digits, `-`, `_` and `%`.
        let encoded = |key: &str| {
            !key.is_empty()
                && (key.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b))
        };
        if let Some(rest) = name.strip_prefix(KEY_PREFIX)
            && let Some((key, _)) = rest.split_once('.')
            && encoded(key)
        {
            return Lane::Key(key.to_string());
        }
        Lane::Priority(Priority::of_name(name))
    }

    /// The lane a task body asks for (see [`Lane::for_task`]); a body that is not JSON, or
    /// asks for nothing, is normal's.
    pub fn of_body(body: &[u8]) -> Lane {
        #[derive(Deserialize)]
        struct Asks {
            priority: Option<Priority>,
            concurrency_key: Option<String>,
            group: Option<String>,
        }
        match serde_json::from_slice::<Asks>(body) {
            Ok(asks) => Lane::for_task(
                asks.priority.unwrap_or_default(),
                asks.concurrency_key.as_deref().filter(|k| !k.is_empty()),
                asks.group.as_deref(),
            ),
            // A bad priority: the task still goes somewhere, and its claim buries it.
            Err(_) => Lane::Priority(Priority::of_body(body)),
        }
    }

    /// The priority whose turn this lane takes: a key lane is in normal's.
    pub fn priority(&self) -> Priority {
        match self {
            Lane::Priority(p) => *p,
            Lane::Key(_) => Priority::Normal,
        }
    }

    /// The key of a key lane, decoded.
    pub fn key(&self) -> Option<String> {
        match self {
            Lane::Key(key) => Some(crate::segment::decode_segment(key)),
            Lane::Priority(_) => None,
        }
    }
}

impl From<Priority> for Lane {
    fn from(p: Priority) -> Lane {
        Lane::Priority(p)
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lane::Priority(p) => p.fmt(f),
            Lane::Key(key) => write!(f, "key {}", crate::segment::decode_segment(key)),
        }
    }
}

/// `LANE_WEIGHTS`: how a walk shares its windows among the lanes that have tasks, instead of
/// taking them in strict order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneWeights {
    /// Weights of high, normal and low, in that order; each at least 1.
    pub weights: [u32; 3],
}

impl LaneWeights {
    /// Parses `high=6,normal=3,low=1` (every lane named once, each weight 1 to 1000); the
    /// problem says which part is wrong.
    pub fn parse(text: &str) -> std::result::Result<LaneWeights, String> {
        let mut weights = [0u32; 3];
        for part in text.split(',').map(str::trim) {
            let Some((lane, weight)) = part.split_once('=') else {
                return Err(format!("{part:?} is not lane=weight"));
            };
            let lane = Priority::parse(lane.trim())
                .map_err(|_| format!("{:?} is not a lane (high, normal or low)", lane.trim()))?;
            let weight: u32 = match weight.trim().parse() {
                Ok(w @ 1..=1000) => w,
                _ => {
                    return Err(format!(
                        "{part:?}: a weight is a whole number from 1 to 1000"
                    ));
                }
            };
            if weights[lane.rank()] != 0 {
                return Err(format!("{lane} is named twice"));
            }
            weights[lane.rank()] = weight;
        }
        if let Some(missing) = Priority::ALL.iter().find(|p| weights[p.rank()] == 0) {
            return Err(format!("{missing} has no weight: name all three lanes"));
        }
        Ok(LaneWeights { weights })
    }
}

/// Read from its word; any other value is an error that names the field (a consumer buries a
/// task with one, with that reason).
impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Priority::parse(&word).map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_their_lane() {
        assert_eq!(Priority::of_name("high-0000000001"), Priority::High);
        assert_eq!(Priority::of_name("low-0000000001"), Priority::Low);
        assert_eq!(Priority::of_name("task-0000000001"), Priority::Normal);
        assert_eq!(Priority::of_name("order-17"), Priority::Normal);
    }

    #[test]
    fn bodies_ask_for_a_lane_or_get_normal() {
        assert_eq!(Priority::of_body(br#"{"priority":"high"}"#), Priority::High);
        assert_eq!(
            Priority::of_body(br#"{"priority":"low","x":1}"#),
            Priority::Low
        );
        assert_eq!(
            Priority::of_body(br#"{"priority":"urgent"}"#),
            Priority::Normal
        );
        assert_eq!(Priority::of_body(b"not json"), Priority::Normal);
        assert_eq!(
            Priority::of_body(br#"{"event":"signup"}"#),
            Priority::Normal
        );
    }

    #[test]
    fn a_keyed_normal_task_waits_in_its_keys_lane() {
        let lane = Lane::for_task(Priority::Normal, Some("tenant/7"), None);
        assert_eq!(lane, Lane::Key("tenant%2F7".into()));
        assert_eq!(lane.prefix(), "key.tenant%2F7.");
        assert_eq!(Lane::of_name("key.tenant%2F7.0000000003"), lane);
        assert_eq!(lane.key().as_deref(), Some("tenant/7"));
        assert_eq!(lane.priority(), Priority::Normal);
        // Priority first, and a group's order is one lane's.
        let high = Lane::for_task(Priority::High, Some("t"), None);
        assert_eq!(high, Lane::Priority(Priority::High));
        assert_eq!(
            Lane::for_task(Priority::Normal, Some("t"), Some("g")),
            Lane::NORMAL
        );
        assert_eq!(Lane::of_name("task-0000000001"), Lane::NORMAL);
        assert_eq!(Lane::of_name("key.0000000001"), Lane::NORMAL);
        assert_eq!(
            Lane::of_name("key.a/b.0000000001"),
            Lane::NORMAL,
            "not an encoding"
        );
        assert_eq!(Lane::of_name("key.%.0000000001"), Lane::of_key(""));
        assert_eq!(
            Lane::of_body(br#"{"concurrency_key":"a","payload":{}}"#),
            Lane::of_key("a")
        );
        assert_eq!(
            Lane::of_body(br#"{"concurrency_key":"a","group":"g"}"#),
            Lane::NORMAL
        );
        assert_eq!(
            Lane::of_body(br#"{"priority":"urgent","concurrency_key":"a"}"#),
            Lane::NORMAL
        );
        assert_eq!(Lane::of_body(b"plain text"), Lane::NORMAL);
    }

    #[test]
    fn a_bad_priority_names_the_field() {
        assert_eq!(Priority::parse("low"), Ok(Priority::Low));
        let problem = Priority::parse("urgent").unwrap_err();
        assert!(problem.contains("\"priority\"") && problem.contains("urgent"));
    }

    #[test]
    fn weights_name_every_lane_once() {
        let w = LaneWeights::parse("high=6, normal=3,low=1").unwrap();
        assert_eq!(w.weights, [6, 3, 1]);
        for (text, problem) in [
            ("high=6,normal=3", "low has no weight"),
            ("high=6,normal=3,low=0", "from 1 to 1000"),
            ("high=6,high=3,low=1", "high is named twice"),
            ("urgent=6,normal=3,low=1", "\"urgent\" is not a lane"),
            ("high:6", "is not lane=weight"),
        ] {
            let got = LaneWeights::parse(text).unwrap_err();
            assert!(got.contains(problem), "{text}: {got}");
        }
    }
}
