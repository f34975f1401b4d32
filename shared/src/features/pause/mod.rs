//! Pausing: the whole queue, or one event type. No task of what is paused is claimed; tasks in
//! flight finish (a running resumable handler is asked to stop); producers keep publishing.
//! The state is one znode, `ROOT/paused` (its form: `state.rs`), changed by `pause` and
//! `unpause` (`change.rs`).
//!
//! # How it works
//!
//! The feature reads `ROOT/paused` through the run's start read ([`Feature::read_at_start`]),
//! which a run sends anyway, and again whenever the run's copy is half a second old. What it
//! makes of a read (the [`Paused`] it parsed) rides with its answer
//! ([`crate::feature::AtStart::kept`]), so a claim decides on the very read its multi-op
//! checks:
//!
//! - every claim's multi-op checks `paused` at the version read
//!   ([`crate::feature::AtStart::checks`]), also while nothing is paused, so no claim decided
//!   before a pause lands after it: once `pause` returns, no task of what it paused starts. A
//!   claim whose check failed reads `paused` again, and leaves the tasks the new read pauses
//!   (three times at most, then they wait for the next batch); the claims of this process
//!   after it start from that read, not their run's older copy (`queue/claim/checks.rs`);
//! - while something is paused, a claim asks it about each task ([`Feature::at_claim`]): one of
//!   a paused type is left in its lane, untouched ([`AtClaim::Leave`]), counted once per run
//!   (`paused`) and not tried again in it; so is a place standing for one. A task a feature
//!   buries (cancelled, expired) is buried first: the list asks those before this one;
//! - while the whole queue is paused, a run claims nothing and says so (`queue_paused`);
//! - a running resumable handler of a paused type is asked to stop
//!   ([`Feature::stops_running`]): it saves its steps and returns.
//!
//! While its read found nothing paused, a run's claims do not ask it about their tasks
//! ([`crate::feature::AtStart::asks_at_claim`]). The base paths make `paused` as `{}`
//! ([`Feature::made_with`]), so even a queue's first pause is checked; a read that finds `{}`
//! (nothing was ever paused, or everything was unpaused) is answered by the core, which checks
//! its version without calling this feature, so a queue that pauses nothing pays a run nothing
//! here. No znode (a queue no consumer of this version has started on) pauses nothing and is
//! not checked, and that queue's first pause stops claims within a second.
//!
//! The same read tells the doors what is paused: `status` marks a task of a paused type
//! (`paused`, as for any task a feature leaves where it is), `explain` gives the pause as its
//! reason (`{"reason": "paused", "event_type": …, "since_ms": …}`, [`Feature::explain`]),
//! and `stats` shows what is paused (`paused`, [`Feature::in_stats`]). An unpause
//! (`event-bridge resume`) changes nothing under `tasks/`, so a worker keeps a persistent
//! watch on `paused` ([`path`]): a change wakes it for another drain once the one under way
//! ends.
//!
//! # Costs
//!
//! One `check` in each claim's multi-op; after a change, a failed claim and a `getData` per
//! consumer (its later claims start from that read), and for up to half a second one per
//! batch whose run's copy is older when `paused` went away. Paused tasks stay in their lane,
//! so a walk still reads past them.

mod change;
mod state;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::Result;
use crate::feature::{
    Asked, AtClaim, AtStart, ClaimCheck, Feature, Idle, IdleCheck, Kept, Said, StartRead, Started,
};
use crate::layout::Layout;
use crate::state::State;
use crate::task::Envelope;

pub use change::Pauses;
pub use state::{PauseTarget, Paused, PausedSince};

/// The znode's name under the queue's root.
const ZNODE: &str = "paused";

/// The field of the stats that says what is paused.
const FIELD: &str = "paused";

/// Where what is paused is kept: `ROOT/paused`.
pub fn path(layout: &Layout) -> String {
    format!("{}/{ZNODE}", layout.root())
}

/// The feature: tasks of what a read of `paused` pauses are left where they are.
pub struct Pause;

impl Pause {
    /// What `read` of `paused` means for the run: what it pauses, kept with the answer, and
    /// its version checked by every claim.
    fn answer(read: &StartRead<'_>) -> Result<AtStart> {
        let Some((data, stat)) = read.found else {
            return Ok(AtStart::default());
        };
        let paused = Paused::parse(read.path, data)?;
        Ok(AtStart {
            asks_at_claim: !paused.is_empty(),
            holds_all: paused.queue.is_some(),
            checks: vec![ClaimCheck {
                path: read.path.to_string(),
                version: stat.version,
                mzxid: stat.mzxid,
            }],
            kept: Some(Kept(Arc::new(paused))),
            covers_ends: None,
        })
    }

    /// Whether the read `started` was given pauses tasks of `event_type`.
    fn covers(started: &Started<'_>, event_type: &str) -> bool {
        (started.kept::<Paused>()).is_some_and(|paused| paused.covers(event_type))
    }
}

impl Feature for Pause {
    fn name(&self) -> &'static str {
        "pause"
    }

    fn read_at_start(&self) -> Option<&'static str> {
        Some(ZNODE)
    }

    /// `{}`: a consumer of an earlier version parses it.
    fn made_with(&self) -> Option<&'static [u8]> {
        Some(b"{}")
    }

    /// `{}`, nothing paused: every claim checks its version, so no claim decided before a
    /// pause lands after it.
    fn idle(&self) -> Option<Idle> {
        Some(Idle {
            data: b"{}",
            check: IdleCheck::Claims,
        })
    }

    fn saw_at_start(&self, read: &StartRead<'_>) -> Result<AtStart> {
        Pause::answer(read)
    }

    fn at_claim(&self, envelope: &Envelope, _now_ms: i64, started: &Started<'_>) -> AtClaim {
        match Pause::covers(started, &envelope.event_type) {
            true => AtClaim::Leave,
            false => AtClaim::Take,
        }
    }

    fn stops_running(&self, envelope: &Envelope, started: &Started<'_>) -> bool {
        Pause::covers(started, &envelope.event_type)
    }

    /// The pause that covers the task, as a reason that holds it back: of a task that waits to
    /// be claimed (pending, waiting, asleep or waiting for a signal), not of one held or
    /// blocked.
    fn explain(&self, envelope: &Envelope, asked: &Asked, started: &Started<'_>) -> Option<Said> {
        let waits = matches!(
            asked.state,
            State::Pending | State::Waiting | State::Sleeping | State::AwaitingSignal
        );
        if !waits {
            return None;
        }
        let event_type = &envelope.event_type;
        let (since_ms, whole) = started.kept::<Paused>()?.since(event_type)?;
        let since = crate::clock::shown(since_ms);
        let (line, reason) = match whole {
            true => (
                format!("paused: the whole queue, since {since}; `resume` lets it go"),
                json!({"reason": "paused", "since_ms": since_ms}),
            ),
            false => (
                format!(
                    "paused: type {event_type}, since {since}; `resume --type {event_type}` \
                     lets it go"
                ),
                json!({"reason": "paused", "event_type": event_type, "since_ms": since_ms}),
            ),
        };
        let Value::Object(holds) = reason else {
            unreachable!("a JSON object")
        };
        Some(Said {
            line,
            holds: Some(holds),
            last: false,
        })
    }

    /// What is paused, when something is.
    fn in_stats(&self, started: &Started<'_>) -> Option<(&'static str, Value)> {
        let paused = started.kept::<Paused>().filter(|p| !p.is_empty())?;
        Some((FIELD, serde_json::to_value(paused).expect("JSON")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use zookeeper_client as zk;

    use super::*;
    use crate::feature::Found;

    fn stat(version: i32, mzxid: i64) -> zk::Stat {
        crate::feature::stat_for_tests(version, mzxid, 0)
    }

    fn read<'a>(data: &'a [u8], stat: &'a zk::Stat) -> StartRead<'a> {
        StartRead {
            path: "/q/paused",
            found: Some((data, stat)),
        }
    }

    #[test]
    fn a_read_pauses_what_it_says_and_every_claim_checks_it() {
        let email = Envelope::new("email", json!({}));
        let sms = Envelope::new("sms", json!({}));
        let asked = |answer: AtStart, envelope: &Envelope| {
            let found = Found::new(Vec::new(), vec![(0, answer)]);
            (
                found.empty_for(0),
                Pause.at_claim(envelope, 0, &found.of(0)),
            )
        };
        let quiet = Pause.saw_at_start(&read(b"{}", &stat(1, 10))).unwrap();
        assert!(!quiet.asks_at_claim && !quiet.holds_all);
        assert_eq!(
            quiet.checks[0].version, 1,
            "checked while nothing is paused"
        );
        assert_eq!(quiet.checks[0].mzxid, 10);
        assert_eq!(asked(quiet, &email), (true, AtClaim::Take));
        let paused = br#"{"types":{"email":{"since":5}}}"#;
        let answer = Pause.saw_at_start(&read(paused, &stat(2, 20))).unwrap();
        assert!(answer.asks_at_claim && !answer.holds_all);
        assert_eq!(asked(answer.clone(), &email), (false, AtClaim::Leave));
        assert_eq!(asked(answer.clone(), &sms), (false, AtClaim::Take));
        let found = Found::new(Vec::new(), vec![(0, answer)]);
        assert!(Pause.stops_running(&email, &found.of(0)));
        let all = Pause.saw_at_start(&read(br#"{"queue":{"since":7}}"#, &stat(3, 30)));
        let all = all.unwrap();
        assert!(all.holds_all);
        assert_eq!(asked(all, &sms), (false, AtClaim::Leave));
    }

    #[test]
    fn an_unreadable_znode_is_an_error_naming_it_and_a_missing_one_pauses_nothing() {
        let missing = StartRead {
            path: "/q/paused",
            found: None,
        };
        assert_eq!(Pause.saw_at_start(&missing).unwrap(), AtStart::default());
        let error = Pause
            .saw_at_start(&read(b"not json", &stat(1, 10)))
            .unwrap_err();
        assert!(error.to_string().contains("/q/paused"), "{error}");
    }
}
