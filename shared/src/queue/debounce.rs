//! Debounced publishing. A publish with a debounce key writes its envelope to `debounce/<key>`:
//! created when the key has nothing pending, else rewritten at the version read (the last
//! publish wins, and ZooKeeper's `mtime` moves with it). The task is due a period after the
//! last write (`mtime`) and no later than the maximum wait after the first (`ctime`), both by
//! ZooKeeper's clock. Runs find due keys through the due index, which the publish that starts
//! a key files it in, and fire them (the feature `features/debounce/`): one multi-op deletes the pending node
//! at the version read and creates the task at the tail of its lane, so a publish that lands in
//! between (which rewrites the node) makes the firing fail, and the key goes on waiting with
//! the new payload. Once fired, the next publish starts a new one.
//!
//! A pending publish is found by its envelope id by reading every pending key (ids have no
//! index; this is `status` and `cancel` by id, never a run), and withdrawn (`cancel`) by
//! deleting its node at the version read.
//!
//! Publishes of one key from one bulk call land in order (the window is cut where the key comes
//! again, `bulk.rs`), so a file whose every line has the same key is published one line after
//! another; publishes of one key from separate calls at once (two producers, two HTTP requests)
//! have no order between them, and the one that lands last is the one left. An HTTP publish takes
//! its debounced items into its all-or-nothing multi-op and refuses two items of one key. A
//! cancel whose delete fails (a publish or a firing in between) looks again: a fired publish is
//! buried as any pending task, a replaced one is not found, since only the last of a key runs.
//!
//! # Costs
//!
//! A debounced publish is one write, as a plain one is (a create, or a read and a `setData`),
//! plus the due index's entry when it starts a key. Every run fires what is due before its
//! passes (256 keys a run at most; the rest wait for the next), reading entries and keys 128 to a
//! multi-read and filing 128 to a multi-op; so does a worker's upkeep every half second.

use zookeeper_client as zk;

use super::Queue;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::place::PlaceWrite;
use super::write::{Next, Read, Tries, Write};
use crate::error::{Error, Result};
use crate::layout::UNFILED_BUCKET;
use crate::task::{Debounce, Envelope, PendingDebounced, StandsFor};

recipe!(
    /// Debounced publishes: pending under `debounce/<key>`, filed in the due index, fired into
    /// their lanes when due (`features/debounce/`), withdrawn (`debounce`).
    DebounceKeys,
    debounce
);

/// Pending publishes read in one request when looking for an id.
const FIND_PAGE: usize = 32;

/// What a debounced publish did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Debounced {
    /// Nothing was pending for the key: this envelope waits now.
    Started,
    /// It replaced the pending envelope with this id.
    Replaced {
        /// The id of the envelope it replaced.
        previous: String,
    },
}

/// What a debounced publish writes: its envelope at `debounce/<key>` (created, or rewritten
/// at the version read), and its key's entry in the due index's unfiled bucket when the
/// publish starts the key or may make it due sooner (see `features/debounce/`).
pub(super) struct DebounceWrite {
    path: String,
    pub(super) key: String,
    body: Vec<u8>,
    /// The pending node's version and envelope id, when one was there.
    pub(super) pending: Option<(i32, String)>,
    /// The key's unfiled entry: to create (none there yet), or, for a publish that starts the
    /// key while its entry is still there (a run that fired or dropped the key has yet to
    /// delete it), to re-date at the version read, so that the run's delete, at the version
    /// it read, fails and the entry stays for the key now pending (see `features/debounce/`).
    entry: Option<(String, Option<i32>)>,
    /// For a grouped publish that starts its key, its place in its lane (see `place`).
    place: Option<PlaceWrite>,
}

impl DebounceWrite {
    /// Adds its writes to `multi`, each tagged by `tag` from what it is for.
    pub(super) fn push<'a, T: Copy + PartialEq>(
        &'a self,
        multi: &mut Multi<'a, T>,
        tag: impl Fn(Part) -> T,
    ) {
        match &self.pending {
            Some((version, _)) => multi.push(
                tag(Part::Waiting),
                Op::Set(&self.path, &self.body, *version),
            ),
            None => multi.push(tag(Part::Waiting), Op::Create(&self.path, &self.body)),
        };
        let entry = (self.entry.as_ref()).map(|(path, version)| match version {
            Some(version) => Op::Set(path, b"", *version),
            None => Op::Create(path, b""),
        });
        multi.push_some(tag(Part::DueEntry), entry);
        if let Some(place) = &self.place {
            place.push(multi, tag(Part::Place));
        }
    }

    /// What the publish did, once its writes landed.
    pub(super) fn answer(&self) -> Debounced {
        match &self.pending {
            Some((_, previous)) => Debounced::Replaced {
                previous: previous.clone(),
            },
            None => Debounced::Started,
        }
    }
}

impl DebounceKeys<'_> {
    /// Publishes `envelope` debounced by `debounce`: it waits under `debounce/<key>`, replacing
    /// what is pending there.
    pub async fn publish_debounced(
        self,
        envelope: &Envelope,
        debounce: &Debounce,
    ) -> Result<Debounced> {
        super::write::run(
            &self,
            PublishDebounced {
                envelope,
                debounce,
                path: self.layout().debounced(&debounce.key),
                write: None,
            },
        )
        .await
    }

    /// What publishing `envelope` debounced by `debounce` writes now: its key's pending node
    /// and its unfiled entry read together. A grouped publish that starts its key makes its
    /// place; one that rewrites it keeps the place the key has.
    ///
    /// # Notable errors
    /// - [`Error::Unpublishable`] (as item 1) when the key is pending in another group (or in
    ///   none, or this publish is in none): its turn in its group is where its first publish
    ///   put it, so the group a pending key runs in cannot change.
    pub(super) async fn debounce_write(
        self,
        envelope: &Envelope,
        debounce: &Debounce,
    ) -> Result<DebounceWrite> {
        let path = self.layout().debounced(&debounce.key);
        let entry = (self.layout()).debounce_due_entry(UNFILED_BUCKET, &debounce.key);
        let (pending, filed) =
            futures::future::try_join(self.read_path(&path), self.read_path(&entry)).await?;
        let read: Option<Envelope> =
            (pending.as_ref()).and_then(|(data, _)| serde_json::from_slice(data).ok());
        if let Some(pending) = read.as_ref().filter(|p| p.group != envelope.group) {
            return Err(Error::Unpublishable {
                item: 1,
                problem: group_change(&debounce.key, pending.group.as_deref()),
            });
        }
        let place = match &pending {
            None => {
                let key = debounce.key.clone();
                self.groups()
                    .place_write(envelope, &envelope.id, StandsFor::Debounce { key })
            }
            Some(_) => None,
        };
        let mut task = envelope.clone();
        task.placed = match &place {
            Some(_) => Some(envelope.id.clone()),
            None => read.and_then(|pending| pending.placed),
        };
        let entry = match (&pending, filed) {
            (None, Some((_, stat))) => Some((entry, Some(stat.version))),
            (None, None) => Some((entry, None)),
            (Some((data, _)), None) if falls_due_sooner(debounce, data) => Some((entry, None)),
            (Some(_), _) => None,
        };
        Ok(DebounceWrite {
            path,
            key: debounce.key.clone(),
            body: task.to_bytes()?,
            pending: pending.map(|(data, stat)| (stat.version, pending_id(&data))),
            entry,
            place,
        })
    }

    /// The pending debounced publish whose envelope id is `id`, if any: `debounce/` listed,
    /// then read `FIND_PAGE` keys to a request.
    pub async fn find_debounced(self, id: &str) -> Result<Option<PendingDebounced>> {
        let parent = self.layout().debounce();
        let names = match self.client().list_children(&parent).await {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(Error::zk("list", parent, e)),
        };
        for page in names.chunks(FIND_PAGE) {
            let paths: Vec<String> = page.iter().map(|n| format!("{parent}/{n}")).collect();
            for (body, stat) in self.read_paths(&paths).await?.into_iter().flatten() {
                match PendingDebounced::read(&body, &stat) {
                    Some(found) if found.envelope.id == id => return Ok(Some(found)),
                    _ => {}
                }
            }
        }
        Ok(None)
    }

    /// Withdraws the publish with envelope id `id` pending under debounce key `key`: deletes
    /// its node at the version read, so it never fires. `false` when the key holds another
    /// publish (a later one replaced it) or none.
    ///
    /// # Notable behaviors
    /// A publish or a firing between the read and the delete fails the delete (`BadVersion`,
    /// `NoNode`): `false`, and nothing is deleted.
    pub async fn withdraw_debounced(self, key: &str, id: &str) -> Result<bool> {
        let path = self.layout().debounced(key);
        let Some((body, stat)) = self.read_path(&path).await? else {
            return Ok(false);
        };
        if pending_id(&body) != id {
            return Ok(false);
        }
        match self.client().delete(&path, Some(stat.version)).await {
            Ok(()) => Ok(true),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
            Err(e) => Err(Error::zk("delete", path, e)),
        }
    }
}

/// Why a publish of debounce key `key`, pending in group `group`, is refused in another.
fn group_change(key: &str, group: Option<&str>) -> String {
    let now = match group {
        Some(group) => format!("in group {}", crate::task::shown(group)),
        None => "in no group".to_string(),
    };
    format!(
        "debounce_key {} is pending {now}: a publish of it keeps that group until it fires \
         (its turn in its group is where its first publish put it)",
        crate::task::shown(key)
    )
}

/// Whether a publish asking for `debounce` may make the key pending with `data` due sooner
/// than it was (an unreadable pending envelope: it may).
fn falls_due_sooner(debounce: &Debounce, data: &[u8]) -> bool {
    match serde_json::from_slice::<Envelope>(data)
        .ok()
        .and_then(|e| e.debounce)
    {
        Some(pending) => debounce.may_fall_due_sooner_than(&pending),
        None => true,
    }
}

/// The id of the pending envelope `data` (empty when unreadable).
pub(super) fn pending_id(data: &[u8]) -> String {
    serde_json::from_slice::<Envelope>(data)
        .map(|e| e.id)
        .unwrap_or_default()
}

/// A debounced publish: the key's pending node written (made or replaced) at the version read.
struct PublishDebounced<'e> {
    envelope: &'e Envelope,
    debounce: &'e Debounce,
    /// The key's pending node.
    path: String,
    /// What the try writes, as read.
    write: Option<DebounceWrite>,
}

impl Write for PublishDebounced<'_> {
    type Tag = Part;
    type Out = Debounced;
    const WHAT: &'static str = "publish debounced";
    const TRIES: Tries = Tries::Few;

    async fn read(&mut self, queue: &Queue) -> Result<Read<Debounced>> {
        let read = queue
            .debounce()
            .debounce_write(self.envelope, self.debounce);
        self.write = Some(read.await?);
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        if let Some(write) = &self.write {
            write.push(multi, |part| part);
        }
    }

    async fn landed(self, _: &Queue, _: Landed<Part>) -> Result<Debounced> {
        Ok(self.write.as_ref().expect("a try reads first").answer())
    }

    async fn failed(&mut self, queue: &Queue, failed: Failed<Part>) -> Result<Next<Debounced>> {
        let pending = self.write.as_ref().is_some_and(|w| w.pending.is_some());
        let redating = (self.write.as_ref()).is_some_and(|w| matches!(w.entry, Some((_, Some(_)))));
        match failed.error {
            // Another publish or a firing got in first, or filed the key: look again.
            zk::Error::BadVersion | zk::Error::NodeExists => {}
            zk::Error::NoNode if failed.tag == Part::Waiting && pending => {}
            // The entry it re-dated was dropped or filed meanwhile: look again.
            zk::Error::NoNode if failed.tag == Part::DueEntry && redating => {}
            // A queue made before `debounce/` or the due index: made.
            zk::Error::NoNode => queue.ensure_paths().await?,
            _ => return Err(failed.unexpected(Self::WHAT)),
        }
        Ok(Next::Again)
    }

    fn exhausted(&self) -> Result<Debounced> {
        Err(Error::Unreadable {
            path: self.path.clone(),
            problem: "the debounce key kept changing while it was published; try again".into(),
        })
    }
}
