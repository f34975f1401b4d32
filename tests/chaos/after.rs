//! Dependencies under mixed traffic: some plain tasks are children, published right after
//! their parents (in the same publish, or a tick later, while consumers run and faults
//! strike):
//!
//! - after one or two plain tasks: delivered after each parent's first success;
//! - after a task the producer cancels, running anyway (`on_parent_dead: run`): delivered;
//! - after a cancelled task, failing with it (the default): never delivered, a dead letter
//!   whose reason names the parent's id; unless the cancel came too late and the parent ran
//!   (then it is a child of a completed parent, and runs).
//!
//! At the end nothing waits under `after/` and no marker is left under `dependents/` (checked
//! with the rest of the tree: "stuck"): no task waits on a parent that is settled.

use std::collections::{HashMap, HashSet};

use event_bridge::task::OnParentDead;

use crate::checks::Inputs;
use crate::producer::Kind;
use crate::receiver::{Answer, Delivery};

/// The parents (task numbers) of plain task number `n`, and what it does when one dies; `None`
/// for a task without parents.
pub fn parents_of(n: usize) -> Option<(Vec<usize>, Option<OnParentDead>)> {
    match n % 40 {
        // Plain tasks 3 and 4 (mod 40) before it; the second only every other time.
        6 if n % 80 == 6 => Some((vec![n - 2, n - 3], None)),
        6 => Some((vec![n - 2], None)),
        // The cancelled task 19 (mod 40) before it.
        26 => Some((vec![n - 7], Some(OnParentDead::Run))),
        23 => Some((vec![n - 4], None)),
        _ => None,
    }
}

/// Whether plain task number `n` fails with a cancelled parent (it is not to be delivered).
pub fn dies_with_parent(n: usize) -> bool {
    n % 40 == 23
}

#[derive(Default)]
pub struct AfterFigures {
    /// Children published, by what they wait for.
    pub after_plain: usize,
    pub run_anyway: usize,
    pub fail_with: usize,
    /// Children that died with their cancelled parent, as they should.
    pub died: usize,
    /// Children of a parent (or themselves) maybe published twice: not judged.
    pub unjudged: usize,
    pub violations: Vec<String>,
}

impl AfterFigures {
    /// The dead letters of children that died with their parent, as they should (not among
    /// the "other dead").
    pub fn expected_dead(input: &Inputs) -> HashSet<String> {
        (input.published.sent.iter())
            .filter(|s| s.dies_with_parent)
            .map(|s| s.id.clone())
            .collect()
    }
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> AfterFigures {
    let mut f = AfterFigures::default();
    let published = input.published;
    let kinds: HashMap<&str, Kind> = (published.sent.iter())
        .map(|s| (s.id.as_str(), s.kind))
        .collect();
    let first_ok = |id: &str| {
        (by_id.get(id)?.iter())
            .find(|d| d.answer == Answer::Ok)
            .map(|d| d.arrived)
    };
    let first = |id: &str| by_id.get(id).and_then(|l| l.first()).map(|d| d.arrived);
    let dead: HashMap<&str, &str> = (input.left.dead.iter())
        .map(|d| (d.id.as_str(), d.reason.as_str()))
        .collect();
    for child in published.sent.iter().filter(|s| !s.after.is_empty()) {
        let cancelled_parent = child
            .after
            .iter()
            .any(|p| kinds.get(p.as_str()) == Some(&Kind::Cancelled));
        match (cancelled_parent, child.dies_with_parent) {
            (false, _) => f.after_plain += 1,
            (true, false) => f.run_anyway += 1,
            (true, true) => f.fail_with += 1,
        }
        // A parent published twice may have two tasks of its id, one cancelled and one run:
        // such children are not judged (as ids maybe published twice never are).
        let doubled = |id: &String| published.uncertain.contains(id);
        if doubled(&child.id) || child.after.iter().any(doubled) {
            f.unjudged += 1;
            continue;
        }
        // Whatever it waits for: not delivered before a parent's first success.
        if let Some(ran) = first(&child.id) {
            for parent in &child.after {
                match first_ok(parent) {
                    Some(parent_ok) if parent_ok < ran => {}
                    Some(_) => f.violations.push(format!(
                        "{} delivered before its parent {parent}'s first success",
                        child.id
                    )),
                    // A cancelled parent never runs; a plain one always does.
                    None if kinds.get(parent.as_str()) == Some(&Kind::Cancelled) => {}
                    None => f.violations.push(format!(
                        "{} delivered, its parent {parent} never succeeded",
                        child.id
                    )),
                }
            }
        }
        if !child.dies_with_parent {
            continue;
        }
        // Its parent ran (a cancel that came too late): a child of a completed parent.
        if child.after.iter().any(|p| first_ok(p).is_some()) {
            continue;
        }
        if by_id.contains_key(child.id.as_str()) {
            f.violations
                .push(format!("{} delivered though its parent died", child.id));
        }
        match dead.get(child.id.as_str()) {
            Some(reason) if child.after.iter().all(|p| reason.contains(p.as_str())) => f.died += 1,
            Some(reason) => f.violations.push(format!(
                "{} dead with a reason that does not name its parent: {reason}",
                child.id
            )),
            None => f.violations.push(format!(
                "{} neither delivered nor dead though its parent died",
                child.id
            )),
        }
    }
    f
}
