//! What a batch of claims learns when one of them finds its task gone or held: the reads it
//! was made from went stale, most likely because another consumer went through the same
//! stretch of the queue first. ZooKeeper's failed multi-op names only its first failing
//! operation, so the tasks after it would come back untried, and each later batch would fail
//! again on its first task: a request per task. One multi-read of the rest (each task with
//! its lease) tells which are gone and which are held instead.

use zookeeper_client as zk;

use super::Queue;
use super::outcome::TaskOutcome;

impl Queue {
    /// After a claim of the batch found its task gone or held, looks at the tasks left
    /// untried behind it in one read (see the module's documentation). `tried` are indices of
    /// `reads` and `outcomes`.
    pub(super) async fn learn_stale(
        &self,
        reads: &[(String, Vec<u8>, zk::Stat)],
        tried: &[usize],
        outcomes: &mut [Option<TaskOutcome>],
    ) {
        let raced = tried
            .iter()
            .any(|i| matches!(outcomes[*i], Some(TaskOutcome::Gone | TaskOutcome::Taken)));
        let untried: Vec<usize> = tried
            .iter()
            .copied()
            .filter(|i| outcomes[*i].is_none())
            .collect();
        if !raced || untried.is_empty() {
            return;
        }
        let names: Vec<&str> = untried.iter().map(|i| reads[*i].0.as_str()).collect();
        for (index, seen) in untried.iter().zip(self.stale_rest(&names).await) {
            outcomes[*index] = seen;
        }
    }

    /// For each of `names` (tasks left untried after a lost race in the same batch): `Gone`
    /// when the task no longer exists, `Taken` when someone holds its lease, `None` when it
    /// still looks free. A read that fails leaves every answer `None`: the caller tries those
    /// claims as it would have.
    async fn stale_rest(&self, names: &[&str]) -> Vec<Option<TaskOutcome>> {
        let paths: Vec<String> = names
            .iter()
            .flat_map(|n| [self.layout().task(n), self.layout().lease(n)])
            .collect();
        let Ok(reads) = self.read_paths(&paths).await else {
            return names.iter().map(|_| None).collect();
        };
        reads
            .chunks(2)
            .map(|pair| match (&pair[0], &pair[1]) {
                (None, _) => Some(TaskOutcome::Gone),
                (Some(_), Some(_)) => Some(TaskOutcome::Taken),
                (Some(_), None) => None,
            })
            .collect()
    }
}
