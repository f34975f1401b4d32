//! Finding what landed of a publish whose answers were lost with its connection (a leader
//! election, a dropped link): a create whose reply is lost may or may not have been applied.
//! This file reads; each item's fate from what was read is `landed/judge.rs` (pure).
//!
//! Every envelope carries an id, and a task lands at its lane's tail. So the tails of the lanes
//! a window publishes into are read in the same pipeline, before its creates (its *floors*:
//! ZooKeeper answers a session's requests in order, so every task the window makes has a number
//! at or above them). After a loss, once a session answers again, everything is read after a
//! `sync` (so that the server has every write the ensemble committed), in this order:
//!
//! 1. the *side stores* of the items in doubt: a debounced one's `debounce/<key>`, a child's
//!    `after/<id>` (and its dead letter), a keyed one's `keys/<key>`;
//! 2. then each lane, from its floor to its tail (the stat's, plus the head's `tail_offset`,
//!    and on past it while the numbers there hold tasks), looking for the ids in doubt, as
//!    tasks and as the places grouped tasks keep in their lanes. Other producers' tasks in
//!    that range are read and passed over.
//!
//! A task leaves a side store for its lane in one multi-op (a debounced publish that fires, a
//! child whose last parent settles), and its place is created with it: so whatever moves
//! between the two reads is seen in its lane, which is read second. An item in doubt
//!
//! - found in its lane (or its place) landed (a keyed one's key is named now, if its naming
//!   was lost too);
//! - debounced, landed when `debounce/<key>` holds its id. When the key holds another
//!   publish's envelope: if the key's node was not written since before the window (its
//!   `mzxid`, read with the floors), the item did not land and is sent again (the one there is
//!   older); if it was, the item landed and a later publish replaced it, or a publish as late
//!   got in first: it is answered as replaced and never sent again (it would overwrite a newer
//!   publish);
//! - with `after`, landed when it waits under `after/<id>` or died;
//! - with an idempotency key, landed when its key names its id (its task's name as the key
//!   says, or as found; a key never named, and a task not found, leave the name unknown: it
//!   is [`Fate::Unnamed`]); a key another task has makes a resend harmless (it is answered
//!   with that task);
//! - else did not land, and is sent again: unless numbers between the floor and the tail are
//!   missing that nothing explains. A consumer may have taken the very task and completed it
//!   already, so a missing number is looked for in the completion records (`KEEP_DONE`), in
//!   `delayed/` and among the dead letters (a letter whose body cannot be read explains
//!   nothing); one found nowhere leaves the items of its lane that were not found
//!   [`Fate::Unknown`]: sending them again could make a twin.
//!
//! The rest did not land and are sent again, each once, after what landed. A number between floor
//! and tail with no task is one a consumer took: it is looked for in the completion records,
//! `delayed/` and the dead letters (a letter's body as the record keeps it: nested JSON, text or
//! base64; a letter that kept only its body's size and digest, or a body that cannot be read,
//! explains nothing); one found nowhere may have been an item not found. Plain creates sent on one
//! connection land in the order they were sent, so an item sent before one that was found, on the
//! same loss, landed too (named when the missing numbers between match the items), and of those
//! after the last one found, at most as many as there are unexplained numbers may have landed:
//! those are *unknown* (reported so, never sent again; the CLI exits 1 naming the first), the
//! others are sent again. Items of different losses tell nothing of each other. An item of another
//! kind not found in a lane that lost tasks is unknown.
//!
//! An all-or-nothing batch (`publish_batch_with`, the HTTP publish) is one multi-op, so it is
//! judged whole: when any item is found, every item landed (one not found is named by the
//! consecutive numbers its batch took in its lane, counted from one found there, or from the
//! lane's unexplained missing numbers when they are exactly as many; else as its side store says,
//! else `Unnamed`); when none is, an item that cannot be told makes all of it unknown, and only a
//! batch none of whose items was found, with nothing unknown, is sent again, whole. Never a part.
//!
//! An outage ends once nothing is pending: the next failure has a budget of its own. The HTTP
//! publish's budget is the invocation's time left (its deadline on Lambda, `TIME_BUDGET_MS` from
//! the request's arrival on Vercel) less `DEADLINE_MARGIN_MS`, and bounds the search as well.
//!
//! # Costs
//!
//! Cost when nothing is lost: one multi-read of the lanes' stats (and of the debounce keys' nodes)
//! per window (a round trip of its own for a lane's first window, and for a window with debounced
//! items). After a loss: one multi-read of the side stores, a stat and a
//! head read per lane, a read of each number from floor to tail (64 to a request) and one request
//! past it, and the places tasks go when numbers are missing.
//!
//! # Limits
//!
//! - **Order.** An item sent again lands after what landed of its window: a grouped item can end
//!   up behind a later item of its group that landed (and a throttled run's items behind later
//!   runs that were answered).
//! - **Batch members in a bulk publish.** A run of members of one batch goes in chunks, one
//!   multi-op after another; when the connection is lost under a later chunk, the earlier chunks'
//!   answers are lost with it, and a member not found in a lane that lost tasks is reported
//!   unknown, even one of a chunk that was never sent (the chunks' bounds are not known to the
//!   search).
//! - **An ordinary error in one run** (a parent unknown, a batch sealed) ends the window with that
//!   error, and the items other runs of the window left in doubt are not settled: their lines get
//!   no answer, and sending them again may make twins of those that landed.
//! - **Tagging losses** reads the session's state as each failure is seen: a publish whose task
//!   does not run between a loss and the client's reconnection and next loss (both before the
//!   first failure is looked at) could take two losses for one.

mod judge;

use std::collections::{HashMap, HashSet};
use std::future::Future;

use futures::FutureExt;
use zookeeper_client as zk;

use super::Queue;
use super::idempotency_keys::{KeyData, Published};
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::layout;
use crate::task::{self, Body, Envelope, StandsFor};
use judge::{batch_gone, debounced_answer, keyed};

recipe!(
    /// A publish whose answers were lost with its connection: what landed of it (`landed`).
    InDoubt,
    in_doubt
);

/// Numbers read in one request when a lane's tail is searched.
const SEARCH_CHUNK: usize = 64;

/// What a window is judged against after a lost connection, read before its writes: by lane, a
/// number below every task it makes (the lane's tail as read); by debounce key of its debounced
/// items, the `mzxid` of the key's pending node (`None`: nothing pending), which tells a key
/// rewritten since (by this window, or a later publish) from one that was not.
#[derive(Clone, Debug, Default)]
pub(super) struct Floors {
    lanes: HashMap<Lane, i64>,
    keys: HashMap<String, Option<i64>>,
}

impl Floors {
    pub(super) fn new() -> Self {
        Floors::default()
    }

    /// Whether `window`'s floors can be read along with its writes (pipelined): a floor is
    /// known for each of its lanes already (the pipelined read may only raise it), and it has
    /// no debounced item (whose key is read before the window, on its own: a read whose answer
    /// is lost with the writes' leaves no older one to go by).
    pub(super) fn pipelinable(&self, window: &[Envelope]) -> bool {
        window
            .iter()
            .all(|e| e.debounce.is_none() && self.lanes.contains_key(&e.lane()))
    }

    /// Takes the floors of a later read in: its lanes' (at or above those known), and only its
    /// keys' (an earlier window's would pass the writes made since).
    pub(super) fn update(&mut self, fresh: &Floors) {
        self.lanes
            .extend(fresh.lanes.iter().map(|(l, n)| (l.clone(), *n)));
        self.keys = fresh.keys.clone();
    }
}

/// What became of one item whose answer was lost.
#[derive(Debug)]
pub(super) enum Fate {
    /// It landed: its answer, as found.
    Landed(Published),
    /// Debounced, and its key holds another publish's envelope (`by`, its id) now, written
    /// since the item was sent: it landed and that publish replaced it, or that one got in
    /// first. `published` is its answer as a debounced publish.
    Replaced { published: Published, by: String },
    /// It landed, but its task left its lane before it could be found, under a name nothing
    /// tells: why.
    Unnamed(String),
    /// It did not land: it can be sent again.
    NotLanded,
    /// It may have landed and left its lane already: why it cannot be told.
    Unknown(String),
}

impl Fate {
    /// Whether it surely landed (found, or a side store names it).
    fn landed(&self) -> bool {
        matches!(self, Fate::Landed(_) | Fate::Unnamed(_))
    }
}

/// Tells apart the connection losses a window's failures came from. Every request in flight
/// on a connection fails with one error when the connection dies; a request sent after that
/// waits for the next connection, and fails with that one's loss, if any. Two items sent in
/// one order on one connection landed as a prefix of that order; on two connections, not
/// necessarily. So a failure is tagged with the loss it came from: the one before when the
/// session's state did not change since the failure before it was seen and the error is the
/// same, a new one otherwise (a reconnect between them changes the state).
pub(super) struct Losses {
    watcher: zk::StateWatcher,
    count: u64,
    last: Option<String>,
}

impl Losses {
    /// Tags the failures of requests sent on `queue` from now on.
    pub(super) fn new(queue: &Queue) -> Self {
        Losses {
            watcher: queue.client().state_watcher(),
            count: 0,
            last: None,
        }
    }

    /// The loss `error`, just seen, came from.
    pub(super) fn tag(&mut self, error: &Error) -> u64 {
        let mut changed = false;
        while self.watcher.changed().now_or_never().is_some() {
            changed = true;
        }
        let text = match error {
            Error::Zk { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        if changed || self.last.as_deref() != Some(text.as_str()) {
            self.count += 1;
            self.last = Some(text);
        }
        self.count
    }
}

/// What an item's side store said, read before its lane.
#[derive(Debug)]
enum Side {
    /// Neither debounced, nor a child, nor keyed.
    Nothing,
    /// Debounced: the id of the envelope pending under its key and the node's `mzxid`, `None`
    /// when none is pending.
    Pending(Option<(String, i64)>),
    /// A child: waiting under `after/<id>`, or dead under its blocked name; `None` otherwise.
    Child(Option<Published>),
    /// Keyed: its key's data, `None` when there is no key.
    Key(Option<KeyData>),
}

/// What the tail of one lane holds, from its floor on.
#[derive(Debug, Default)]
struct Tail {
    /// Task numbers and names by envelope id, for the ids looked for; `None` for the number
    /// of a task that came back to its lane after an attempt (its number is not the one it
    /// landed at).
    found: HashMap<String, (Option<i64>, String)>,
    /// Places (grouped tasks' turns, made with them) by the id they stand under, for the ids
    /// looked for: their names and what they stand for.
    places: HashMap<String, (String, StandsFor)>,
    /// Numbers (and names) between the floor and the tail with no task, that neither an answer
    /// of this publish nor a task back at the tail after a retry explains.
    missing: Vec<(i64, String)>,
}

/// Everything read about the items in doubt: their side stores, their lanes' tails, where the
/// numbers missing from those went.
#[derive(Debug, Default)]
struct Look {
    sides: Vec<Side>,
    tails: HashMap<Lane, Tail>,
    /// Items in doubt found where tasks go when they leave their lane: task names by id.
    elsewhere: HashMap<String, String>,
    /// By lane, the numbers missing that nothing explains.
    unexplained: HashMap<Lane, Vec<(i64, String)>>,
    /// By debounce key, its pending node's `mzxid` before the items were sent (`None`: none
    /// pending); keys not read before are missing.
    marks: HashMap<String, Option<i64>>,
}

impl<'q> InDoubt<'q> {
    /// Sends a read of the floors of `window` now, before whatever is sent after it: the tails
    /// of its lanes (a lane not made yet has 0) and the pending nodes of its debounce keys.
    pub(super) fn read_floors(
        self,
        window: &[Envelope],
    ) -> impl Future<Output = Result<Floors>> + Send + 'q {
        let mut lanes: Vec<Lane> = window.iter().map(Envelope::lane).collect();
        lanes.sort();
        lanes.dedup();
        let mut keys: Vec<String> = (window.iter())
            .filter_map(|e| Some(e.debounce.as_ref()?.key.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        let paths: Vec<String> = (lanes.iter())
            .map(|l| self.layout().lane_tasks(l))
            .chain(keys.iter().map(|k| self.layout().debounced(k)))
            .collect();
        let mut reader = self.0.client().new_multi_reader();
        let sent = super::reads::add_get_data(&mut reader, &paths).map(|()| reader.commit());
        async move {
            let read = sent?.await;
            let results = read.map_err(|e| Error::zk("get", paths.join(","), e))?;
            let mut results = results.into_iter();
            let stat = |result| match result {
                Some(zk::MultiReadResult::Data { stat, .. }) => Some(stat),
                _ => None,
            };
            let lanes = (lanes.into_iter())
                .map(|lane| {
                    let tail = stat(results.next()).map_or(0, |s| super::probe::tail_of(&s));
                    (lane, tail)
                })
                .collect();
            let keys = (keys.into_iter())
                .map(|key| (key, stat(results.next()).map(|s| s.mzxid)))
                .collect();
            Ok(Floors { lanes, keys })
        }
    }

    /// What became of `doubts`, published after `floors` were read (a lane missing from them
    /// is searched from its head), their answers lost; `losses` tags each with the connection
    /// loss it failed on ([`Losses`]). `answered` holds the names of the tasks this publish
    /// was answered for: a missing number that is one of them is explained.
    pub(super) async fn landed(
        self,
        doubts: &[&Envelope],
        losses: &[u64],
        floors: &Floors,
        answered: &HashSet<String>,
    ) -> Result<Vec<Fate>> {
        let look = self.look(doubts, floors, answered).await?;
        let fates = look.fates(doubts, losses);
        self.name_found_keys(doubts, &look, &fates).await?;
        Ok(fates)
    }

    /// What became of `batch`, published in one multi-op after `floors` were read, its answer
    /// lost: all of it landed or none did. So when any item is found, every item landed (each
    /// answered as found, its task's name worked out from the numbers its batch took when it
    /// left its lane, else [`Fate::Unnamed`]); when none is, and nothing is unknown, none did
    /// and the batch can be sent again whole ([`Fate::NotLanded`] for each); an item whose fate
    /// cannot be told makes every item's unknown. Debounced items whose keys hold other
    /// publishes (and nothing else) are answered replaced.
    pub(super) async fn landed_whole(
        self,
        batch: &[&Envelope],
        floors: &Floors,
        answered: &HashSet<String>,
    ) -> Result<Vec<Fate>> {
        let look = self.look(batch, floors, answered).await?;
        // One multi-op: one connection, one loss.
        let mut fates = look.fates(batch, &vec![0; batch.len()]);
        self.name_found_keys(batch, &look, &fates).await?;
        if let Some(first) = fates.iter().position(Fate::landed) {
            let found = batch[first].id.clone();
            let worked = look.worked_out(batch, &fates);
            for (i, fate) in fates.iter_mut().enumerate() {
                if fate.landed() || matches!(fate, Fate::Replaced { .. }) {
                    continue;
                }
                let envelope = batch[i];
                *fate = match (&worked[i], &look.sides[i]) {
                    (Some(task), _) => Fate::Landed(Published::Created {
                        id: envelope.id.clone(),
                        task: task.clone(),
                    }),
                    // A key another task has: answered with that task, as the batch did.
                    (None, Side::Key(Some(key))) if key.id != envelope.id => {
                        let path = self.layout().key(keyed(envelope).unwrap_or_default());
                        match self.idempotency_keys().existing(&path).await? {
                            Some(existing) => Fate::Landed(existing),
                            None => Fate::Unnamed(batch_gone(&found)),
                        }
                    }
                    // Fired or withdrawn since.
                    (None, Side::Pending(_)) => Fate::Landed(debounced_answer(envelope)),
                    _ => Fate::Unnamed(batch_gone(&found)),
                };
            }
            return Ok(fates);
        }
        if let Some(first) = fates.iter().position(|f| matches!(f, Fate::Unknown(_))) {
            let Fate::Unknown(why) = &fates[first] else {
                unreachable!("an unknown fate")
            };
            let why = format!(
                "its batch (one multi-op: all of it landed or none did) cannot be told, as its \
                 item {} (id {}) cannot: {why}",
                first + 1,
                batch[first].id
            );
            return Ok(batch.iter().map(|_| Fate::Unknown(why.clone())).collect());
        }
        if fates.iter().any(|f| matches!(f, Fate::NotLanded)) {
            return Ok(batch.iter().map(|_| Fate::NotLanded).collect());
        }
        Ok(fates)
    }

    /// Reads what tells the fates of `doubts` (see the module documentation): side stores
    /// first, then lanes, then where the numbers missing from them went.
    async fn look(
        self,
        doubts: &[&Envelope],
        floors: &Floors,
        answered: &HashSet<String>,
    ) -> Result<Look> {
        // Everything the ensemble committed is on this server before anything is read.
        let root = self.layout().root().to_string();
        (self.client().sync(&root).await).map_err(|e| Error::zk("sync", &root, e))?;
        // 1. Side stores: a task moves from one to its lane in one multi-op, so one that moves
        // after this read is in its lane when the lane is read below.
        let sides = self.read_sides(doubts).await?;
        // 2. The lanes.
        let wanted: HashSet<&str> = doubts.iter().map(|e| e.id.as_str()).collect();
        let mut lanes: Vec<Lane> = doubts.iter().map(|e| e.lane()).collect();
        lanes.sort();
        lanes.dedup();
        let mut tails = HashMap::new();
        for lane in lanes {
            let floor = floors.lanes.get(&lane).copied();
            let tail = self.search_tail(&lane, floor, &wanted, answered);
            let tail = tail.await?;
            tails.insert(lane, tail);
        }
        // 3. A lane that lost tasks meanwhile: where they went is looked for, and what is left
        // unexplained may have been items not found.
        let mut elsewhere = HashMap::new();
        let mut unexplained = HashMap::new();
        for (lane, tail) in &tails {
            let open: HashSet<&str> = (doubts.iter())
                .filter(|e| e.lane() == *lane && !tail.found.contains_key(&e.id))
                .map(|e| e.id.as_str())
                .collect();
            if tail.missing.is_empty() || open.is_empty() {
                continue;
            }
            let (ours, left) = self.explain_missing(&tail.missing, &open).await?;
            elsewhere.extend(ours);
            unexplained.insert(lane.clone(), left);
        }
        Ok(Look {
            sides,
            tails,
            elsewhere,
            unexplained,
            marks: floors.keys.clone(),
        })
    }

    /// The side store of each of `doubts`, as it is now (see [`Side`]).
    async fn read_sides(self, doubts: &[&Envelope]) -> Result<Vec<Side>> {
        // Debounce keys and idempotency keys in one multi-read; children one by one.
        let paths: Vec<Option<String>> = (doubts.iter())
            .map(|e| match (&e.debounce, keyed(e)) {
                (Some(debounce), _) => Some(self.layout().debounced(&debounce.key)),
                (None, Some(key)) => Some(self.layout().key(key)),
                (None, None) => None,
            })
            .collect();
        let asked: Vec<String> = paths.iter().flatten().cloned().collect();
        let mut read = self.read_paths(&asked).await?.into_iter();
        let mut sides = Vec::with_capacity(doubts.len());
        for (envelope, path) in doubts.iter().zip(&paths) {
            let (data, stat) = match path {
                Some(_) => read.next().expect("a read per path").unzip(),
                None => (None, None),
            };
            sides.push(if envelope.debounce.is_some() {
                let pending = data.zip(stat);
                Side::Pending(pending.map(|(d, s)| (super::debounce::pending_id(&d), s.mzxid)))
            } else if !envelope.after.is_empty() {
                Side::Child(self.dependencies().child_found(&envelope.id).await?)
            } else if path.is_some() {
                Side::Key(data.and_then(|d| serde_json::from_slice::<KeyData>(&d).ok()))
            } else {
                Side::Nothing
            });
        }
        Ok(sides)
    }

    /// The tasks of `lane` from `floor` (its head when unknown) to its tail: those with the ids
    /// `wanted`, the places standing under them, and the numbers with no task that are not
    /// among `answered`. The tail is the lane's stat's plus the head's `tail_offset` (a server
    /// whose numbering jumped), and the numbers past it are read on while they hold tasks.
    async fn search_tail(
        self,
        lane: &Lane,
        floor: Option<i64>,
        wanted: &HashSet<&str>,
        answered: &HashSet<String>,
    ) -> Result<Tail> {
        let path = self.layout().lane_tasks(lane);
        let (stat, head) = futures::join!(
            self.client().check_stat(&path),
            self.probes().read_head_in(lane)
        );
        let stat = match stat {
            Ok(Some(stat)) => stat,
            // A lane that does not exist holds nothing.
            Ok(None) | Err(zookeeper_client::Error::NoNode) => return Ok(Tail::default()),
            Err(e) => return Err(Error::zk("stat", path, e)),
        };
        let head = head?;
        let offset = head.as_ref().map_or(0, |h| h.data.tail_offset.max(0));
        let end = super::probe::tail_of(&stat) + offset;
        let from = match floor {
            Some(floor) => floor,
            None => head.map_or(0, |head| head.data.next),
        };
        let mut scan = Scan::new(wanted);
        let read = |numbers: std::ops::Range<i64>| {
            let names: Vec<(i64, String)> = numbers
                .map(|n| (n, layout::lane_task_name(lane, n)))
                .collect();
            let path = &path;
            async move {
                let reads = names.chunks(SEARCH_CHUNK).map(|chunk| {
                    let paths: Vec<String> =
                        chunk.iter().map(|(_, n)| format!("{path}/{n}")).collect();
                    async move { self.read_paths(&paths).await }
                });
                let mut read = Vec::with_capacity(names.len());
                for chunk in futures::future::join_all(reads).await {
                    read.extend(chunk?);
                }
                Ok::<_, Error>(names.into_iter().zip(read))
            }
        };
        for ((number, name), read) in read(from..end).await? {
            scan.take(number, name, read.map(|(body, _)| body));
        }
        // Past the tail: on while a chunk holds a task.
        let mut next = end.max(from);
        loop {
            let before = scan.highest;
            let chunk = next..next + SEARCH_CHUNK as i64;
            for ((number, name), read) in read(chunk).await? {
                scan.take(number, name, read.map(|(body, _)| body));
            }
            if scan.highest == before {
                break;
            }
            next += SEARCH_CHUNK as i64;
        }
        Ok(scan.into_tail(end, answered))
    }

    /// Names the keys of keyed items found in their lanes whose keys were read unnamed (their
    /// naming lost with the connection too).
    async fn name_found_keys(
        self,
        doubts: &[&Envelope],
        look: &Look,
        fates: &[Fate],
    ) -> Result<()> {
        for ((envelope, side), fate) in doubts.iter().zip(&look.sides).zip(fates) {
            let (Side::Key(Some(key)), Fate::Landed(Published::Created { task, .. })) =
                (side, fate)
            else {
                continue;
            };
            if key.id != envelope.id || key.task.is_some() {
                continue;
            }
            let Some(name) = keyed(envelope) else {
                continue;
            };
            let write = self.idempotency_keys().keyed_write(envelope, name)?;
            self.idempotency_keys().name_key(&write, task).await?;
        }
        Ok(())
    }

    /// Looks for the tasks `missing` (names) where a task goes when it leaves its lane: its
    /// completion record, `delayed/`, the dead letters. Returns the names of those whose ids
    /// are among `open`, by id, and the missing names nothing explains: found nowhere, or
    /// found with a body that cannot be read (a dead letter that kept only its body's digest).
    async fn explain_missing(
        self,
        missing: &[(i64, String)],
        open: &HashSet<&str>,
    ) -> Result<(HashMap<String, String>, Vec<(i64, String)>)> {
        let mut left: HashSet<&str> = missing.iter().map(|(_, name)| name.as_str()).collect();
        let mut ours = HashMap::new();
        // What a body found for the task `name` says; explained unless it cannot be read.
        let judge = |name: &str,
                     body: Option<&[u8]>,
                     left: &mut HashSet<&str>,
                     ours: &mut HashMap<String, String>| {
            match body.map(whose) {
                Some(Whose::Id(id)) => {
                    if open.contains(id.as_str()) {
                        ours.insert(id, name.to_string());
                    }
                    left.remove(name);
                }
                Some(Whose::Foreign) => {
                    left.remove(name);
                }
                // It may be one of ours: left unexplained.
                Some(Whose::Unreadable) | None => {}
            }
        };
        // Ended, and kept by a feature (a completion record, with KEEP_DONE): what it kept
        // names the task and its id.
        let names: Vec<String> = missing.iter().map(|(_, name)| name.clone()).collect();
        let found = self.features().find_ended(&self.site(), &names).await?;
        for ((_, name), ended) in missing.iter().zip(found) {
            let Some(ended) = ended else { continue };
            if open.contains(ended.id.as_str()) {
                ours.insert(ended.id, name.clone());
            }
            left.remove(name.as_str());
        }
        // Waiting out a backoff or a delay: `delayed/<bucket>/<due>~<name>`.
        if !left.is_empty() {
            for bucket in self.delays().buckets().await? {
                for (_, node) in self.delays().waiting_in(bucket).await? {
                    let Some((_, name)) = super::delay::parse_waiting(&node) else {
                        continue;
                    };
                    let Some(&name) = left.get(name) else {
                        continue;
                    };
                    let path = format!("{}/{node}", self.layout().delay_bucket(bucket));
                    if let Some((body, _)) = self.read_path(&path).await? {
                        judge(name, Some(&body), &mut left, &mut ours);
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
                let Some(&name) = left.get(name) else {
                    continue;
                };
                let path = self.layout().dead_letter(&letter);
                if let Some((data, _)) = self.read_path(&path).await? {
                    judge(name, letter_body(&data).as_deref(), &mut left, &mut ours);
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

/// Finds the ids looked for in what a lane's numbers hold.
struct Scan<'w> {
    wanted: &'w HashSet<&'w str>,
    tail: Tail,
    /// Numbers (and names) that hold nothing.
    empty: Vec<(i64, String)>,
    /// Names tasks had before a retry brought them back to the tail: not missing.
    moved: HashSet<String>,
    /// The highest number that holds a task.
    highest: i64,
}

impl<'w> Scan<'w> {
    fn new(wanted: &'w HashSet<&'w str>) -> Self {
        Scan {
            wanted,
            tail: Tail::default(),
            empty: Vec::new(),
            moved: HashSet::new(),
            highest: i64::MIN,
        }
    }

    /// What number `number` (named `name`) holds: `body`, or nothing.
    fn take(&mut self, number: i64, name: String, body: Option<Vec<u8>>) {
        let Some(body) = body else {
            self.empty.push((number, name));
            return;
        };
        self.highest = self.highest.max(number);
        match task::parse(&body) {
            Body::Envelope(e) => {
                self.moved.extend(e.moved_from.iter().cloned());
                if self.wanted.contains(e.id.as_str()) {
                    let first = e.moved_from.is_empty() && e.attempts == 0;
                    let at = (first.then_some(number), name);
                    self.tail.found.entry(e.id).or_insert(at);
                }
            }
            Body::Place(place) if self.wanted.contains(place.id.as_str()) => {
                let entry = (name, place.stands_for);
                self.tail.places.entry(place.id).or_insert(entry);
            }
            _ => {}
        }
    }

    /// The tail: the numbers that hold nothing below `end` (the lane's tail as read) or below
    /// a task past it are missing, unless `answered` (or a task moved since) explains them.
    fn into_tail(mut self, end: i64, answered: &HashSet<String>) -> Tail {
        let limit = end.max(self.highest.saturating_add(1));
        self.tail.missing = (self.empty.into_iter())
            .filter(|(n, name)| {
                *n < limit && !answered.contains(name) && !self.moved.contains(name)
            })
            .collect();
        self.tail
    }
}

/// Whose task a body found where tasks go is.
#[derive(Debug, PartialEq, Eq)]
enum Whose {
    /// An envelope's, with this id.
    Id(String),
    /// Another producer's: plain JSON, which no publish of ours writes.
    Foreign,
    /// It cannot be read: it may be one of ours.
    Unreadable,
}

fn whose(body: &[u8]) -> Whose {
    match task::parse(body) {
        Body::Envelope(e) => Whose::Id(e.id),
        Body::Place(_) | Body::Plain(_) => Whose::Foreign,
        Body::Poison(_) => Whose::Unreadable,
    }
}

/// The body a dead-letter record (`data`) keeps, as its task had it: nested JSON (`body`),
/// text (`body_text`) or bytes (`body_base64`); `None` when the record cannot be read or kept
/// only the body's size and digest (`body_omitted`).
fn letter_body(data: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    // A record nests its body one level deeper than the body: read without serde_json's own
    // depth limit, as bodies are.
    let record = task::json::parse(std::str::from_utf8(data).ok()?).ok()?;
    if let Some(body) = record.get("body") {
        return serde_json::to_vec(body).ok();
    }
    if let Some(text) = record.get("body_text").and_then(|t| t.as_str()) {
        return Some(text.as_bytes().to_vec());
    }
    let encoded = record.get("body_base64").and_then(|b| b.as_str())?;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead-letter record of `body`, as a consumer builds it.
    fn letter(body: &[u8]) -> Vec<u8> {
        let about = serde_json::json!({"task": "task-0000000007", "reason": "cancelled"});
        let (_, bytes) = super::super::record::build_record(about, body);
        bytes
    }

    #[test]
    fn a_dead_letter_tells_whose_task_it_was_however_it_keeps_the_body() {
        let envelope = Envelope::new("t", serde_json::json!({"n": 1}));
        let id = Whose::Id(envelope.id.clone());
        let body = envelope.to_bytes().unwrap();
        // Nested JSON.
        assert_eq!(letter_body(&letter(&body)).map(|b| whose(&b)), Some(id));
        // Nested too deep to nest once more: kept as text.
        let mut payload = serde_json::json!(1);
        for _ in 0..task::json::MAX_DEPTH - 1 {
            payload = serde_json::json!([payload]);
        }
        let deep = Envelope::new("t", payload);
        let record = letter(&deep.to_bytes().unwrap());
        let read: serde_json::Value =
            task::json::parse(std::str::from_utf8(&record).unwrap()).unwrap();
        assert!(read.get("body_text").is_some(), "kept as text");
        let body = letter_body(&record).expect("a body");
        assert_eq!(whose(&body), Whose::Id(deep.id.clone()));
        // Bytes that are not UTF-8: kept in base64, read back, and not an envelope.
        let record = letter(&[0xff, 0xfe, b'{']);
        assert_eq!(
            letter_body(&record).as_deref(),
            Some(&[0xff, 0xfe, b'{'][..])
        );
        assert_eq!(whose(&[0xff, 0xfe, b'{']), Whose::Unreadable);
        // A body too large to keep: only its digest, which tells nothing.
        let huge = Envelope::new("t", serde_json::json!("x".repeat(1_100_000)));
        let record = letter(&serde_json::to_vec(&huge).unwrap());
        assert!(String::from_utf8_lossy(&record).contains("body_omitted"));
        assert_eq!(letter_body(&record), None);
        // Another producer's plain JSON is not ours.
        assert_eq!(whose(br#"{"job": 7}"#), Whose::Foreign);
    }
}
