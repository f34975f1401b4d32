//! Endings of one process that count in the same batch take turns: each holds the turn of
//! its batches from its read of them to its multi-op's answer (see `end`). Without turns,
//! completions sent together would read the same version of the batch's counters, and all
//! but one would fail at it and read again. (Claims take turns at a gate the same way, with
//! what the process knows of the gate: `gate_cache`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Batches whose turns are kept before the ones nobody is waiting at are let go.
const KEPT: usize = 4096;

/// One turn per batch (by its path), shared by a queue's clones.
#[derive(Default)]
pub(super) struct Turns(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// The turns one writer holds, a znode each, until it drops them.
pub(super) struct Held(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl Turns {
    fn turn(&self, path: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock().expect("not poisoned");
        if turns.len() >= KEPT && !turns.contains_key(path) {
            // A worker that meets a new batch now and then would otherwise keep every one.
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

    const BATCH: &str = "/q/batches/b";

    #[tokio::test]
    async fn writers_of_a_znode_take_turns() {
        let turns = Turns::default();
        let (a, b) = (BATCH.to_string(), "/q/batches/a".to_string());
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
    async fn batches_nobody_waits_at_are_let_go_past_the_limit() {
        let turns = Turns::default();
        let busy = turns.take(&["/q/batches/b0".to_string()]).await;
        for k in 1..KEPT {
            drop(turns.take(&[format!("/q/batches/b{k}")]).await);
        }
        drop(turns.take(&["/q/batches/new".to_string()]).await);
        let kept = turns.0.lock().unwrap();
        assert_eq!(kept.len(), 2, "the one in use and the new one");
        assert!(kept.contains_key("/q/batches/b0"));
        drop(busy);
    }
}
