//! What a pass starts from, in one request: the folders registered features ask to have
//! listed (`Feature::listed_at_start`) and the znodes they ask to have read
//! (`Feature::read_at_start`, such as `dependents/` and `paused`), where each lane starts, and
//! whether anything waits to join the lanes later (tasks under `delayed/`, the folders a run's
//! hooks work on, such as debounced publishes and recurring schedules). A run on an idle queue
//! needs nothing more; before, these were five requests.

use std::collections::BTreeSet;

use zookeeper_client as zk;

use super::Queue;
use super::probe::{Lanes, lane_starts};
use super::reads::add_get_data;
use crate::error::{Error, Result};
use crate::feature::{Found, StartRead};

/// What [`Queue::read_start`] found.
#[derive(Clone, Debug)]
pub struct Start {
    /// What was listed for the features that asked (`Feature::listed_at_start`), and what
    /// the reads of the others' znodes told the run (`Feature::read_at_start`).
    pub found: Found,
    /// Where each lane starts.
    pub lanes: Lanes,
    /// Whether `delayed/` or a watched folder has children.
    pub waiting: bool,
    /// Whether each folder [`Queue::read_start_watching`] was asked to watch has children (a
    /// folder that cannot be read counts as having some).
    pub watched: Vec<bool>,
}

impl Start {
    /// Nothing in the lanes and nothing waiting to join them (key lanes that exist, unlisted,
    /// count as something).
    pub fn idle(&self) -> bool {
        !self.waiting && self.lanes.empty()
    }
}

impl Queue {
    /// Reads a [`Start`] in one multi-read. Its lanes are the priority lanes': a walk needs
    /// the key lanes too ([`super::Probes::with_key_lanes`]).
    ///
    /// # Notable errors
    /// - [`Error::Unreadable`] when a znode a feature reads holds what it cannot read (the
    ///   `paused` znode something else than its JSON).
    pub async fn read_start(&self) -> Result<Start> {
        self.read_start_watching(&[]).await
    }

    /// [`Queue::read_start`], also looking whether each of `watched` (folders a run's hooks
    /// work on, `crate::run_hook`) has children: [`Start::watched`] says, and a run is not
    /// idle while one has.
    pub async fn read_start_watching(&self, watched: &[String]) -> Result<Start> {
        let layout = self.layout();
        let asked = FeatureReads::of(self);
        let mut waiting = vec![layout.delayed()];
        waiting.extend(watched.iter().cloned());
        let mut reader = self.client().new_multi_reader();
        self.probes().add_lane_reads(&mut reader)?;
        asked.add(&mut reader)?;
        add_get_data(&mut reader, &waiting)?;
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", layout.root(), e))?;
        let mut results = results.into_iter();
        let lanes = lane_starts(&mut results);
        let found = asked.found(self, &mut results)?;
        // A parent we may not read is taken as holding something: the run looks.
        let holds: Vec<bool> = (results)
            .map(|read| match read {
                zk::MultiReadResult::Data { stat, .. } => stat.num_children > 0,
                zk::MultiReadResult::Error { err } => err != zk::Error::NoNode,
                _ => true,
            })
            .collect();
        Ok(Start {
            found,
            lanes,
            waiting: holds.iter().any(|h| *h),
            watched: holds.get(1..).unwrap_or_default().to_vec(),
        })
    }

    /// The features' part of a start read alone, in one multi-read: what `status`,
    /// `explain` and `stats` show of what holds tasks back (what is paused).
    ///
    /// # Notable errors
    /// - [`Error::Unreadable`] as [`Queue::read_start`] says.
    pub async fn read_features(&self) -> Result<Found> {
        let asked = FeatureReads::of(self);
        let mut reader = self.client().new_multi_reader();
        asked.add(&mut reader)?;
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", self.layout().root(), e))?;
        asked.found(self, &mut results.into_iter())
    }
}

/// What the registered features ask a start read for: the folders it lists
/// (`Feature::listed_at_start`) and the znodes it reads (`Feature::read_at_start`), each
/// with the index of the feature that asked.
struct FeatureReads {
    listed: Vec<(usize, String)>,
    read: Vec<(usize, String)>,
}

impl FeatureReads {
    fn of(queue: &Queue) -> Self {
        FeatureReads {
            listed: queue.features().listed_at_start(queue.layout()),
            read: queue.features().read_at_start(queue.layout()),
        }
    }

    /// Adds the listings, then the reads, to `reader`.
    fn add(&self, reader: &mut zk::MultiReader<'_>) -> Result<()> {
        for (_, folder) in &self.listed {
            reader
                .add_get_children(folder)
                .map_err(|e| Error::zk("list", folder, e))?;
        }
        for (_, path) in &self.read {
            reader
                .add_get_data(path)
                .map_err(|e| Error::zk("get", path, e))?;
        }
        Ok(())
    }

    /// What the features make of their part of `results` (next in it, in the order
    /// [`FeatureReads::add`] added them); each read's answer is also what the queue's later
    /// claims start from when it is newer than theirs.
    fn found(
        &self,
        queue: &Queue,
        results: &mut impl Iterator<Item = zk::MultiReadResult>,
    ) -> Result<Found> {
        let mut listings = Vec::with_capacity(self.listed.len());
        for (at, folder) in &self.listed {
            let names: BTreeSet<String> = match results.next() {
                Some(zk::MultiReadResult::Children { children }) => children.into_iter().collect(),
                read => nothing_there(read, folder).map(|()| BTreeSet::new())?,
            };
            listings.push((*at, names));
        }
        let mut answers = Vec::with_capacity(self.read.len());
        for (at, path) in &self.read {
            let (answer, stat) = match results.next() {
                Some(zk::MultiReadResult::Data { data, stat }) => {
                    let found = Some((&data[..], &stat));
                    let answer =
                        (queue.features()).saw_at_start(*at, &StartRead { path, found })?;
                    (answer, Some(stat))
                }
                other => {
                    nothing_there(other, path)?;
                    let read = StartRead { path, found: None };
                    ((queue.features()).saw_at_start(*at, &read)?, None)
                }
            };
            queue.memory.checks.saw(*at, queue.features(), &answer);
            let covers = &queue.memory.covers;
            (queue.features()).tell_covers(covers, *at, &answer, stat.as_ref());
            answers.push((*at, answer));
        }
        Ok(Found::new(listings, answers))
    }
}

/// `Ok` when the read found no node at `path`; the error otherwise.
fn nothing_there(read: Option<zk::MultiReadResult>, path: &str) -> Result<()> {
    match read {
        Some(zk::MultiReadResult::Error {
            err: zk::Error::NoNode,
        }) => Ok(()),
        Some(zk::MultiReadResult::Error { err }) => Err(Error::zk("get", path, err)),
        other => Err(Error::zk(
            "get",
            path,
            zk::Error::UnexpectedError(format!("multi-read returned {other:?}")),
        )),
    }
}
