//! A task's states and the transitions between them: the one list. `status`, `stats`, the
//! dashboard and the command name states from [`State`]; ARCHITECTURE's "States and
//! transitions" tables are these enums, and a test holds them to it.
//!
//! A *place* (see [`crate::task::Place`]) is not a state: it is the turn in its group of a
//! task that is debounced or blocked, kept in its lane.

use serde::Serialize;

/// Where a task is in its life. Every znode a task can live in is one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Published with a debounce key: its envelope waits under `debounce/<key>`, replaced by
    /// each later publish of the key, until its period ends. Not a task yet.
    Debounced,
    /// Published with `after`: waits under `after/<id>` until its parents are settled.
    Blocked,
    /// In its lane (`tasks/`, `lanes/high`, `lanes/low`, a key's lane), free to claim unless
    /// held back: its type paused, its group busy, its route at its limit, not due yet.
    Pending,
    /// A consumer holds its lease (`leases/T`) and runs it.
    Leased,
    /// Waits out a retry's backoff or a producer's delay under `delayed/<bucket>/`.
    Waiting,
    /// A resumable task asleep ([`crate::resume::Steps::sleep`]): under `delayed/<bucket>/`
    /// until its sleep ends, its record kept, no lease held.
    Sleeping,
    /// A resumable task waiting for a signal ([`crate::resume::Steps::wait_for`]): under
    /// `delayed/<bucket>/` until its timeout, registered under each key it waits for.
    AwaitingSignal,
    /// In the dead letters (`dead/T`), with the reason; only a redrive brings it back.
    Dead,
    /// Completed: gone from the queue, its record kept for `KEEP_DONE` when set.
    Completed,
}

impl State {
    /// Every state, in the order of a task's life.
    pub const ALL: [State; 9] = [
        State::Debounced,
        State::Blocked,
        State::Pending,
        State::Leased,
        State::Waiting,
        State::Sleeping,
        State::AwaitingSignal,
        State::Dead,
        State::Completed,
    ];

    /// Its name, as `status`, `stats` and the command print it.
    pub fn name(self) -> &'static str {
        match self {
            State::Debounced => "debounced",
            State::Blocked => "blocked",
            State::Pending => "pending",
            State::Leased => "leased",
            State::Waiting => "waiting",
            State::Sleeping => "sleeping",
            State::AwaitingSignal => "awaiting_signal",
            State::Dead => "dead",
            State::Completed => "completed",
        }
    }

    /// Where in the tree a task in this state is.
    pub fn znode(self) -> &'static str {
        match self {
            State::Debounced => "debounce/<key>",
            State::Blocked => "after/<id>",
            State::Pending => "its lane",
            State::Leased => "its lane, and leases/T",
            State::Waiting => "delayed/<bucket>/<due>~T",
            State::Sleeping => "delayed/<bucket>/<due>~T, asleep in its record",
            State::AwaitingSignal => "delayed/<bucket>/<due>~T, and signals/<key>/w-…~T",
            State::Dead => "dead/T",
            State::Completed => "done/<bucket>/T, with KEEP_DONE",
        }
    }
}

/// What moves a task from one state to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    /// A publish: the task to its lane's tail, debounced under its key, blocked on its
    /// parents, or (a parent dead) straight to the dead letters.
    Publish,
    /// A debounce key fell due: its last envelope to its lane's tail.
    Fire,
    /// A child's last parent completed: to its lane's tail (a grouped one stays, ready, for
    /// its place).
    Unblock,
    /// A claim meets a grouped task's place at its group's turn, the task ready: the task
    /// written into the place.
    TakePlace,
    /// A consumer takes the task: its lease created, its attempt counted.
    Claim,
    /// The holder rewrites its lease while the handler runs (and, with it, the task's body
    /// when a resumable handler's record changed: a step's checkpoint).
    Extend,
    /// The handler succeeded: task and lease deleted together.
    Complete,
    /// A retryable failure, or the run's deadline: given back, in place or to wait out a
    /// backoff.
    Release,
    /// A resumable handler suspended: given back with its record, no attempt counted: in
    /// place (stopping, or a signal it waits for already kept, consumed with it), asleep, or
    /// waiting for a signal.
    Suspend,
    /// A signal came for a task that waits for it: the signal consumed, the task back to its
    /// lane's tail with the signal in its record.
    Wake,
    /// A task met not due yet moves to wait.
    Defer,
    /// A waiting task fell due: back to its lane's tail.
    Promote,
    /// The reaper frees a lease that expired: the task is free again.
    Free,
    /// To the dead letters with a reason: a permanent failure, attempts used up, a poison
    /// body, a cancel.
    Bury,
    /// A child whose parent died goes with it.
    DieWithParent,
    /// A cancel of a child waiting for its parents.
    CancelBlocked,
    /// A cancel of a debounced publish pending under its key: deleted, never run.
    Withdraw,
    /// A cancel of a held task: marked, so that it is buried instead of run again.
    Mark,
    /// A dead letter back to its lane's tail, attempts reset.
    Redrive,
}

impl Transition {
    /// Every transition.
    pub const ALL: [Transition; 19] = [
        Transition::Publish,
        Transition::Fire,
        Transition::Unblock,
        Transition::TakePlace,
        Transition::Claim,
        Transition::Extend,
        Transition::Complete,
        Transition::Release,
        Transition::Suspend,
        Transition::Wake,
        Transition::Defer,
        Transition::Promote,
        Transition::Free,
        Transition::Bury,
        Transition::DieWithParent,
        Transition::CancelBlocked,
        Transition::Withdraw,
        Transition::Mark,
        Transition::Redrive,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Transition::Publish => "publish",
            Transition::Fire => "fire",
            Transition::Unblock => "unblock",
            Transition::TakePlace => "take_place",
            Transition::Claim => "claim",
            Transition::Extend => "extend",
            Transition::Complete => "complete",
            Transition::Release => "release",
            Transition::Suspend => "suspend",
            Transition::Wake => "wake",
            Transition::Defer => "defer",
            Transition::Promote => "promote",
            Transition::Free => "free",
            Transition::Bury => "bury",
            Transition::DieWithParent => "die_with_parent",
            Transition::CancelBlocked => "cancel_blocked",
            Transition::Withdraw => "withdraw",
            Transition::Mark => "mark",
            Transition::Redrive => "redrive",
        }
    }

    /// The states it moves a task from (none: a new task).
    pub fn from(self) -> &'static [State] {
        use State::*;
        match self {
            Transition::Publish => &[],
            Transition::Fire | Transition::Withdraw => &[Debounced],
            Transition::Unblock | Transition::DieWithParent | Transition::CancelBlocked => {
                &[Blocked]
            }
            Transition::TakePlace => &[Debounced, Blocked],
            Transition::Claim | Transition::Defer => &[Pending],
            Transition::Extend
            | Transition::Complete
            | Transition::Release
            | Transition::Suspend
            | Transition::Free
            | Transition::Mark => &[Leased],
            Transition::Wake => &[AwaitingSignal],
            Transition::Promote => &[Waiting, Sleeping, AwaitingSignal],
            Transition::Bury => &[Pending, Leased, Waiting, Sleeping, AwaitingSignal],
            Transition::Redrive => &[Dead],
        }
    }

    /// The states it moves a task to (none: it is gone, never having run).
    pub fn to(self) -> &'static [State] {
        use State::*;
        match self {
            Transition::Publish => &[Pending, Debounced, Blocked, Dead],
            Transition::Fire
            | Transition::Unblock
            | Transition::TakePlace
            | Transition::Promote
            | Transition::Wake
            | Transition::Free
            | Transition::Redrive => &[Pending],
            Transition::Claim | Transition::Extend | Transition::Mark => &[Leased],
            Transition::Complete => &[Completed],
            Transition::Release => &[Pending, Waiting],
            Transition::Suspend => &[Pending, Sleeping, AwaitingSignal],
            Transition::Defer => &[Waiting],
            Transition::Bury | Transition::DieWithParent | Transition::CancelBlocked => &[Dead],
            Transition::Withdraw => &[],
        }
    }

    /// The function that performs it.
    pub fn performed_by(self) -> &'static str {
        match self {
            Transition::Publish => "Queue::publish_each, AllOrNothing::publish_batch",
            Transition::Fire => "debounce::fire_due",
            Transition::Unblock | Transition::DieWithParent => "Dependencies::see_to_children_of",
            Transition::TakePlace => "Groups::take_place",
            Transition::Claim => "Queue::claim_many",
            Transition::Extend => "Queue::extend",
            Transition::Complete => "Queue::complete_many",
            Transition::Release => "Queue::release",
            Transition::Suspend => "Run::suspend",
            Transition::Wake => "Signals::wake",
            Transition::Defer => "Delays::defer",
            Transition::Promote => "Delays::promote_due",
            Transition::Free => "reap::free",
            Transition::Bury => "Queue::bury",
            Transition::CancelBlocked => "Dependencies::cancel_blocked",
            Transition::Withdraw => "DebounceKeys::withdraw_debounced",
            Transition::Mark => "cancel_marks::mark",
            Transition::Redrive => "dead::redrive",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARCHITECTURE: &str = include_str!("../../docs/ARCHITECTURE.md");

    /// The rows of the table under the heading `heading` (its cells, trimmed, without the
    /// header and the separator).
    fn table(heading: &str) -> Vec<Vec<String>> {
        let start = ARCHITECTURE
            .find(heading)
            .unwrap_or_else(|| panic!("ARCHITECTURE has no heading {heading:?}"));
        ARCHITECTURE[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|row| {
                let cells = row.trim().trim_matches('|').split('|');
                cells.map(|c| c.trim().to_string()).collect()
            })
            .collect()
    }

    /// `text` as names: "`a`, `b`" or "—" (none).
    fn names(text: &str) -> Vec<String> {
        if text == "—" {
            return Vec::new();
        }
        let names = text
            .split(',')
            .map(|n| n.trim().trim_matches('`').to_string());
        names.collect()
    }

    fn state_names(states: &[State]) -> Vec<String> {
        states.iter().map(|s| s.name().to_string()).collect()
    }

    #[test]
    fn architecture_lists_every_state_as_the_enum_does() {
        let rows = table("### States");
        let expected: Vec<Vec<String>> = (State::ALL.iter())
            .map(|s| vec![format!("`{}`", s.name()), format!("`{}`", s.znode())])
            .collect();
        let found: Vec<Vec<String>> = rows.iter().map(|r| r[..2].to_vec()).collect();
        assert_eq!(
            found, expected,
            "ARCHITECTURE's states table and `State` differ"
        );
    }

    #[test]
    fn architecture_lists_every_transition_as_the_enum_does() {
        let rows = table("### Transitions");
        assert_eq!(
            rows.len(),
            Transition::ALL.len(),
            "ARCHITECTURE's transitions table and `Transition` differ in length"
        );
        for (row, t) in rows.iter().zip(Transition::ALL) {
            let what = t.name();
            assert_eq!(row[0], format!("`{what}`"), "transition {what}");
            assert_eq!(names(&row[1]), state_names(t.from()), "{what}: from");
            assert_eq!(names(&row[2]), state_names(t.to()), "{what}: to");
            assert_eq!(
                names(&row[3]),
                names(t.performed_by()),
                "{what}: performed by"
            );
        }
    }

    #[test]
    fn every_state_is_reached_and_every_state_but_the_last_left() {
        for state in State::ALL {
            let reached = Transition::ALL.iter().any(|t| t.to().contains(&state));
            assert!(reached, "{state:?} is reached by no transition");
            let left = Transition::ALL.iter().any(|t| t.from().contains(&state));
            assert!(
                left || state == State::Completed,
                "{state:?} is left by none"
            );
        }
    }
}
