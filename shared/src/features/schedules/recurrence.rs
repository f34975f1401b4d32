//! What a recurring schedule is (feature `schedule`): a cron pattern in a time zone, and the
//! task it makes at each of its slots. Pure: when a slot falls, what the task of a slot looks
//! like. Stored by [`super::store`], fired by [`super::fire`].

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::task::{Envelope, OnDead};

/// What a schedule does with slots it finds passed by more than [`MISFIRE_GRACE_MS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// The latest passed slot makes its task, once, however many were missed.
    #[default]
    Last,
    /// Missed slots make nothing; the schedule goes on with its next slot.
    Skip,
}

/// How late a slot may be found and still count as on time under [`Misfire::Skip`]: the
/// functions look every minute, and a scheduled invocation may start late.
pub const MISFIRE_GRACE_MS: i64 = 120_000;

/// A schedule as stored in `schedules/<name>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The schedule's name: its znode's, and what `{name}` gives a key template.
    pub name: String,
    /// Five fields: minute, hour, day of month, month, day of week.
    pub cron: String,
    /// An IANA time zone (`Europe/Berlin`); the pattern is read in it, daylight saving
    /// included.
    #[serde(default = "utc")]
    pub tz: String,
    /// The tasks' event type and payload.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload each task carries.
    #[serde(default)]
    pub payload: Value,
    /// The ordered group each task joins, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// What each task asks its group to do when it goes to the dead letters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_dead: Option<OnDead>,
    /// An idempotency key per task, from `{name}`, `{slot}` (RFC 3339 in the zone),
    /// `{slot_ms}` and `{date}` (the slot's date in the zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key_template: Option<String>,
    /// What a slot found late makes.
    #[serde(default)]
    pub misfire: Misfire,
    /// A paused schedule takes no slot; unpausing sets its latest slot to the latest passed one.
    #[serde(default)]
    pub paused: bool,
    /// The latest slot taken (fired or skipped), ms since the epoch: no slot at or before it
    /// makes a task. Set to the latest passed slot when the schedule is added or unpaused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_slot_ms: Option<i64>,
}

fn utc() -> String {
    "UTC".into()
}

/// A schedule's pattern and zone, checked.
#[derive(Clone, Debug)]
pub struct Timing {
    cron: Cron,
    tz: Tz,
}

impl Timing {
    /// Parses `cron` (five fields, no seconds) in zone `tz`; the error says which is wrong.
    pub fn parse(cron: &str, tz: &str) -> Result<Self, String> {
        let parser = CronParser::builder().seconds(Seconds::Disallowed).build();
        let parsed = parser
            .parse(cron)
            .map_err(|e| format!("cron pattern {cron:?}: {e}"))?;
        let tz = Tz::from_str(tz).map_err(|_| format!("unknown time zone {tz:?}"))?;
        Ok(Timing { cron: parsed, tz })
    }

    /// The latest slot at or before `now_ms`, in ms since the epoch.
    pub fn latest_at_or_before(&self, now_ms: i64) -> Option<i64> {
        let now = self.tz.timestamp_millis_opt(now_ms).single()?;
        let slot = self.cron.find_previous_occurrence(&now, true).ok()?;
        Some(slot.timestamp_millis())
    }

    /// The first slot after `after_ms`, in ms since the epoch.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = self.tz.timestamp_millis_opt(after_ms).single()?;
        let slot = self.cron.find_next_occurrence(&after, false).ok()?;
        Some(slot.timestamp_millis())
    }

    /// `slot_ms` as a time in the schedule's zone.
    fn local(&self, slot_ms: i64) -> Option<DateTime<Tz>> {
        self.tz.timestamp_millis_opt(slot_ms).single()
    }
}

impl Schedule {
    /// Checks the pattern, the zone and the key template; the error names what is wrong.
    pub fn timing(&self) -> Result<Timing, String> {
        let timing = Timing::parse(&self.cron, &self.tz)?;
        if let Some(template) = &self.idempotency_key_template {
            render(template, &self.name, &timing, 0)?;
        }
        Ok(timing)
    }

    /// The task of slot `slot_ms`: its time is the slot's, its idempotency key from the
    /// template, and `scheduled` names the schedule and the slot.
    pub fn envelope(&self, timing: &Timing, slot_ms: i64) -> Result<Envelope, String> {
        let mut envelope = Envelope::new(&self.event_type, self.payload.clone());
        if let Some(time) = Utc.timestamp_millis_opt(slot_ms).single() {
            envelope.time = time;
        }
        envelope.group = self.group.clone();
        envelope.on_dead = self.on_dead;
        envelope.idempotency_key = match &self.idempotency_key_template {
            Some(template) => Some(render(template, &self.name, timing, slot_ms)?),
            None => None,
        };
        let slot = timing.local(slot_ms).map(|t| t.to_rfc3339());
        envelope.extra.insert(
            "scheduled".into(),
            serde_json::json!({ "schedule": self.name, "slot": slot }),
        );
        Ok(envelope)
    }
}

/// Fills `template`'s placeholders for one slot; an unknown placeholder is an error.
fn render(template: &str, name: &str, timing: &Timing, slot_ms: i64) -> Result<String, String> {
    let local = timing
        .local(slot_ms)
        .ok_or_else(|| format!("slot {slot_ms} is out of range"))?;
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("key template {template:?}: a '{{' is not closed"))?;
        let value = match &rest[open + 1..open + close] {
            "name" => name.to_string(),
            "slot" => local.to_rfc3339(),
            "slot_ms" => slot_ms.to_string(),
            "date" => local.format("%Y-%m-%d").to_string(),
            other => {
                return Err(format!(
                    "key template {template:?}: unknown placeholder {{{other}}} (known: {{name}}, {{slot}}, {{slot_ms}}, {{date}})"
                ));
            }
        };
        out.push_str(&value);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn slots_follow_the_zone_across_daylight_saving() {
        let berlin = Timing::parse("0 3 * * *", "Europe/Berlin").unwrap();
        // 2026-03-29: clocks go from 02:00 CET to 03:00 CEST; 03:00 CEST is 01:00 UTC.
        let spring = ms("2026-03-29T01:00:00Z");
        assert_eq!(berlin.next_after(ms("2026-03-28T12:00:00Z")), Some(spring));
        assert_eq!(berlin.latest_at_or_before(spring), Some(spring));
        assert_eq!(
            berlin.latest_at_or_before(spring - 1),
            Some(ms("2026-03-28T02:00:00Z")),
            "the day before, 03:00 CET is 02:00 UTC"
        );
        // 2026-10-25: back to CET; 03:00 CET is 02:00 UTC, once.
        assert_eq!(
            berlin.next_after(ms("2026-10-24T12:00:00Z")),
            Some(ms("2026-10-25T02:00:00Z"))
        );
    }

    #[test]
    fn bad_patterns_zones_and_templates_say_what_is_wrong() {
        assert!(
            Timing::parse("61 * * * *", "UTC")
                .unwrap_err()
                .contains("cron pattern")
        );
        assert!(
            Timing::parse("0 0 3 * * *", "UTC")
                .unwrap_err()
                .contains("cron pattern")
        );
        assert!(
            Timing::parse("0 3 * * *", "Mars/Olympus")
                .unwrap_err()
                .contains("time zone")
        );
        let mut s = schedule("0 3 * * *");
        s.idempotency_key_template = Some("{name}-{week}".into());
        assert!(s.timing().unwrap_err().contains("{week}"));
    }

    #[test]
    fn the_task_of_a_slot_carries_its_time_and_key() {
        let mut s = schedule("0 3 * * *");
        s.tz = "Europe/Berlin".into();
        s.idempotency_key_template = Some("{name}:{date}:{slot_ms}".into());
        let timing = s.timing().unwrap();
        let slot = ms("2026-11-22T02:00:00Z");
        let e = s.envelope(&timing, slot).unwrap();
        assert_eq!(e.time.timestamp_millis(), slot);
        assert_eq!(
            e.idempotency_key.as_deref(),
            Some(format!("nightly:2026-11-22:{slot}").as_str())
        );
        assert_eq!(e.extra["scheduled"]["slot"], "2026-11-22T03:00:00+01:00");
        assert_eq!(e.event_type, "report.export");
    }

    fn schedule(cron: &str) -> Schedule {
        Schedule {
            name: "nightly".into(),
            cron: cron.into(),
            tz: "UTC".into(),
            event_type: "report.export".into(),
            payload: serde_json::json!({}),
            group: None,
            on_dead: None,
            idempotency_key_template: None,
            misfire: Misfire::Last,
            paused: false,
            last_slot_ms: None,
        }
    }
}
