//! Firing debounced publishes whose period ended, through the due index (see the feature's
//! module documentation).

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::layout::{UNFILED_BUCKET, decode_segment, delay_bucket_of};
use crate::queue::{Multi, Op, Queue};

/// Debounced tasks a run fires, at most.
pub const FIRE_PER_RUN: usize = 256;

/// Index entries a run looks at, at most (a burst of publishes is filed over several runs).
pub const LOOK_PER_RUN: usize = 16_384;

/// Entries read in one multi-read, and moved in one multi-op.
const PAGE: usize = 128;

/// The two writes of an entry's move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    From,
    To,
}

/// What a look at one entry decided.
enum Look {
    /// Due: fire it (its node read at this version, with this body).
    Fire(String, i32, Vec<u8>),
    /// Due, and its group's place takes it: wake its lane's workers (see `place`).
    Wake(Lane),
    /// Not due yet: file it in this bucket.
    File(i64),
    /// Where it belongs already.
    Stay,
    /// Gone, unreadable, or fired by its place: its entry goes.
    Drop,
}

/// The firing, on a queue.
#[derive(Clone, Copy)]
pub(super) struct Firing<'q>(pub(super) &'q Queue);

impl Firing<'_> {
    /// Fires the debounced tasks due by `now_ms` (ZooKeeper time), at most [`FIRE_PER_RUN`],
    /// and files the keys it looked at that are not due yet; returns how many it fired.
    pub(super) async fn fire_due_keys(self, now_ms: i64) -> Result<usize> {
        let (mut fired, mut looked) = (0, 0);
        for bucket in self.due_buckets(now_ms).await? {
            let entries = self.entries_of(bucket).await?;
            for page in entries.chunks(PAGE) {
                if fired >= FIRE_PER_RUN || looked >= LOOK_PER_RUN {
                    return Ok(fired);
                }
                looked += page.len();
                fired += self
                    .look_at(bucket, page, now_ms, FIRE_PER_RUN - fired)
                    .await?;
            }
            if bucket != UNFILED_BUCKET {
                self.remove_due_bucket(bucket).await?;
            }
        }
        if fired > 0 {
            tracing::debug!(fired, "debounced tasks due");
        }
        Ok(fired)
    }

    /// The index's buckets whose time has come by `now_ms`, oldest first (the unfiled one
    /// first of all).
    async fn due_buckets(self, now_ms: i64) -> Result<Vec<i64>> {
        let path = self.0.layout().debounce_due();
        let names = self.0.children_of(&path).await?;
        let mut buckets: Vec<i64> = (names.iter())
            .filter_map(|n| n.parse().ok())
            .filter(|b| *b <= now_ms)
            .collect();
        buckets.sort_unstable();
        Ok(buckets)
    }

    /// The entries (encoded keys) of index bucket `bucket`.
    async fn entries_of(self, bucket: i64) -> Result<Vec<String>> {
        let path = self.0.layout().debounce_due_bucket(bucket);
        self.0.children_of(&path).await
    }

    /// Looks at the keys of `entries` (of `bucket`): fires those due (at most `room`), files
    /// the others where they belong; how many it fired.
    async fn look_at(
        self,
        bucket: i64,
        entries: &[String],
        now_ms: i64,
        room: usize,
    ) -> Result<usize> {
        let root = self.0.layout().debounce();
        let dir = self.0.layout().debounce_due_bucket(bucket);
        let mut paths: Vec<String> = entries.iter().map(|e| format!("{dir}/{e}")).collect();
        paths.extend(entries.iter().map(|e| format!("{root}/{e}")));
        // Each entry read before its key (one multi-read, answered in order).
        let mut reads = self.0.read_paths(&paths).await?;
        let keys = reads.split_off(entries.len());
        let versions = reads.into_iter().map(|read| Some(read?.1.version));
        let path_of = |e: &str| format!("{root}/{e}");
        let (mut fired, mut moves, mut drops) = (0, Vec::new(), Vec::new());
        let mut woken: Vec<Lane> = Vec::new();
        for ((entry, version), read) in entries.iter().zip(versions).zip(keys) {
            // Moved or dropped by another run since it was listed.
            let Some(version) = version else {
                continue;
            };
            let entry = (entry.as_str(), version);
            match look(bucket, path_of(entry.0), read, now_ms) {
                Look::Fire(..) if fired >= room => {}
                // Fired: its entry goes. Not fired (a publish rewrote it, or another run fired
                // it): the entry stays, and the next run looks again.
                Look::Fire(path, version, body) => {
                    let moved = (self.0.delays()).waiting_to_lane_tail(
                        "fire debounced",
                        &path,
                        version,
                        &body,
                    );
                    if let Some(task) = moved.await? {
                        tracing::debug!(%task, debounced = %path, "debounced task due");
                        fired += 1;
                        drops.push(entry);
                    }
                }
                // Its place takes it when its group's turn comes; the lane's workers are told
                // it may, once.
                Look::Wake(lane) => {
                    if !woken.contains(&lane) {
                        self.0.groups().wake_lane(&lane).await?;
                        woken.push(lane);
                    }
                    drops.push(entry);
                }
                Look::File(to) => moves.push((entry, to)),
                Look::Stay => {}
                Look::Drop => drops.push(entry),
            }
        }
        self.file_entries(bucket, &moves).await?;
        self.drop_entries(bucket, &drops).await?;
        Ok(fired)
    }

    /// Moves `moves` (entries of `bucket` at the version read, each with the bucket it
    /// belongs in) in multi-ops of [`PAGE`]; one by one when one of them fails (an entry there
    /// already, moved by another run, or re-dated by a publish).
    async fn file_entries(self, bucket: i64, moves: &[((&str, i32), i64)]) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        let paths: Vec<(String, i32, String)> = (moves.iter())
            .map(|((entry, version), to)| {
                let key = decode_segment(entry);
                let layout = self.0.layout();
                let from = layout.debounce_due_entry(bucket, &key);
                (from, *version, layout.debounce_due_entry(*to, &key))
            })
            .collect();
        let mut targets: Vec<i64> = moves.iter().map(|(_, to)| *to).collect();
        targets.sort_unstable();
        targets.dedup();
        for target in targets {
            self.ensure_due_bucket(target).await?;
        }
        let mut multi = Multi::new();
        for (from, version, to) in &paths {
            multi
                .push(Entry::From, Op::Delete(from, *version))
                .push(Entry::To, Op::Create(to, b""));
        }
        if self.0.commit("file debounced keys", &multi).await?.is_ok() {
            return Ok(());
        }
        for (from, version, to) in &paths {
            self.file_entry(from, *version, to).await?;
        }
        Ok(())
    }

    /// Moves one entry from `from` (at `version`) to `to`: only deleted when the key is filed
    /// at `to` already; left when another run moved it, or a publish re-dated it (its key
    /// started again: the next run looks at it).
    async fn file_entry(self, from: &str, version: i32, to: &str) -> Result<()> {
        let mut multi = Multi::new();
        multi
            .push(Entry::From, Op::Delete(from, version))
            .push(Entry::To, Op::Create(to, b""));
        match self.0.commit("file debounced key", &multi).await? {
            Ok(_) => Ok(()),
            Err(failed) => match (failed.tag, &failed.error) {
                (Entry::From, zk::Error::NoNode | zk::Error::BadVersion) => Ok(()),
                (Entry::To, zk::Error::NodeExists) => self.delete_entry_at(from, version).await,
                // Its bucket removed by another run between its creation and this: it waits
                // where it is for the next run.
                (Entry::To, zk::Error::NoNode) => Ok(()),
                _ => Err(failed.unexpected("file debounced key")),
            },
        }
    }

    /// Deletes the entries `entries` of `bucket`, each at the version read, pipelined.
    async fn drop_entries(self, bucket: i64, entries: &[(&str, i32)]) -> Result<()> {
        let dir = self.0.layout().debounce_due_bucket(bucket);
        let paths: Vec<(String, i32)> = (entries.iter())
            .map(|(e, version)| (format!("{dir}/{e}"), *version))
            .collect();
        let deletes = paths.iter().map(|(p, v)| self.delete_entry_at(p, *v));
        futures::future::try_join_all(deletes).await.map(drop)
    }

    /// Deletes the entry at `path` if it still has `version`: one a publish re-dated (its key
    /// started again) stays.
    async fn delete_entry_at(self, path: &str, version: i32) -> Result<()> {
        match self.0.client().delete(path, Some(version)).await {
            Ok(()) | Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(()),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }

    async fn ensure_due_bucket(self, bucket: i64) -> Result<()> {
        let path = self.0.layout().debounce_due_bucket(bucket);
        match self
            .0
            .client()
            .create(&path, b"", &self.0.created(zk::CreateMode::Persistent))
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(zk::Error::NoNode) => self.0.ensure_paths().await,
            Err(e) => Err(Error::zk("create", path, e)),
        }
    }

    /// Removes a time bucket left empty (never the unfiled one, which publishes write into).
    async fn remove_due_bucket(self, bucket: i64) -> Result<()> {
        let path = self.0.layout().debounce_due_bucket(bucket);
        match self.0.client().delete(&path, None).await {
            Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => Ok(()),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }
}

/// What to do with the entry in `bucket` of the key at `path`, read as `read`, at `now_ms`.
fn look(bucket: i64, path: String, read: Option<(Vec<u8>, zk::Stat)>, now_ms: i64) -> Look {
    let Some((body, stat)) = read else {
        return Look::Drop;
    };
    let Some(pending) = crate::task::PendingDebounced::read(&body, &stat) else {
        return Look::Drop;
    };
    let due = pending.due_ms();
    if due <= now_ms {
        return match pending.envelope.placed {
            Some(_) => Look::Wake(pending.envelope.lane()),
            None => Look::Fire(path, stat.version, body),
        };
    }
    match delay_bucket_of(due) {
        to if to == bucket => Look::Stay,
        to => Look::File(to),
    }
}
