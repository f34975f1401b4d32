//! A batch's tally in its members' ending: what it writes at each try, and what it reads again
//! when a write failed.

use std::collections::HashMap;

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::Result;
use crate::feature::{End, EndPart, EndWrite, Leaving, Site};
use crate::lane::Lane;
use crate::queue::{Held, Tally, Tries, Turns, callback_bodies, name_callback, parse_batch};
use crate::task::batch::BatchState;

/// Re-reads of batches one ending may make when other writers keep changing them.
const REREADS: usize = Tries::Contended.most();

/// A member of a batch at its end.
pub(super) struct Member {
    /// Its index among the tasks ending.
    at: usize,
    /// Its batch.
    batch: String,
    /// Its name when it died, none when it completed.
    dead: Option<String>,
}

/// The members among `leaving` (ended `how`), in order.
pub(super) fn members(leaving: &[Leaving<'_>], how: End) -> Vec<Member> {
    (leaving.iter().enumerate())
        .filter_map(|(at, one)| {
            let batch = one.envelope?.batch.clone()?;
            let dead = (how == End::Dead).then(|| one.name.to_string());
            Some(Member { at, batch, dead })
        })
        .collect()
}

/// A batch as an ending reads it: its state and version, or `None` when it is gone or not a
/// batch.
type Seen = Option<(BatchState, i32)>;

/// The tallies of one ending multi-op: its members, the batches as read, this process's turns
/// at them, and this try's writes.
pub(super) struct Tallies {
    members: Vec<Member>,
    /// Each batch by name, as last read.
    seen: HashMap<String, Seen>,
    /// The path of each batch by name.
    paths: HashMap<String, String>,
    /// Where callbacks go: the normal lane's tail.
    prefix: String,
    /// This try's tallies, each with its batch's name, in the order of their writes.
    tallies: Vec<(String, Tally)>,
    /// Re-reads made.
    rereads: usize,
    /// Held until the ending's answer.
    _turns: Held,
}

impl Tallies {
    /// The part of an ending with `members`: their batches' turns taken (in name order), then
    /// the batches read in one multi-read.
    pub(super) async fn read(site: &Site<'_>, turns: &Turns, members: Vec<Member>) -> Result<Self> {
        let mut names: Vec<String> = members.iter().map(|m| m.batch.clone()).collect();
        names.sort();
        names.dedup();
        let paths: HashMap<String, String> = (names.iter())
            .map(|n| (n.clone(), site.layout.batch(n)))
            .collect();
        let wanted: Vec<String> = names.iter().map(|n| paths[n].clone()).collect();
        let held = turns.take(&wanted).await;
        let reads = site.read_all(&wanted).await?;
        let seen = (names.into_iter().zip(&wanted).zip(reads))
            .map(|((name, path), read)| {
                let state = read.and_then(|(data, stat)| settleable(path, &data, stat));
                (name, state)
            })
            .collect();
        Ok(Tallies {
            members,
            seen,
            paths,
            prefix: site.layout.lane_prefix(&Lane::NORMAL),
            tallies: Vec::new(),
            rereads: 0,
            _turns: held,
        })
    }

    /// Batch `name` read again (one of its writes failed), after a pause that grows with the
    /// rereads.
    async fn reread(&mut self, site: &Site<'_>, name: &str) -> Result<()> {
        crate::queue::write::pause(self.rereads).await;
        let path = &self.paths[name];
        let state = (site.read(path).await?).and_then(|(data, stat)| settleable(path, &data, stat));
        self.seen.insert(name.to_string(), state);
        Ok(())
    }
}

impl EndPart for Tallies {
    fn writes(&mut self, still: &[usize]) -> Vec<EndWrite> {
        // Each batch once, in the order of its first member still ending.
        let mut counts: Vec<(&str, u64, Vec<String>)> = Vec::new();
        for member in self.members.iter().filter(|m| still.contains(&m.at)) {
            let at = match counts.iter().position(|c| c.0 == member.batch) {
                Some(at) => at,
                None => {
                    counts.push((&member.batch, 0, Vec::new()));
                    counts.len() - 1
                }
            };
            match &member.dead {
                None => counts[at].1 += 1,
                Some(name) => counts[at].2.push(name.clone()),
            }
        }
        self.tallies = (counts.into_iter())
            .filter_map(|(name, completed, dead)| {
                let seen = self.seen.get(name)?.as_ref();
                let tally = tally(seen, self.paths[name].clone(), completed, &dead)?;
                Some((name.to_string(), tally))
            })
            .collect();
        let mut writes = Vec::new();
        for (_, tally) in &self.tallies {
            writes.push(EndWrite::Set {
                path: tally.path.clone(),
                data: tally.data.clone(),
                version: Some(tally.version),
            });
            writes.extend(
                tally
                    .callbacks
                    .iter()
                    .map(|body| EndWrite::CreateSequential {
                        prefix: self.prefix.clone(),
                        data: body.clone(),
                    }),
            );
        }
        writes
    }

    fn failed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        k: usize,
        error: &'a zk::Error,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let again = matches!(error, zk::Error::BadVersion | zk::Error::NoNode);
            self.rereads += 1;
            let Some(name) = self.batch_of_write(k).filter(|_| again) else {
                return Ok(false);
            };
            if self.rereads > REREADS {
                return Ok(false);
            }
            self.reread(site, &name).await?;
            Ok(true)
        })
    }

    fn landed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        results: Vec<&'a zk::MultiWriteResult>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut results = results.into_iter();
            for (_, tally) in &self.tallies {
                let mine: Vec<_> = results.by_ref().take(1 + tally.callbacks.len()).collect();
                if !tally.callbacks.is_empty() {
                    name_callback(site.client, tally, mine.into_iter()).await;
                }
            }
        })
    }
}

impl Tallies {
    /// The batch whose tally this try's write `k` is part of.
    fn batch_of_write(&self, k: usize) -> Option<String> {
        let mut first = 0;
        for (name, tally) in &self.tallies {
            let count = 1 + tally.callbacks.len();
            if k < first + count {
                return Some(name.clone());
            }
            first += count;
        }
        None
    }
}

/// The tally of `completed` members completed and `dead` ones buried in the batch `seen`
/// holds; `None` when the batch is gone or over (its callback published: nothing to count).
fn tally(
    seen: Option<&(BatchState, i32)>,
    path: String,
    completed: u64,
    dead: &[String],
) -> Option<Tally> {
    let (state, version) = seen?;
    let mut state = state.clone();
    if !state.settle(completed, dead) {
        return None;
    }
    let callbacks = callback_bodies(&mut state);
    Some(Tally {
        path,
        version: *version,
        data: state.to_bytes(),
        callbacks,
    })
}

/// A batch read for an ending: its state and version, or `None` (with a warning) when its
/// data is not a batch, so that its member ends uncounted instead of failing with it.
fn settleable(path: &str, data: &[u8], stat: zk::Stat) -> Option<(BatchState, i32)> {
    match parse_batch(path, data) {
        Ok(state) => Some((state, stat.version)),
        Err(e) => {
            tracing::warn!(batch = path, error = %e, "member settled without being counted in its batch");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn batch(name: &str, total: u64, sealed: bool) -> (BatchState, i32) {
        let mut state = BatchState::open(name, "done".into(), None, json!({}), 0);
        (state.total, state.sealed) = (total, sealed);
        (state, 4)
    }

    fn member(at: usize, batch: &str, dead: Option<&str>) -> Member {
        let (batch, dead) = (batch.to_string(), dead.map(str::to_string));
        Member { at, batch, dead }
    }

    async fn tallies(members: Vec<Member>, seen: Vec<(&str, Seen)>) -> Tallies {
        let paths = (seen.iter())
            .map(|(n, _)| (n.to_string(), format!("/q/batches/{n}")))
            .collect();
        Tallies {
            members,
            seen: seen.into_iter().map(|(n, s)| (n.to_string(), s)).collect(),
            paths,
            prefix: "/q/tasks/task-".into(),
            tallies: Vec::new(),
            rereads: 0,
            _turns: Turns::<()>::default().take(&[]).await,
        }
    }

    fn counters(write: &EndWrite) -> (String, BatchState, Option<i32>) {
        let EndWrite::Set {
            path,
            data,
            version,
        } = write
        else {
            panic!("a batch's counters first: {write:?}")
        };
        (
            path.clone(),
            serde_json::from_slice(data).unwrap(),
            *version,
        )
    }

    #[tokio::test]
    async fn each_batch_counts_its_members_still_ending_once_at_the_version_read() {
        let members = vec![
            member(0, "a", None),
            member(1, "b", Some("task-0000000002")),
            member(2, "a", Some("task-0000000003")),
        ];
        let seen = vec![
            ("a", Some(batch("a", 9, false))),
            ("b", Some(batch("b", 9, false))),
        ];
        let mut part = tallies(members, seen).await;
        let writes = part.writes(&[0, 1, 2]);
        assert_eq!(writes.len(), 2, "one write per batch: {writes:?}");
        let (path, a, version) = counters(&writes[0]);
        assert_eq!((path.as_str(), a.completed, a.dead), ("/q/batches/a", 1, 1));
        assert_eq!(version, Some(4));
        let (_, b, _) = counters(&writes[1]);
        assert_eq!(b.dead_members, ["task-0000000002"]);
        // The first task's lease was lost: the next try counts only the others.
        let writes = part.writes(&[1, 2]);
        let (_, a, _) = counters(&writes[0]);
        assert_eq!((a.name.as_str(), a.completed, a.dead), ("b", 0, 1));
        let (_, a, _) = counters(&writes[1]);
        assert_eq!((a.name.as_str(), a.completed, a.dead), ("a", 0, 1));
    }

    #[tokio::test]
    async fn the_last_member_of_a_sealed_batch_publishes_its_callback_with_the_counters() {
        let seen = vec![("a", Some(batch("a", 1, true))), ("gone", None)];
        let members = vec![member(0, "gone", None), member(1, "a", None)];
        let mut part = tallies(members, seen).await;
        let writes = part.writes(&[0, 1]);
        assert_eq!(writes.len(), 2, "a batch gone counts nothing: {writes:?}");
        let (_, a, _) = counters(&writes[0]);
        assert!(a.callback_id.is_some(), "the callback's id is set with it");
        let EndWrite::CreateSequential { prefix, .. } = &writes[1] else {
            panic!("the callback at the lane's tail: {writes:?}")
        };
        assert_eq!(prefix, "/q/tasks/task-");
        assert_eq!(part.batch_of_write(1).as_deref(), Some("a"));
        assert_eq!(part.batch_of_write(2), None);
    }
}
