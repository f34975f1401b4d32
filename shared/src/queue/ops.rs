//! The multi-op every write of the queue is made of, and how its failures come back: as the
//! index of the operation that failed, a value for the caller to read races from.

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

impl<'a> Op<'a> {
    /// The same operation, borrowing what this one borrows.
    pub(crate) fn clone_ref(&self) -> Op<'a> {
        match *self {
            Op::Create(p, d) => Op::Create(p, d),
            Op::CreateEphemeral(p, d) => Op::CreateEphemeral(p, d),
            Op::CreateSequential(p, d) => Op::CreateSequential(p, d),
            Op::Set(p, d, v) => Op::Set(p, d, v),
            Op::Delete(p, v) => Op::Delete(p, v),
            Op::Check(p, v) => Op::Check(p, v),
        }
    }

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

/// A multi-op's results, or the index and error of the operation that failed it.
pub(crate) type Committed = std::result::Result<Vec<zk::MultiWriteResult>, (usize, zk::Error)>;

impl Queue {
    /// Commits `ops`; an operation's failure comes back as a value with its index. Only a
    /// failure of the request itself (no answer, a dropped link) is an error.
    pub(crate) async fn commit(&self, what: &'static str, ops: &[Op<'_>]) -> Result<Committed> {
        let mut multi = self.client().new_multi_writer();
        for op in ops {
            let added = match *op {
                Op::Create(path, data) => multi.add_create(path, data, &self.persistent()),
                Op::CreateEphemeral(path, data) => multi.add_create(path, data, &self.ephemeral()),
                Op::CreateSequential(path, data) => {
                    multi.add_create(path, data, &self.sequential())
                }
                Op::Set(path, data, version) => multi.add_set_data(path, data, Some(version)),
                Op::Delete(path, version) => {
                    multi.add_delete(path, (version >= 0).then_some(version))
                }
                Op::Check(path, version) => multi.add_check_version(path, version),
            };
            added.map_err(|e| Error::zk(what, op.path(), e))?;
        }
        match multi.commit().await {
            Ok(results) => Ok(Ok(results)),
            Err(e) => match failed_at(&e) {
                Some((index, source)) => Ok(Err((index, source.clone()))),
                None => Err(Error::zk(what, ops[0].path(), e)),
            },
        }
    }
}

/// The multi-op error of index `index`, if that is what failed.
pub(crate) fn failed_at(err: &zk::MultiWriteError) -> Option<(usize, &zk::Error)> {
    match err {
        zk::MultiWriteError::OperationFailed { index, source } => Some((*index, source)),
        zk::MultiWriteError::RequestFailed { .. } => None,
    }
}
