//! Finding what landed of a publish whose answers were lost with its connection (a leader
//! election, a dropped link): a create whose reply is lost may or may not have been applied.
//!
//! Every envelope carries an id, and a task lands at its lane's tail. So the tails of the lanes
//! a window publishes into are read in the same pipeline, before its creates (its *floors*:
//! ZooKeeper answers a session's requests in order, so every task the window makes has a number
//! at or above them). After a loss, once a session answers again, the numbers from each floor
//! to the lane's tail are read (after a `sync`, so that the server has every write the ensemble
//! committed), looking for the ids in doubt. Other producers' tasks in that range are read
//! and passed over. An item in doubt
//!
//! - found in its lane landed (a keyed one's key is named now, if its naming was lost too);
//! - debounced, landed when `debounce/<key>` holds its id (or it fired already, and was found);
//! - with `after`, landed when it waits under `after/<id>` or died with a parent;
//! - with an idempotency key, landed when its key names its id;
//! - else did not land, and is sent again: unless numbers between the floor and the tail are
//!   missing that nothing explains. A consumer may have taken the very task and completed it
//!   already, so a missing number is looked for in the completion records (`KEEP_DONE`), in
//!   `delayed/` and among the dead letters; one found nowhere leaves the items of its lane that
//!   were not found [`Fate::Unknown`]: sending them again could make a twin.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use super::Queue;
use super::keys::{KeyData, Published};
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::layout;
use crate::task::{self, Body, Envelope};

/// Numbers read in one request when a lane's tail is searched.
const SEARCH_CHUNK: usize = 64;

/// A number below every task a window makes, by lane: its tail as read before the window.
pub(super) type Floors = HashMap<Lane, i64>;

/// What became of one item whose answer was lost.
#[derive(Debug)]
pub(super) enum Fate {
    /// It landed: its answer, as found.
    Landed(Published),
    /// It did not land: it can be sent again.
    NotLanded,
    /// It may have landed and left its lane already: why it cannot be told.
    Unknown(String),
}

/// What the tail of one lane holds, from its floor on.
#[derive(Default)]
struct Tail {
    /// Task numbers and names by envelope id, for the ids looked for; `None` for the number
    /// of a task that came back to its lane after an attempt (its number is not the one it
    /// landed at).
    found: HashMap<String, (Option<i64>, String)>,
    /// Numbers (and names) between the floor and the tail with no task, that neither an answer
    /// of this publish nor a task back at the tail after a retry explains.
    missing: Vec<(i64, String)>,
}

impl Queue {
    /// Sends a read of the tails of `lanes` now, before whatever is sent after it; the future
    /// answers them as floors (a lane not made yet has 0).
    pub(super) fn read_floors<'a>(
        &'a self,
        lanes: &[Lane],
    ) -> impl Future<Output = Result<Floors>> + Send + 'a {
        let mut lanes: Vec<Lane> = lanes.to_vec();
        lanes.sort();
        lanes.dedup();
        let paths: Vec<String> = lanes.iter().map(|l| self.layout().lane_tasks(l)).collect();
        let mut reader = self.client().new_multi_reader();
        let sent = super::reads::add_get_data(&mut reader, &paths).map(|()| reader.commit());
        async move {
            let read = sent?.await;
            let results = read.map_err(|e| Error::zk("get", paths.join(","), e))?;
            let tail = |result| match result {
                zookeeper_client::MultiReadResult::Data { stat, .. } => {
                    super::probe::tail_of(&stat)
                }
                _ => 0,
            };
            Ok(lanes
                .into_iter()
                .zip(results.into_iter().map(tail))
                .collect())
        }
    }

    /// What became of `doubts`, published after `floors` were read (a lane missing from them
    /// is searched from its head), their answers lost. `answered` holds the names of the tasks
    /// this publish was answered for: a missing number that is one of them is explained.
    pub(super) async fn landed(
        &self,
        doubts: &[&Envelope],
        floors: &Floors,
        answered: &HashSet<String>,
    ) -> Result<Vec<Fate>> {
        // Everything the ensemble committed is on this server before anything is read.
        let root = self.layout().root().to_string();
        (self.client().sync(&root).await).map_err(|e| Error::zk("sync", &root, e))?;
        let wanted: HashSet<&str> = doubts.iter().map(|e| e.id.as_str()).collect();
        let mut lanes: Vec<Lane> = doubts.iter().map(|e| e.lane()).collect();
        lanes.sort();
        lanes.dedup();
        let mut tails = HashMap::new();
        for lane in lanes {
            let tail = self.search_tail(&lane, floors.get(&lane), &wanted, answered);
            let tail = tail.await?;
            tails.insert(lane, tail);
        }
        let mut fates = Vec::with_capacity(doubts.len());
        for envelope in doubts {
            let lane = envelope.lane();
            let found = tails.get(&lane).and_then(|t| t.found.get(&envelope.id));
            fates.push(match found {
                Some((_, task)) => {
                    self.name_key_of(envelope, task).await?;
                    Fate::Landed(Published::Created {
                        id: envelope.id.clone(),
                        task: task.clone(),
                    })
                }
                None => match self.landed_elsewhere(envelope).await? {
                    Some(published) => Fate::Landed(published),
                    None => Fate::NotLanded,
                },
            });
        }
        // A lane that lost tasks meanwhile: where they went is looked for, and what is left
        // unexplained may have been items not found.
        for (lane, tail) in &tails {
            let open: HashSet<&str> = (doubts.iter().zip(&fates))
                .filter(|(e, fate)| matches!(fate, Fate::NotLanded) && e.lane() == *lane)
                .map(|(e, _)| e.id.as_str())
                .collect();
            if tail.missing.is_empty() || open.is_empty() {
                continue;
            }
            let (ours, unexplained) = self.explain_missing(&tail.missing, &open).await?;
            for (envelope, fate) in doubts.iter().zip(fates.iter_mut()) {
                if let Some(task) = ours.get(&envelope.id).filter(|_| envelope.lane() == *lane) {
                    *fate = Fate::Landed(Published::Created {
                        id: envelope.id.clone(),
                        task: task.clone(),
                    });
                }
            }
            let in_lane: Vec<usize> = (0..doubts.len())
                .filter(|&i| doubts[i].lane() == *lane)
                .collect();
            judge_open(doubts, &mut fates, &in_lane, &tail.found, &unexplained);
        }
        Ok(fates)
    }

    /// The tasks of `lane` from `floor` (its head when unknown) to its tail: those with the ids
    /// `wanted`, and the numbers with no task that are not among `answered`.
    async fn search_tail(
        &self,
        lane: &Lane,
        floor: Option<&i64>,
        wanted: &HashSet<&str>,
        answered: &HashSet<String>,
    ) -> Result<Tail> {
        let path = self.layout().lane_tasks(lane);
        let stat = match self.client().check_stat(&path).await {
            Ok(Some(stat)) => stat,
            // A lane that does not exist holds nothing.
            Ok(None) | Err(zookeeper_client::Error::NoNode) => return Ok(Tail::default()),
            Err(e) => return Err(Error::zk("stat", path, e)),
        };
        let end = super::probe::tail_of(&stat);
        let from = match floor {
            Some(floor) => *floor,
            None => (self.read_head_in(lane).await?).map_or(0, |head| head.data.next),
        };
        let names: Vec<String> = (from..end)
            .map(|n| layout::lane_task_name(lane, n))
            .collect();
        let reads = names.chunks(SEARCH_CHUNK).map(|chunk| {
            let paths: Vec<String> = chunk.iter().map(|n| format!("{path}/{n}")).collect();
            async move { self.read_paths(&paths).await }
        });
        let mut tail = Tail::default();
        // Names tasks had before a retry brought them back to the tail: not missing.
        let mut moved = HashSet::new();
        let mut numbered = (from..end).zip(&names);
        for chunk in futures::future::join_all(reads).await {
            for read in chunk? {
                let (number, name) = numbered.next().expect("a read per name");
                match read {
                    Some((body, _)) => {
                        let Body::Envelope(e) = task::parse(&body) else {
                            continue;
                        };
                        moved.extend(e.moved_from.iter().cloned());
                        if wanted.contains(e.id.as_str()) {
                            let first = e.moved_from.is_empty() && e.attempts == 0;
                            let at = (first.then_some(number), name.clone());
                            tail.found.entry(e.id).or_insert(at);
                        }
                    }
                    None if !answered.contains(name) => tail.missing.push((number, name.clone())),
                    None => {}
                }
            }
        }
        tail.missing.retain(|(_, name)| !moved.contains(name));
        Ok(tail)
    }

    /// A keyed item found in its lane: its key named with its task, when that write was lost.
    async fn name_key_of(&self, envelope: &Envelope, task: &str) -> Result<()> {
        let Some(key) = keyed(envelope) else {
            return Ok(());
        };
        let write = self.keyed_write(envelope, key)?;
        self.name_key(&write, task).await
    }

    /// An item not found in its lane that landed all the same: debounced (pending under its
    /// key), a child (waiting for its parents, or dead with one), keyed (its key names it).
    async fn landed_elsewhere(&self, envelope: &Envelope) -> Result<Option<Published>> {
        let id = &envelope.id;
        if let Some(debounce) = &envelope.debounce {
            let path = self.layout().debounced(&debounce.key);
            let Some((data, _)) = self.read_path(&path).await? else {
                return Ok(None);
            };
            let pending = matches!(task::parse(&data), Body::Envelope(e) if e.id == *id);
            return Ok(pending.then(|| Published::Debounced {
                id: id.clone(),
                key: debounce.key.clone(),
                replaced: None,
            }));
        }
        if !envelope.after.is_empty() {
            return self.child_found(id).await;
        }
        let Some(key) = keyed(envelope) else {
            return Ok(None);
        };
        let path = self.layout().key(key);
        let Some((data, _)) = self.read_path(&path).await? else {
            return Ok(None);
        };
        let ours = serde_json::from_slice::<KeyData>(&data).is_ok_and(|k| k.id == *id);
        if !ours {
            return Ok(None);
        }
        // Its task left its lane already (claimed and moved, completed): as the key says.
        Ok(match self.existing(&path).await? {
            Some(Published::Existing {
                task: Some(task), ..
            }) => Some(Published::Created {
                id: id.clone(),
                task,
            }),
            other => other,
        })
    }

    /// Looks for the tasks `missing` (names) where a task goes when it leaves its lane: its
    /// completion record, `delayed/`, the dead letters. Returns the names of those whose ids
    /// are among `open`, by id, and the missing names found nowhere.
    async fn explain_missing(
        &self,
        missing: &[(i64, String)],
        open: &HashSet<&str>,
    ) -> Result<(HashMap<String, String>, Vec<(i64, String)>)> {
        let mut left: HashSet<&str> = missing.iter().map(|(_, name)| name.as_str()).collect();
        let mut ours = HashMap::new();
        // Completed, with a record kept (KEEP_DONE): the record names the task and its id.
        let done = self.layout().done();
        let kept = match self.client().list_children(&done).await {
            Ok(buckets) => buckets,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Err(Error::zk("list", done, e)),
        };
        for (_, name) in missing.iter().filter(|_| !kept.is_empty()) {
            if let Some(record) = self.find_done(name).await? {
                if open.contains(record.id.as_str()) {
                    ours.insert(record.id, name.clone());
                }
                left.remove(name.as_str());
            }
        }
        // Waiting out a backoff or a delay: `delayed/<bucket>/<due>~<name>`.
        if !left.is_empty() {
            for bucket in self.buckets().await? {
                for (_, node) in self.waiting_in(bucket).await? {
                    let Some((_, name)) = super::delay::parse_waiting(&node) else {
                        continue;
                    };
                    if !left.contains(name) {
                        continue;
                    }
                    let path = format!("{}/{node}", self.layout().delay_bucket(bucket));
                    if let Some((body, _)) = self.read_path(&path).await? {
                        explained(name, &body, open, &mut ours);
                        left.remove(name);
                    }
                }
            }
        }
        // Among the dead letters: named after the task (with a suffix when the name was taken).
        if !left.is_empty() {
            let dead = self.layout().dead();
            let letters = match self.client().list_children(&dead).await {
                Ok(letters) => letters,
                Err(zookeeper_client::Error::NoNode) => Vec::new(),
                Err(e) => return Err(Error::zk("list", dead, e)),
            };
            for letter in letters {
                let name = letter
                    .split_once(layout::DEAD_NAME_SUFFIX)
                    .map_or(letter.as_str(), |(name, _)| name);
                if !left.contains(name) {
                    continue;
                }
                let path = self.layout().dead_letter(&letter);
                if let Some((data, _)) = self.read_path(&path).await? {
                    let record: serde_json::Value =
                        serde_json::from_slice(&data).unwrap_or_default();
                    let body = serde_json::to_vec(&record["body"]).unwrap_or_default();
                    explained(name, &body, open, &mut ours);
                    left.remove(name);
                }
            }
        }
        let unexplained = (missing.iter())
            .filter(|(_, name)| left.contains(name.as_str()))
            .cloned()
            .collect();
        Ok((ours, unexplained))
    }
}

/// The fates of the items of one lane (`in_lane`: their indices in `doubts`, in the order they
/// were sent) that were not found, when the lane lost tasks nothing explains (`gaps`: their
/// numbers and names, in order) between the floor and the tail; `found`: the numbers of the
/// items that were found (where they landed), by id.
///
/// ZooKeeper applies a session's requests in the order they were sent, so the plain creates
/// of one lane that landed did so in their order, at rising numbers: a run of plain items not
/// found, between found ones at `lo` and `hi`, all landed (at numbers in between, gaps since:
/// named when there are as many gaps as items); one after the last found landed only in part,
/// a first few, each at a gap past `lo`: as many as there are such gaps are unknown, the rest
/// did not land. Any other item not found (keyed, debounced, with `after`, a batch member) may
/// be any gap: unknown.
fn judge_open(
    doubts: &[&Envelope],
    fates: &mut [Fate],
    in_lane: &[usize],
    found: &HashMap<String, (Option<i64>, String)>,
    gaps: &[(i64, String)],
) {
    if gaps.is_empty() {
        return;
    }
    let open = |fates: &[Fate], i: usize| matches!(fates[i], Fate::NotLanded);
    for &i in in_lane {
        if open(fates, i) && !plain(doubts[i]) {
            fates[i] = Fate::Unknown(gone(gaps));
        }
    }
    let mut lo = i64::MIN;
    let mut run: Vec<usize> = Vec::new();
    for &i in in_lane.iter().filter(|&&i| plain(doubts[i])) {
        if open(fates, i) {
            run.push(i);
            continue;
        }
        // Landed where it is no more (found elsewhere, or back after an attempt): its number
        // is not known, and the run goes on past it.
        let Some(&(Some(hi), _)) = found.get(&doubts[i].id) else {
            continue;
        };
        let between: Vec<&(i64, String)> =
            gaps.iter().filter(|(n, _)| lo < *n && *n < hi).collect();
        for (k, &j) in run.iter().enumerate() {
            fates[j] = match between.len() == run.len() {
                true => Fate::Landed(Published::Created {
                    id: doubts[j].id.clone(),
                    task: between[k].1.clone(),
                }),
                false => Fate::Unknown(format!(
                    "it landed (a line sent after it did) and left its lane before it could be \
                     found, as {} other task(s) did: which task it was cannot be told",
                    between.len().saturating_sub(1)
                )),
            };
        }
        run.clear();
        lo = hi;
    }
    let after: Vec<(i64, String)> = gaps.iter().filter(|(n, _)| lo < *n).cloned().collect();
    for &j in run.iter().take(after.len()) {
        fates[j] = Fate::Unknown(gone(&after));
    }
}

/// Why an item not found may have landed all the same: its lane lost `gaps` meanwhile.
fn gone(gaps: &[(i64, String)]) -> String {
    let first = gaps.first().map_or("", |(_, name)| name.as_str());
    format!(
        "its answer was lost with the connection, it is not in its lane, and {} task(s) left \
         the lane meanwhile that no completion record, waiting task or dead letter explains \
         ({first} first): one may have been it, run and completed already",
        gaps.len()
    )
}

/// Whether publishing `envelope` is one create in its lane, sent as the window starts.
fn plain(envelope: &Envelope) -> bool {
    envelope.after.is_empty()
        && envelope.debounce.is_none()
        && envelope.idempotency_key.is_none()
        && envelope.batch.is_none()
}

/// A task named `name` with `body`, found where tasks go when they leave their lane: kept in
/// `ours` when its id is among `open`.
fn explained(name: &str, body: &[u8], open: &HashSet<&str>, ours: &mut HashMap<String, String>) {
    if let Body::Envelope(e) = task::parse(body)
        && open.contains(e.id.as_str())
    {
        ours.insert(e.id, name.to_string());
    }
}

/// The idempotency key a publish of `envelope` takes (a debounced one's key is not taken).
fn keyed(envelope: &Envelope) -> Option<&str> {
    match envelope.debounce {
        None => envelope.idempotency_key.as_deref(),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelopes(n: usize) -> Vec<Envelope> {
        (0..n)
            .map(|i| Envelope::new("t", serde_json::json!({ "n": i })))
            .collect()
    }

    fn gaps(numbers: &[i64]) -> Vec<(i64, String)> {
        numbers
            .iter()
            .map(|n| (*n, format!("task-{n:010}")))
            .collect()
    }

    /// Items 0..n of one lane with `found` of them found at numbers, the others not.
    fn judge(items: &[Envelope], found: &[(usize, i64)], missing: &[i64]) -> Vec<Fate> {
        let doubts: Vec<&Envelope> = items.iter().collect();
        let mut fates: Vec<Fate> = (0..items.len()).map(|_| Fate::NotLanded).collect();
        let mut at = HashMap::new();
        for &(i, n) in found {
            let name = format!("task-{n:010}");
            at.insert(items[i].id.clone(), (Some(n), name.clone()));
            fates[i] = Fate::Landed(Published::Created {
                id: items[i].id.clone(),
                task: name,
            });
        }
        let in_lane: Vec<usize> = (0..items.len()).collect();
        judge_open(&doubts, &mut fates, &in_lane, &at, &gaps(missing));
        fates
    }

    fn kinds(fates: &[Fate]) -> String {
        (fates.iter())
            .map(|f| match f {
                Fate::Landed(_) => 'L',
                Fate::NotLanded => 'n',
                Fate::Unknown(_) => '?',
            })
            .collect()
    }

    #[test]
    fn without_gaps_what_was_not_found_did_not_land() {
        let items = envelopes(4);
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 11)], &[])), "LLnn");
    }

    #[test]
    fn a_line_sent_before_one_that_landed_landed_too_at_the_gap_between() {
        let items = envelopes(4);
        let fates = judge(&items, &[(0, 10), (2, 12)], &[11]);
        assert_eq!(kinds(&fates), "LLLn");
        let Fate::Landed(Published::Created { task, .. }) = &fates[1] else {
            panic!("{fates:?}");
        };
        assert_eq!(task, "task-0000000011");
        // More gaps between than lines: landed, but which task it was cannot be told.
        let fates = judge(&items, &[(0, 10), (2, 14)], &[11, 12]);
        assert_eq!(kinds(&fates), "L?Ln");
        // From the floor on, as well.
        assert_eq!(kinds(&judge(&items, &[(1, 11)], &[10])), "LLnn");
    }

    #[test]
    fn past_the_last_line_found_as_many_lines_as_gaps_are_unknown_and_the_rest_did_not_land() {
        let items = envelopes(5);
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[11])), "L?nnn");
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[11, 13])), "L??nn");
        // A gap below the last line found is no line's after it.
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 12)], &[11])), "LLnnn");
    }

    #[test]
    fn a_keyed_line_not_found_may_be_any_gap() {
        let mut items = envelopes(3);
        items[2].idempotency_key = Some("k".into());
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 12)], &[11])), "LL?");
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[])), "Lnn");
    }
}
