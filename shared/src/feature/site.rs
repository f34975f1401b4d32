//! Where the hooks reach ZooKeeper: the queue's session, paths and ACLs, and the queue itself
//! unnamed, as an ending's hooks get it ([`Site`]) and as a sweep does ([`Upkeep`]).

use std::any::Any;
use std::sync::Arc;

use zookeeper_client as zk;

use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// The queue's store as a hook reaches it: its session, its paths, its ACLs; and the queue
/// itself, for a feature whose work after an ending goes through the core's own writes.
pub struct Site<'a> {
    /// The queue's ZooKeeper session.
    pub client: &'a zk::Client,
    /// The queue's paths.
    pub layout: &'a Layout,
    /// The ACLs of what it creates.
    pub acls: zk::Acls<'static>,
    /// The queue (a [`crate::Queue`]) as this module may hold it without naming it: the
    /// core's modules name this one, so this one names none of theirs (see [`Site::queue`]).
    pub queue: &'a (dyn Any + Send + Sync),
}

impl Site<'_> {
    /// The queue the hook runs in, as the type `Q` a feature names (`crate::Queue`); `None`
    /// for any other type.
    pub fn queue<Q: Any>(&self) -> Option<&Q> {
        self.queue.downcast_ref::<Q>()
    }

    /// Creates the persistent znode `path` (empty) unless it exists.
    pub async fn ensure(&self, path: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(self.acls);
        match self.client.create(path, b"", &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// Makes sure of a time bucket's znode `path` and of its `parent` (each made unless it
    /// exists), unless `made` already says `bucket`: a create that finds its node is a logged
    /// write all the same, so a process makes each bucket once.
    pub async fn ensure_bucket(
        &self,
        made: &std::sync::atomic::AtomicI64,
        bucket: i64,
        parent: &str,
        path: &str,
    ) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if made.load(Relaxed) != bucket {
            self.ensure(parent).await?;
            self.ensure(path).await?;
            made.store(bucket, Relaxed);
        }
        Ok(())
    }

    /// The children of `path`; none when it is gone.
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        children_of(self.client, path).await
    }

    /// One znode's data and stat; `None` when it is gone.
    pub async fn read(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        match self.client.get_data(path).await {
            Ok(read) => Ok(Some(read)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Several znodes' data and stats in one request (a multi-read); `None` for those gone.
    /// No request for no paths.
    pub async fn read_all(&self, paths: &[String]) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut reader = self.client.new_multi_reader();
        for path in paths {
            (reader.add_get_data(path)).map_err(|e| Error::zk("get", path, e))?;
        }
        let results = (reader.commit().await).map_err(|e| Error::zk("get", &paths[0], e))?;
        (paths.iter().zip(results))
            .map(|(path, result)| match result {
                zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => Err(Error::zk("get", path, err)),
                other => {
                    let msg = format!("multi-read returned {other:?}");
                    Err(Error::zk("get", path, zk::Error::UnexpectedError(msg)))
                }
            })
            .collect()
    }
}

/// What a sweep works with: the queue's session, its paths, and ZooKeeper's time as the
/// reaper read it; and the queue itself, for a sweep whose work goes through the core's own
/// writes.
pub struct Upkeep {
    /// The queue's ZooKeeper session.
    pub client: zk::Client,
    /// The queue's paths.
    pub layout: Layout,
    /// ZooKeeper's time.
    pub now: ZkTime,
    /// The queue (a clone of the [`crate::Queue`]) as this module may hold it without naming
    /// it (see [`Upkeep::queue`]).
    pub queue: Arc<dyn Any + Send + Sync>,
}

impl Upkeep {
    /// The queue being swept, as the type `Q` a feature names (`crate::Queue`); `None` for
    /// any other type.
    pub fn queue<Q: Any>(&self) -> Option<&Q> {
        self.queue.downcast_ref::<Q>()
    }

    /// The children of `path`; none when it is gone.
    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        children_of(&self.client, path).await
    }
}

/// The children of `path` on `client`'s session; none when it is gone.
async fn children_of(client: &zk::Client, path: &str) -> Result<Vec<String>> {
    match client.list_children(path).await {
        Ok(names) => Ok(names),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Error::zk("list", path, e)),
    }
}
