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
        let listed = self.features().listed_at_start(layout);
        let read = self.features().read_at_start(layout);
        let mut waiting = vec![layout.delayed()];
        waiting.extend(watched.iter().cloned());
        let mut reader = self.client().new_multi_reader();
        self.probes().add_lane_reads(&mut reader)?;
        for (_, folder) in &listed {
            reader
                .add_get_children(folder)
                .map_err(|e| Error::zk("list", folder, e))?;
        }
        for (_, path) in &read {
            reader
                .add_get_data(path)
                .map_err(|e| Error::zk("get", path, e))?;
        }
        add_get_data(&mut reader, &waiting)?;
        let results = reader
            .commit()
            .await
            .map_err(|e| Error::zk("get", layout.root(), e))?;
        let mut results = results.into_iter();
        let lanes = lane_starts(&mut results);
        let mut listings = Vec::with_capacity(listed.len());
        for (at, folder) in &listed {
            let names: BTreeSet<String> = match results.next() {
                Some(zk::MultiReadResult::Children { children }) => children.into_iter().collect(),
                read => nothing_there(read, folder).map(|()| BTreeSet::new())?,
            };
            listings.push((*at, names));
        }
        let mut answers = Vec::with_capacity(read.len());
        for (at, path) in &read {
            let answer = match results.next() {
                Some(zk::MultiReadResult::Data { data, stat }) => {
                    let found = Some((&data[..], &stat));
                    (self.features()).saw_at_start(*at, &StartRead { path, found })?
                }
                other => {
                    nothing_there(other, path)?;
                    (self.features()).saw_at_start(*at, &StartRead { path, found: None })?
                }
            };
            self.memory.checks.saw(*at, self.features(), &answer);
            answers.push((*at, answer));
        }
        // A parent we may not read is taken as holding something: the run looks.
        let holds: Vec<bool> = (results)
            .map(|read| match read {
                zk::MultiReadResult::Data { stat, .. } => stat.num_children > 0,
                zk::MultiReadResult::Error { err } => err != zk::Error::NoNode,
                _ => true,
            })
            .collect();
        Ok(Start {
            found: Found::new(listings, answers),
            lanes,
            waiting: holds.iter().any(|h| *h),
            watched: holds.get(1..).unwrap_or_default().to_vec(),
        })
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
