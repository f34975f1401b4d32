//! A probe: a window of a lane's numbers read in one multi-read, each task with its lease,
//! beside the stat of the lane's parent (its tail), the tails of the other lanes, the stat of
//! `lanes/keys`, and a key lane's gates. Windows of other key lanes may ride along in the
//! same multi-read ([`Along`]): a key's lane often holds fewer tasks than a window, and a
//! drain over 100 keys of 20 tasks each spent a probe per key where a drain without keys
//! spent one per 32 tasks.

use crate::queue::Probes;
use zookeeper_client as zk;

use super::{LeaseSeen, Probe, Probed, tail_of, unexpected};
use crate::error::{Error, Result};
use crate::lane::{Lane, Priority};
use crate::layout::lane_task_name;
use crate::queue::reads::TaskRead;

/// A window of another lane read along with a probe: `count` numbers from `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Along {
    pub lane: Lane,
    pub from: i64,
    pub count: usize,
}

/// What a probe read of a lane along: its parent's tail and children, and its tasks.
#[derive(Clone, Debug, Default)]
pub struct AlongRead {
    pub tail: i64,
    pub children: usize,
    pub found: Vec<Probed>,
}

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
        self.probe_along(lane, others, from, count, &[]).await
    }

    /// As [`Probes::probe_in`], the windows `along` read in the same request (each with its
    /// lane's parent and its key's gates); what they found is in [`Probe::along`].
    pub async fn probe_along(
        self,
        lane: &Lane,
        others: &[Lane],
        from: i64,
        count: usize,
        along: &[Along],
    ) -> Result<Probe> {
        let tasks = self.layout().lane_tasks(lane);
        let mut reader = self.client().new_multi_reader();
        let mut paths = vec![tasks.clone(), self.layout().key_lanes()];
        paths.extend(others.iter().map(|p| self.layout().lane_tasks(p)));
        paths.extend(self.window_paths(lane, from, count));
        for window in along {
            paths.push(self.layout().lane_tasks(&window.lane));
            paths.extend(self.window_paths(&window.lane, window.from, window.count));
        }
        for path in &paths {
            reader
                .add_get_data(path)
                .map_err(|e| Error::zk("probe", path, e))?;
        }
        let mut gates = self.gates_to_prefetch(lane, count);
        for window in along {
            gates.extend(self.gates_to_prefetch(&window.lane, window.count));
        }
        for path in &gates {
            let add = |e| Error::zk("probe", path, e);
            reader.add_get_data(path).map_err(add)?;
            reader.add_get_children(path).map_err(add)?;
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
        for window in along {
            probe.along.push(self.along_read(window, &mut results)?);
        }
        for gate in &gates {
            self.prefetched_gate(gate, results.next(), results.next());
        }
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

    /// What a window read along found, from its reads: its lane's parent, then its numbers.
    fn along_read(
        &self,
        window: &Along,
        results: &mut impl Iterator<Item = zk::MultiReadResult>,
    ) -> Result<AlongRead> {
        let (tail, children) = match results.next() {
            Some(zk::MultiReadResult::Data { stat, .. }) => {
                (tail_of(&stat), stat.num_children as usize)
            }
            _ => (0, 0),
        };
        let found = self.window_read(&window.lane, window.from, window.count, results)?;
        Ok(AlongRead {
            tail,
            children,
            found,
        })
    }

    /// The gates of a key lane's key a probe of `count` numbers reads along (see
    /// `gate_cache`): the key's gate in each route that limits keys, so that the claim of the
    /// window's tasks need not read them first.
    fn gates_to_prefetch(&self, lane: &Lane, count: usize) -> Vec<String> {
        let Lane::Key(key) = lane else {
            return Vec::new();
        };
        if count == 0 {
            return Vec::new();
        }
        (self.memory.gates.key_routes().iter())
            .map(|route| format!("{}/{key}", self.layout().key_gates(route)))
            .collect()
    }

    /// Learns gate `gate` from its data and children as a probe read them.
    fn prefetched_gate(
        &self,
        gate: &str,
        data: Option<zk::MultiReadResult>,
        children: Option<zk::MultiReadResult>,
    ) {
        use zk::MultiReadResult::{Children, Data, Error as Failed};
        match (data, children) {
            (Some(Data { data, stat }), Some(Children { children })) => {
                let bucket = crate::limit::GateData::read(&data).bucket;
                let in_flight = crate::queue::slots::tasks_in_all(&children);
                let version = Some(stat.version);
                (self.memory.gates).prefetched(gate, version, in_flight, bucket, stat.mtime);
            }
            (
                Some(Failed {
                    err: zk::Error::NoNode,
                }),
                _,
            ) => {
                self.memory.gates.prefetched(gate, None, 0, None, 0);
            }
            _ => {}
        }
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
                consumer_version: None,
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
