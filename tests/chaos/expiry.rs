//! Task expiry under the mixed workload: no expired task ran. The producer publishes
//! [`EXPIRED`] tasks whose `expires_at` has passed by ZooKeeper's clock when they are
//! published; each must never reach the receiver, and must end in the dead letters with the
//! reason `expired`. (A task whose publish was in doubt may not have landed: it is held to the
//! first rule only.)

use std::collections::{HashMap, HashSet};

use crate::checks::Inputs;
use crate::producer::Kind;
use crate::receiver::Delivery;
use crate::tree::DeadLetter;

/// Tasks published already expired, on the producer's first tick.
pub const EXPIRED: usize = 20;

#[derive(Debug, Default)]
pub struct ExpiryFigures {
    /// Expired tasks published, and of them those found dead as expired.
    pub published: usize,
    pub dead_expired: usize,
    /// Publishes in doubt: not held to being dead.
    pub unjudged: usize,
    /// Expired tasks delivered, or not dead as expired.
    pub violations: Vec<String>,
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> ExpiryFigures {
    let published = input.published;
    let expired: Vec<&str> = (published.sent.iter())
        .filter(|s| s.kind == Kind::Expired)
        .map(|s| s.id.as_str())
        .collect();
    let doubted: HashSet<&str> = (published.uncertain.iter())
        .chain(published.untold.iter())
        .map(String::as_str)
        .collect();
    let delivered: HashSet<&str> = by_id.keys().copied().collect();
    judge_ids(&expired, &doubted, &delivered, &input.left.dead)
}

/// The judgement over ids: `expired` published, `doubted` of them in doubt, the ids
/// `delivered`, the dead letters left.
pub fn judge_ids(
    expired: &[&str],
    doubted: &HashSet<&str>,
    delivered: &HashSet<&str>,
    dead: &[DeadLetter],
) -> ExpiryFigures {
    let reasons: HashMap<&str, &str> = (dead.iter())
        .map(|d| (d.id.as_str(), d.reason.as_str()))
        .collect();
    let mut f = ExpiryFigures {
        published: expired.len(),
        ..ExpiryFigures::default()
    };
    for id in expired {
        if delivered.contains(id) {
            f.violations.push(format!("{id} ran though it had expired"));
        }
        match reasons.get(id) {
            Some(&"expired") => f.dead_expired += 1,
            _ if doubted.contains(id) => f.unjudged += 1,
            Some(other) => f
                .violations
                .push(format!("{id} dead as {other:?}, not expired")),
            None => f
                .violations
                .push(format!("{id} not among the dead letters")),
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead(id: &str, reason: &str) -> DeadLetter {
        DeadLetter {
            name: format!("task-{id}"),
            reason: reason.into(),
            id: id.into(),
            event_type: "chaos.expired".into(),
        }
    }

    #[test]
    fn expired_tasks_dead_as_expired_and_never_delivered_pass() {
        let letters = [dead("a", "expired"), dead("b", "expired")];
        let f = judge_ids(&["a", "b"], &HashSet::new(), &HashSet::new(), &letters);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!((f.published, f.dead_expired), (2, 2));
    }

    /// A log where an expired task reached the receiver breaks it, dead letter or not.
    #[test]
    fn an_expired_task_that_ran_breaks_it() {
        let delivered: HashSet<&str> = ["a"].into();
        let letters = [dead("a", "expired")];
        let f = judge_ids(&["a"], &HashSet::new(), &delivered, &letters);
        assert_eq!(f.violations, ["a ran though it had expired"]);
        let f = judge_ids(&["a"], &["a"].into(), &delivered, &[]);
        assert_eq!(
            f.violations,
            ["a ran though it had expired"],
            "in doubt or not"
        );
    }

    /// Not dead, or dead for another reason, breaks it, unless its publish was in doubt.
    #[test]
    fn an_expired_task_not_dead_as_expired_breaks_it_unless_its_publish_was_in_doubt() {
        let letters = [dead("b", "gave up after 3 attempts")];
        let f = judge_ids(&["a", "b"], &HashSet::new(), &HashSet::new(), &letters);
        assert_eq!(
            f.violations,
            [
                "a not among the dead letters",
                "b dead as \"gave up after 3 attempts\", not expired"
            ]
        );
        let f = judge_ids(&["a"], &["a"].into(), &HashSet::new(), &[]);
        assert!(f.violations.is_empty());
        assert_eq!(f.unjudged, 1);
    }
}
