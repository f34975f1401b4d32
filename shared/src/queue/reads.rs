//! Reading znodes: one, or many in one request; and what reading a task found.

use zookeeper_client as zk;

use super::Queue;
use crate::error::{Error, Result};

/// A znode's data, stat and children, as read together.
pub(super) type WithChildren = Option<(Vec<u8>, zk::Stat, Vec<String>)>;

/// What reading a task found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum TaskRead {
    /// Read: its body and stat.
    Found {
        /// The task's body.
        body: Vec<u8>,
        /// The task znode's stat.
        stat: zk::Stat,
    },
    /// Completed or removed since it was listed.
    Gone,
    /// Its ACL shuts us out (another producer's credentials): the reason, for the log.
    Unreadable(String),
}

impl Queue {
    /// One znode's data and stat; `None` when it is gone.
    pub async fn read_path(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        self.site().read(path).await
    }

    /// The children of `path`; none when it is gone.
    pub async fn children_of(&self, path: &str) -> Result<Vec<String>> {
        self.site().children(path).await
    }

    /// Several znodes' data, stats and children in one request (a multi-read); `None` for
    /// those gone.
    pub(super) async fn read_with_children(&self, paths: &[String]) -> Result<Vec<WithChildren>> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = self.client().new_multi_reader();
        for path in paths {
            let get = |e| Error::zk("get", path, e);
            reader.add_get_data(path).map_err(get)?;
            reader.add_get_children(path).map_err(get)?;
        }
        let results = (reader.commit().await).map_err(|e| Error::zk("get", &paths[0], e))?;
        let mut results = results.into_iter();
        let mut read = Vec::with_capacity(paths.len());
        for path in paths {
            read.push(match (results.next(), results.next()) {
                (
                    Some(zk::MultiReadResult::Data { data, stat }),
                    Some(zk::MultiReadResult::Children { children }),
                ) => Some((data, stat, children)),
                (
                    Some(zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    }),
                    _,
                )
                | (
                    _,
                    Some(zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    }),
                ) => None,
                (Some(zk::MultiReadResult::Error { err }), _)
                | (_, Some(zk::MultiReadResult::Error { err })) => {
                    return Err(Error::zk("get", path, err));
                }
                other => {
                    let msg = format!("multi-read returned {other:?}");
                    return Err(Error::zk("get", path, zk::Error::UnexpectedError(msg)));
                }
            });
        }
        Ok(read)
    }

    /// Several znodes' data and stats in one request (a multi-read); `None` for those gone.
    pub async fn read_paths(&self, paths: &[String]) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
        self.site().read_all(paths).await
    }
}

/// Adds a read of each of `paths` to `reader`.
pub(super) fn add_get_data(reader: &mut zk::MultiReader<'_>, paths: &[String]) -> Result<()> {
    for path in paths {
        reader
            .add_get_data(path)
            .map_err(|e| Error::zk("get", path, e))?;
    }
    Ok(())
}
