//! The walk over a snapshot: oldest first; after a lost race, a random distance ahead.

/// Walks a snapshot; after a lost race jumps a random distance ahead.
pub(super) struct Cursor {
    names: std::vec::IntoIter<String>,
    jump: usize,
}

impl Cursor {
    pub(super) fn new(names: Vec<String>, concurrency: usize) -> Self {
        Cursor {
            names: names.into_iter(),
            jump: concurrency.max(1) * 2,
        }
    }

    pub(super) fn take(&mut self, n: usize) -> Vec<String> {
        self.names.by_ref().take(n).collect()
    }

    /// Appends names after the ones left.
    pub(super) fn extend(&mut self, more: impl Iterator<Item = String>) {
        let names: Vec<String> = self.names.by_ref().chain(more).collect();
        self.names = names.into_iter();
    }

    /// Never skips the last name: a short snapshot is not given up on after one lost race.
    pub(super) fn lost_race(&mut self) {
        let skip = fastrand::usize(0..=self.jump.min(self.names.len().saturating_sub(1)));
        if skip > 0 {
            self.names.nth(skip - 1);
        }
    }
}
