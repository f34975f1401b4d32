//! The multi-op every write of the queue is made of. Each operation is added with a tag that
//! says what it is for, and a failed multi-op comes back as the tag of the operation that
//! failed it: callers answer "the task was gone" or "the lease changed hands" by meaning, never
//! by an index into a list built elsewhere.

use zookeeper_client as zk;

use super::Queue;
use crate::error::{Error, Result};

/// One write of a multi-op. A version of -1 means any version.
pub(crate) enum Op<'a> {
    Create(&'a str, &'a [u8]),
    /// Lives as long as the session that made it.
    CreateEphemeral(&'a str, &'a [u8]),
    CreateSequential(&'a str, &'a [u8]),
    Set(&'a str, &'a [u8], i32),
    Delete(&'a str, i32),
    Check(&'a str, i32),
}

impl Op<'_> {
    pub(crate) fn path(&self) -> &str {
        match *self {
            Op::Create(p, _)
            | Op::CreateEphemeral(p, _)
            | Op::CreateSequential(p, _)
            | Op::Set(p, _, _)
            | Op::Delete(p, _)
            | Op::Check(p, _) => p,
        }
    }
}

/// What an operation is for, in the multi-ops that move one task (a claim and a completion
/// tag theirs with the task's index too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The task's znode under `tasks/`, at the version its holder or reader knows.
    Task,
    /// The task's lease, at its holder's version.
    Lease,
    /// A lease created and deleted in the same multi-op: it fails when someone holds the task.
    Guard,
    /// A new task at the tail of `tasks/`.
    NewTask,
    /// Where the task waits: under `delayed/`, or under `debounce/` (a debounced publish).
    Waiting,
    /// A debounce key's entry in the due index (`debounce-due/<bucket>/<key>`).
    DueEntry,
    /// A place keeping a grouped task's turn in its lane (see `place`).
    Place,
    /// Its dead-letter record (created by a bury, deleted by a redrive).
    Record,
    /// Its idempotency key, as a keyed publish or a redrive takes it (what a task's end writes
    /// to its key is the feature's, `Feature`).
    IdempotencyKey,
    /// Its group's lock.
    Lock,
    /// A slot it holds in a gate (ephemeral: gone with its session).
    Slot,
    /// A batch's counters as a member's publish or a seal writes them, or a seal's callback
    /// task (what a member's end writes is the feature's part, `Shared`).
    Batch,
    /// A parent a child's publish waits for: checked where it is, its marker created or
    /// checked, the child's entry under it created.
    Parent,
    /// A task waiting for its parents under `after/`.
    Blocked,
    /// A signal, a signal key, or a task's registration as a waiter of one (`signals/`).
    Signal,
    /// A resumable task's step znode (`steps/<id>/…`), or their folder.
    Steps,
    /// A write a registered feature added to an ending or a release (`Feature::at_end`,
    /// `Feature::at_release`), by its index among that ending's or release's.
    Feature(u16),
    /// A write of a feature's part in an ending (`Feature::end_part`), by its index among
    /// that part's writes (the part's index is the tag's other half).
    Shared(u16),
}

/// A multi-op being built: its operations in order, each with its tag.
pub(crate) struct Multi<'a, T> {
    ops: Vec<(T, Op<'a>)>,
}

impl<'a, T: Copy + PartialEq> Multi<'a, T> {
    pub(crate) fn new() -> Self {
        Multi { ops: Vec::new() }
    }

    /// Adds `op`, for `tag`.
    pub(crate) fn push(&mut self, tag: T, op: Op<'a>) -> &mut Self {
        self.ops.push((tag, op));
        self
    }

    /// Adds `op`, if there is one, for `tag`.
    pub(crate) fn push_some(&mut self, tag: T, op: Option<Op<'a>>) -> &mut Self {
        if let Some(op) = op {
            self.push(tag, op);
        }
        self
    }

    /// The result of the first operation tagged `tag` in a committed multi-op's `results`.
    pub(crate) fn result<'r>(
        &self,
        results: &'r [zk::MultiWriteResult],
        tag: T,
    ) -> Option<&'r zk::MultiWriteResult> {
        let at = self.ops.iter().position(|(t, _)| *t == tag)?;
        results.get(at)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Its committed `results`, each with its operation's tag: what outlives the multi-op.
    pub(crate) fn landed(&self, results: Vec<zk::MultiWriteResult>) -> Landed<T> {
        let tags = self.ops.iter().map(|(tag, _)| *tag).collect();
        Landed { tags, results }
    }

    /// Its operations, in order.
    #[cfg(feature = "schedule")]
    pub(crate) fn ops(&self) -> impl Iterator<Item = &Op<'a>> {
        self.ops.iter().map(|(_, op)| op)
    }
}

/// A committed multi-op's results, each with the tag of its operation.
pub(crate) struct Landed<T> {
    tags: Vec<T>,
    results: Vec<zk::MultiWriteResult>,
}

impl<T: Copy + PartialEq> Landed<T> {
    /// The result of the first operation tagged `tag`.
    pub(crate) fn result(&self, tag: T) -> Option<&zk::MultiWriteResult> {
        let at = self.tags.iter().position(|t| *t == tag)?;
        self.results.get(at)
    }

    /// Every result, in order.
    pub(crate) fn all(&self) -> &[zk::MultiWriteResult] {
        &self.results
    }
}

/// The operation that failed a multi-op: its tag, its error and its path. Nothing of the
/// multi-op changed.
#[derive(Debug)]
pub(crate) struct Failed<T> {
    pub tag: T,
    pub error: zk::Error,
    pub path: String,
}

impl<T> Failed<T> {
    /// The failure as an error of `what`, for a failure the caller has no answer to.
    pub(crate) fn unexpected(self, what: &'static str) -> Error {
        Error::zk(what, self.path, self.error)
    }
}

/// A multi-op's results, or the operation that failed it.
pub(crate) type Committed<T> = std::result::Result<Vec<zk::MultiWriteResult>, Failed<T>>;

impl Queue {
    /// Commits `multi`; an operation's failure comes back as a value with its tag. Only a
    /// failure of the request itself (no answer, a dropped link) is an error.
    pub(crate) async fn commit<T: Copy + PartialEq>(
        &self,
        what: &'static str,
        multi: &Multi<'_, T>,
    ) -> Result<Committed<T>> {
        let mut writer = self.client().new_multi_writer();
        for (_, op) in &multi.ops {
            let added = match *op {
                Op::Create(path, data) => {
                    writer.add_create(path, data, &self.created(zk::CreateMode::Persistent))
                }
                Op::CreateEphemeral(path, data) => {
                    writer.add_create(path, data, &self.created(zk::CreateMode::Ephemeral))
                }
                Op::CreateSequential(path, data) => writer.add_create(
                    path,
                    data,
                    &self.created(zk::CreateMode::PersistentSequential),
                ),
                Op::Set(path, data, version) => writer.add_set_data(path, data, Some(version)),
                Op::Delete(path, version) => {
                    writer.add_delete(path, (version >= 0).then_some(version))
                }
                Op::Check(path, version) => writer.add_check_version(path, version),
            };
            added.map_err(|e| Error::zk(what, op.path(), e))?;
        }
        let first = multi.ops.first().map_or("", |(_, op)| op.path());
        match writer.commit().await {
            Ok(results) => Ok(Ok(results)),
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                let (tag, op) = &multi.ops[index];
                Ok(Err(Failed {
                    tag: *tag,
                    error: source,
                    path: op.path().to_string(),
                }))
            }
            Err(e) => Err(Error::zk(what, first, e)),
        }
    }
}
