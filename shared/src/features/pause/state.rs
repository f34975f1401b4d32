//! What is paused: the form of `ROOT/paused` ([`Paused`]), and what to pause or unpause
//! ([`PauseTarget`]). Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What is paused (`ROOT/paused`'s data; no znode means nothing is).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Paused {
    /// The whole queue, since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<PausedSince>,
    /// Event types, each since when.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, PausedSince>,
}

/// When a pause began (the pausing client's clock, ms since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedSince {
    /// When the pause began (ms since the epoch, the pausing client's clock).
    pub since: i64,
}

/// What to pause or unpause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PauseTarget {
    /// The whole queue.
    Queue,
    /// One event type.
    Type(String),
}

impl Paused {
    /// The `paused` znode's data at `path`, read (empty: nothing paused).
    pub(crate) fn parse(path: &str, data: &[u8]) -> Result<Paused> {
        if data.is_empty() {
            return Ok(Paused::default());
        }
        serde_json::from_slice(data).map_err(|e| Error::Unreadable {
            path: path.to_string(),
            problem: e.to_string(),
        })
    }

    /// What the stats say is paused (their `paused` field, see [`crate::stats::Stats`];
    /// nothing when they do not say).
    pub fn in_stats(stats: &crate::stats::Stats) -> Paused {
        (stats.features.get(super::FIELD))
            .and_then(|value| Paused::deserialize(value).ok())
            .unwrap_or_default()
    }

    /// Whether a task of `event_type` may not be claimed now.
    pub fn covers(&self, event_type: &str) -> bool {
        self.queue.is_some() || self.types.contains_key(event_type)
    }

    /// Whether nothing is paused.
    pub fn is_empty(&self) -> bool {
        self.queue.is_none() && self.types.is_empty()
    }

    /// When the pause that covers `event_type` began, and whether it is the whole queue's.
    pub(super) fn since(&self, event_type: &str) -> Option<(i64, bool)> {
        match (&self.queue, self.types.get(event_type)) {
            (Some(all), _) => Some((all.since, true)),
            (None, Some(one)) => Some((one.since, false)),
            (None, None) => None,
        }
    }

    /// `target` paused (`on`) or unpaused; whether that changed anything.
    pub(super) fn set(&mut self, target: &PauseTarget, on: bool) -> bool {
        let since = PausedSince {
            since: chrono::Utc::now().timestamp_millis(),
        };
        match (target, on) {
            (PauseTarget::Queue, true) => self.queue.replace(self.queue.unwrap_or(since)).is_none(),
            (PauseTarget::Queue, false) => self.queue.take().is_some(),
            (PauseTarget::Type(t), true) => {
                let fresh = !self.types.contains_key(t);
                self.types.entry(t.clone()).or_insert(since);
                fresh
            }
            (PauseTarget::Type(t), false) => self.types.remove(t).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_or_the_whole_queue_covers_tasks() {
        let mut paused = Paused::default();
        assert!(!paused.covers("email"));
        assert!(paused.set(&PauseTarget::Type("email".into()), true));
        assert!(
            !paused.set(&PauseTarget::Type("email".into()), true),
            "already"
        );
        assert!(paused.covers("email") && !paused.covers("sms"));
        assert!(paused.set(&PauseTarget::Queue, true));
        assert!(paused.covers("sms"));
        assert!(paused.set(&PauseTarget::Queue, false));
        assert!(paused.set(&PauseTarget::Type("email".into()), false));
        assert!(paused.is_empty());
    }

    #[test]
    fn the_znode_reads_as_written() {
        let mut paused = Paused::default();
        paused.set(&PauseTarget::Type("email".into()), true);
        let json = serde_json::to_string(&paused).unwrap();
        assert!(json.starts_with(r#"{"types":{"email":{"since":"#), "{json}");
        assert_eq!(serde_json::from_str::<Paused>(&json).unwrap(), paused);
        assert_eq!(
            serde_json::from_str::<Paused>("{}").unwrap(),
            Paused::default()
        );
    }

    #[test]
    fn the_whole_queue_s_pause_goes_before_a_type_s() {
        let mut paused = Paused::default();
        paused
            .types
            .insert("email".into(), PausedSince { since: 5 });
        assert_eq!(paused.since("email"), Some((5, false)));
        assert_eq!(paused.since("sms"), None);
        paused.queue = Some(PausedSince { since: 7 });
        assert_eq!(paused.since("email"), Some((7, true)));
    }
}
