//! Writers of one process that write the same znode at the version they read take turns: each
//! holds the znode's turn from its read to its multi-op's answer. Without turns, writes sent
//! together would read the same version, and all but one would fail at it and read again.
//! Endings that count in the same batch take the batch's turn (`features/batches/`); claims
//! through a gate take the gate's, which also keeps what this process knows of the gate (`gate_cache`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Znodes whose turns are kept before the ones nobody is waiting at, or using, are let go.
const KEPT: usize = 4096;

/// One znode's turn, and what this process keeps of the znode (`V`).
#[derive(Default)]
pub(super) struct Turn<V> {
    lock: Arc<tokio::sync::Mutex<()>>,
    pub(super) kept: V,
}

/// One turn per znode (by its path), shared by a queue's clones.
pub(crate) struct Turns<V = ()>(Mutex<HashMap<String, Arc<Turn<V>>>>);

impl<V> Default for Turns<V> {
    fn default() -> Self {
        Turns(Mutex::default())
    }
}

/// The turns one writer holds, a znode each, until it drops them.
pub(crate) struct Held(#[allow(dead_code)] Vec<OwnedMutexGuard<()>>);

impl<V: Default> Turns<V> {
    /// `path`'s turn and what is kept of it.
    pub(super) fn turn(&self, path: &str) -> Arc<Turn<V>> {
        let mut turns = self.0.lock().expect("not poisoned");
        if turns.len() >= KEPT && !turns.contains_key(path) {
            // A worker that meets a new batch or key now and then would otherwise keep every
            // one.
            turns.retain(|_, t| Arc::strong_count(t) > 1 || Arc::strong_count(&t.lock) > 1);
        }
        turns.entry(path.to_string()).or_default().clone()
    }

    /// `path`'s turn and what is kept of it, when it is kept.
    pub(super) fn get(&self, path: &str) -> Option<Arc<Turn<V>>> {
        self.0.lock().expect("not poisoned").get(path).cloned()
    }

    /// How many znodes' turns are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().expect("not poisoned").len()
    }

    /// Waits for the turn of every znode of `paths`, in name order (so that two writers of the
    /// same znodes cannot each hold one the other waits for).
    pub(crate) async fn take(&self, paths: &[String]) -> Held {
        let mut names: Vec<&String> = paths.iter().collect();
        names.sort();
        names.dedup();
        let mut held = Vec::with_capacity(names.len());
        for path in names {
            let lock = self.turn(path).lock.clone();
            held.push(lock.lock_owned().await);
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
        let turns = Turns::<()>::default();
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
        let turns = Turns::<()>::default();
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
