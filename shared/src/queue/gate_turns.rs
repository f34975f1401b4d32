//! Claims of one process through one gate take turns (see `gate`): a claim holds the turn of
//! each gate it goes through from its read of the gate to its multi-op's answer. Without
//! turns, claims of one process sent together would read the same version of a gate, and all
//! but one would fail at it and read it again.
//!
//! (This file once also kept what the process knew of each gate, so that a claim could skip
//! the read. `make bench` measured no gain from it on the limited drains, 0.92-0.96x of plain
//! with it and 0.98-1.04x without, and it went.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Gates whose turns are kept before the ones nobody is waiting at are let go.
const KEPT_GATES: usize = 4096;

/// One turn per gate, shared by a queue's clones.
#[derive(Default)]
pub(super) struct GateTurns(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// The turns one claim holds, a gate each, until it drops them.
pub(super) struct Turns(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl GateTurns {
    fn turn(&self, gate: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock().expect("not poisoned");
        if turns.len() >= KEPT_GATES && !turns.contains_key(gate) {
            // A worker that meets a new key now and then would otherwise keep every one.
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        }
        turns.entry(gate.to_string()).or_default().clone()
    }

    /// Waits for the turn of every gate of `gates`, in name order (so that two claims through
    /// the same gates cannot each hold one the other waits for).
    pub(super) async fn turns(&self, gates: &[String]) -> Turns {
        let mut names: Vec<&String> = gates.iter().collect();
        names.sort();
        names.dedup();
        let mut held = Vec::with_capacity(names.len());
        for gate in names {
            held.push(self.turn(gate).lock_owned().await);
        }
        Turns(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    const GATE: &str = "/q/concurrency/r/k";

    #[tokio::test]
    async fn claims_through_a_gate_take_turns() {
        let turns = GateTurns::default();
        let (a, b) = (GATE.to_string(), "/q/limits/a".to_string());
        let first = turns.turns(&[b.clone(), a]).await;
        assert!(
            turns
                .turns(std::slice::from_ref(&b))
                .now_or_never()
                .is_none(),
            "a turn held is waited for"
        );
        drop(first);
        assert!(turns.turns(&[b]).now_or_never().is_some());
    }

    #[tokio::test]
    async fn gates_nobody_waits_at_are_let_go_past_the_limit() {
        let turns = GateTurns::default();
        let busy = turns.turns(&["/q/concurrency/r/k0".to_string()]).await;
        for k in 1..KEPT_GATES {
            drop(turns.turns(&[format!("/q/concurrency/r/k{k}")]).await);
        }
        drop(turns.turns(&["/q/concurrency/r/new".to_string()]).await);
        let kept = turns.0.lock().unwrap();
        assert_eq!(kept.len(), 2, "the one in use and the new one");
        assert!(kept.contains_key("/q/concurrency/r/k0"));
        drop(busy);
    }
}
