//! Recipes: the features beside the core. A recipe is a view of the [`Queue`](super::Queue)
//! (`queue.groups()`, `queue.idempotency_keys()`, …) that holds no state of its own and writes through
//! the queue's session, layout and multi-ops, which it reaches by `Deref`. Each feature's code
//! lives on its recipe, in its own files; `Queue` keeps what every task needs (publish, claim,
//! hold, release, end, the lanes' walk), and calls a recipe only for a task that carries its
//! feature.

use std::collections::HashSet;
use std::sync::Mutex;

use super::gate_cache::GateCache;

/// What the queue remembers in this process, shared by every clone of it (it carries this in
/// one `Arc`): each recipe its own part, and the claim's.
#[derive(Default)]
pub(super) struct Memory {
    /// `key_lanes`: key lanes this process made or met with its publishes.
    pub(super) key_lanes: Made,
    /// `gate`: parents of gates this process made or met (`limits/`, `concurrency/<route>`):
    /// a new gate is created in the claim's multi-op, under them.
    pub(super) gate_parents: Made,
    /// `gate_cache`: what this process knows of the gates its claims go through, and their
    /// turns.
    pub(super) gates: GateCache,
    /// The claim's: the newest answers of the features whose znodes every claim checks.
    pub(super) checks: super::claim::LatestChecks,
    /// The ending's: the features whose ends a check of their idle znode covers, and at which
    /// version (`feature/covered.rs`).
    pub(super) covers: crate::feature::LatestCovers,
}

/// Names of znodes this process made or met: it makes one only when it is not among them.
#[derive(Default)]
pub(super) struct Made(Mutex<HashSet<String>>);

impl Made {
    fn names(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().expect("not poisoned")
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.names().contains(name)
    }

    /// Those of `names` not made or met yet.
    pub(super) fn missing<'n>(&self, names: impl Iterator<Item = &'n str>) -> HashSet<&'n str> {
        let made = self.names();
        names.filter(|name| !made.contains(*name)).collect()
    }

    pub(super) fn insert(&self, name: &str) {
        self.names().insert(name.to_string());
    }

    /// Forgets `name` (deleted since, by hand: made again when next needed).
    pub(super) fn forget(&self, name: &str) {
        self.names().remove(name);
    }

    pub(super) fn forget_all(&self) {
        self.names().clear();
    }
}

/// Declares recipe `$name`, reached from a queue by `$accessor()`.
macro_rules! recipe {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'q>(&'q crate::queue::Queue);

        impl std::ops::Deref for $name<'_> {
            type Target = crate::queue::Queue;

            fn deref(&self) -> &crate::queue::Queue {
                self.0
            }
        }

        impl crate::queue::Queue {
            #[doc = concat!("The [`", stringify!($name), "`] recipe of this queue.")]
            pub fn $accessor(&self) -> $name<'_> {
                $name(self)
            }
        }
    };
}
