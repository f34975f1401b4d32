//! Writers of one process that write the same znode at the version they read take turns: a
//! claim holds the turn of each gate it goes through from its read of the gate to its
//! multi-op's answer (see `gate`), and an ending holds the turn of each batch whose counters
//! it folds in (see `end`). Without turns, such writes sent together would read the same
//! version, and all but one would fail at it and read again.
//!
//! (Gates' turns once came with what the process knew of each gate, so that a claim could skip
//! the read. `make bench` measured no gain from it on the limited drains, 0.92-1.03x of plain
//! with it and 0.98-1.04x without, and it went.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Znodes whose turns are kept before the ones nobody is waiting at are let go.
const KEPT: usize = 4096;

/// One turn per znode (a gate's, a batch's path), shared by a queue's clones.
#[derive(Default)]
pub(super) struct Turns(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// The turns one writer holds, a znode each, until it drops them.
pub(super) struct Held(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl Turns {
    fn turn(&self, path: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock().expect("not poisoned");
        if turns.len() >= KEPT && !turns.contains_key(path) {
            // A worker that meets a new key now and then would otherwise keep every one.
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        }
        turns.entry(path.to_string()).or_default().clone()
    }

    /// Waits for the turn of every znode of `paths`, in name order (so that two writers of the
    /// same znodes cannot each hold one the other waits for).
    pub(super) async fn take(&self, paths: &[String]) -> Held {
        let mut names: Vec<&String> = paths.iter().collect();
        names.sort();
        names.dedup();
        let mut held = Vec::with_capacity(names.len());
        for path in names {
            held.push(self.turn(path).lock_owned().await);
        }
        Held(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    const GATE: &str = "/q/concurrency/r/k";

    #[tokio::test]
    async fn writers_of_a_znode_take_turns() {
        let turns = Turns::default();
        let (a, b) = (GATE.to_string(), "/q/limits/a".to_string());
        let first = turns.take(&[b.clone(), a]).await;
        assert!(
            turns
                .take(std::slice::from_ref(&b))
                .now_or_never()
                .is_none(),
            "a turn held is waited for"
        );
        drop(first);
        assert!(turns.take(&[b]).now_or_never().is_some());
    }

    #[tokio::test]
    async fn gates_nobody_waits_at_are_let_go_past_the_limit() {
        let turns = Turns::default();
        let busy = turns.take(&["/q/concurrency/r/k0".to_string()]).await;
        for k in 1..KEPT {
            drop(turns.take(&[format!("/q/concurrency/r/k{k}")]).await);
        }
        drop(turns.take(&["/q/concurrency/r/new".to_string()]).await);
        let kept = turns.0.lock().unwrap();
        assert_eq!(kept.len(), 2, "the one in use and the new one");
        assert!(kept.contains_key("/q/concurrency/r/k0"));
        drop(busy);
    }
}
