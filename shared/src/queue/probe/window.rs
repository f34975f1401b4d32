//! A probe: a window of a lane's numbers read in one multi-read, each task with its lease,
//! beside the stat of the lane's parent (its tail), the tails of the other lanes, the stat of
//! and `lanes/keys`.

use crate::queue::Probes;
use zookeeper_client as zk;

use super::{LeaseSeen, Probe, Probed, tail_of, unexpected};
use crate::error::{Error, Result};
use crate::lane::{Lane, Priority};
use crate::layout::lane_task_name;
use crate::queue::reads::TaskRead;

impl Probes<'_> {
    /// Reads `count` numbers from `from` of the normal lane (`tasks/`) in one request.
    pub async fn probe(self, from: i64, count: usize) -> Result<Probe> {
        let others = [Priority::High, Priority::Low].map(Lane::from);
        self.probe_in(&Lane::NORMAL, &others, from, count).await
    }

    /// Reads `count` numbers from `from` of `lane` in one request: each task and its lease,
    /// the stat of the lane's parent, the tails of the `others` lanes (so that a walk learns
    /// of tasks published in a lane it left without a request of its own), and the stat of
    /// `lanes/keys` (so that it learns of a key lane made since it listed them).
    pub async fn probe_in(
        self,
        lane: &Lane,
        others: &[Lane],
        from: i64,
        count: usize,
    ) -> Result<Probe> {
        let tasks = self.layout().lane_tasks(lane);
        let mut reader = self.client().new_multi_reader();
        let mut paths = vec![tasks.clone(), self.layout().key_lanes()];
        paths.extend(others.iter().map(|p| self.layout().lane_tasks(p)));
        paths.extend(self.window_paths(lane, from, count));
        for path in &paths {
            reader
                .add_get_data(path)
                .map_err(|e| Error::zk("probe", path, e))?;
        }
        let mut results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("probe", &tasks, e))?
            .into_iter();
        let stat = match results.next() {
            Some(zk::MultiReadResult::Data { stat, .. }) => stat,
            // A lane not made yet (a key's that never had a task) has none.
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => return Ok(Probe::default()),
            other => return Err(unexpected(&tasks, other)),
        };
        let mut probe = Probe {
            tail: tail_of(&stat),
            children: stat.num_children as usize,
            ..Probe::default()
        };
        if let Some(zk::MultiReadResult::Data { stat, .. }) = results.next() {
            probe.key_lanes = Some(stat.cversion);
        }
        for other in others {
            // A lane whose parent is missing (a queue no consumer of this version set up)
            // has no tasks.
            if let Some(zk::MultiReadResult::Data { stat, .. }) = results.next() {
                probe.others.push((other.clone(), tail_of(&stat)));
            }
        }
        probe.found = self.window_read(lane, from, count, &mut results)?;
        Ok(probe)
    }

    /// The paths a window of `count` numbers from `from` of `lane` reads: each number's task
    /// and lease.
    fn window_paths(&self, lane: &Lane, from: i64, count: usize) -> Vec<String> {
        let names = (from..from + count as i64).map(|number| lane_task_name(lane, number));
        (names.flat_map(|name| [self.layout().task(&name), self.layout().lease(&name)])).collect()
    }

    /// The tasks of a window of `count` numbers from `from` of `lane`, from its reads.
    fn window_read(
        &self,
        lane: &Lane,
        from: i64,
        count: usize,
        results: &mut impl Iterator<Item = zk::MultiReadResult>,
    ) -> Result<Vec<Probed>> {
        let mut found = Vec::new();
        for number in from..from + count as i64 {
            let (task, lease) = (results.next(), results.next());
            if let Some(probed) = self.probed(lane_task_name(lane, number), number, task, lease)? {
                found.push(probed);
            }
        }
        Ok(found)
    }

    /// One number's pair of reads; `None` when no task has that number.
    fn probed(
        &self,
        name: String,
        number: i64,
        task: Option<zk::MultiReadResult>,
        lease: Option<zk::MultiReadResult>,
    ) -> Result<Option<Probed>> {
        use zk::MultiReadResult::{Data, Error as Failed};
        let read = match task {
            Some(Data { data, stat }) => TaskRead::Found { body: data, stat },
            Some(Failed {
                err: zk::Error::NoNode,
            }) => return Ok(None),
            Some(Failed {
                err: zk::Error::NoAuth,
            }) => TaskRead::Unreadable("not authorized to read it".into()),
            other => return Err(unexpected(&self.layout().task(&name), other)),
        };
        let lease = match lease {
            Some(Data { data, stat }) => Some(LeaseSeen::from_read(&data, &stat)),
            Some(Failed {
                err: zk::Error::NoNode,
            }) => None,
            // A lease we may not read is someone's lease all the same.
            Some(Failed {
                err: zk::Error::NoAuth,
            }) => Some(LeaseSeen {
                consumer_id: None,
                fencing_token: 0,
                mtime: 0,
                progress: None,
            }),
            other => return Err(unexpected(&self.layout().lease(&name), other)),
        };
        Ok(Some(Probed {
            number,
            name,
            read,
            lease,
        }))
    }
}
