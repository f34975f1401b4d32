//! Publishing: sequential creates in the task's lane (`tasks/` for normal) (with an idempotency key, together with the
//! key: see [`super::keys`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use tracing::Instrument;
use zookeeper_client as zk;

use super::Queue;
use super::idempotency_keys::Published;
use super::landed::{Fate, Floors};
use super::outage::{Outage, PublishOptions, in_doubt, refused, retriable};
use crate::error::{Error, Result};
use crate::feature::Features;
use crate::lane::Lane;
use crate::task::{self, Envelope};
use crate::traces;

/// Publishes a bulk publish keeps in flight.
const PUBLISH_WINDOW: usize = 1_000;

/// What became of one item of a publish that rides out lost connections
/// ([`Queue::publish_each`], [`Queue::publish_batch_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered; or, its answer lost with the connection, found where it landed.
    Published(Published),
    /// Debounced, its answer lost with the connection, and its key found holding another
    /// publish's envelope (`by`, that publish's id), written since it was sent: it landed and
    /// that later publish replaced it, or that one got in first. It is not sent again, which
    /// would overwrite a newer publish. `published` is its answer as a debounced publish.
    Replaced {
        /// Its answer as a debounced publish.
        published: Published,
        /// The id of the publish its key holds now.
        by: String,
    },
    /// Published, its answer lost with the connection (its idempotency key names it, or its
    /// all-or-nothing batch was found), but its task left its lane before it could be found,
    /// under a name nothing tells: why. It is not sent again; `status` by its id may find it.
    Unnamed {
        /// The envelope id.
        id: String,
        /// Why its name is not known.
        reason: String,
    },
    /// Sent, its answer lost with the connection, and whether it landed cannot be told (its
    /// lane lost tasks meanwhile that nothing explains, one of which may have been it, run
    /// already; or no session answered again in time). Sending it again may make a twin:
    /// `status` by its id may find it.
    Unknown {
        /// The envelope id.
        id: String,
        /// Why whether it landed cannot be told.
        reason: String,
    },
}

impl Outcome {
    /// What the publish did, when that is known (a replaced debounced publish: its answer as
    /// one).
    pub fn published(&self) -> Option<&Published> {
        match self {
            Outcome::Published(published) | Outcome::Replaced { published, .. } => Some(published),
            Outcome::Unnamed { .. } | Outcome::Unknown { .. } => None,
        }
    }

    /// Whether it is known to have been published (every outcome but [`Outcome::Unknown`]).
    pub fn landed(&self) -> bool {
        !matches!(self, Outcome::Unknown { .. })
    }

    fn of(fate: Fate, id: &str) -> Option<Outcome> {
        let id = id.to_string();
        Some(match fate {
            Fate::Landed(published) => Outcome::Published(published),
            Fate::Replaced { published, by } => Outcome::Replaced { published, by },
            Fate::Unnamed(reason) => Outcome::Unnamed { id, reason },
            Fate::Unknown(reason) => Outcome::Unknown { id, reason },
            Fate::NotLanded => return None,
        })
    }
}

impl Queue {
    /// Publishes `envelopes` pipelined, in order. An envelope with an idempotency key is
    /// created together with its key in one multi-op, or not at all when the key is taken
    /// (pending, held, or completed within `DEDUP_WINDOW_MS`). A window of 512 envelopes or
    /// more packs their creates into multi-ops of up to 32 (see `bulk`): a key taken meanwhile
    /// fails its run's multi-op, which is sent again without that envelope; each envelope is
    /// still one task znode, and answered in order.
    ///
    /// A connection lost under it (a leader election) is ridden out on the same session, as
    /// [`Queue::publish_each`] does with the default [`PublishOptions`]: what landed is found,
    /// the rest sent again, each envelope published once.
    ///
    /// # Notable errors
    /// - [`Error::InDoubt`] naming the first envelope whose fate cannot be told (the session
    ///   ended, or ZooKeeper did not answer again within [`super::PUBLISH_RETRY_FOR`], or it
    ///   may have landed and run already), or that was published under a task name that cannot
    ///   be told ([`Outcome::Unnamed`]);
    /// - [`Error::Unpublishable`] as [`Queue::publish_each`] says.
    ///
    /// A debounced envelope whose key another publish holds after a lost connection is
    /// answered as published debounced ([`Outcome::Replaced`]).
    pub async fn publish_all(&self, envelopes: &[Envelope]) -> Result<Vec<Published>> {
        let outcomes =
            (self.publish_each(envelopes, &PublishOptions::default(), |_, _| {})).await?;
        (outcomes.into_iter().enumerate())
            .map(|(i, outcome)| match outcome {
                Outcome::Published(published) | Outcome::Replaced { published, .. } => {
                    Ok(published)
                }
                Outcome::Unnamed { id, reason } => Err(Error::InDoubt {
                    item: i + 1,
                    id,
                    problem: format!("it was published, but its task's name is unknown: {reason}"),
                    cut: None,
                }),
                Outcome::Unknown { id, reason } => Err(Error::InDoubt {
                    item: i + 1,
                    id,
                    problem: format!("cannot tell whether it was published: {reason}"),
                    cut: None,
                }),
            })
            .collect()
    }

    /// As [`Queue::publish_all`], handing each envelope's outcome (with its index) to `each`
    /// in order, as soon as it and those before it are known: as they land.
    ///
    /// When the connection is lost under a window, what was in flight is in doubt. Once a
    /// session answers again (the same one, which the client reconnects while it lives, or a
    /// new one from `options.renew`), the items in doubt are looked for where they would have
    /// landed (see `landed`): those found are answered as found, the others sent again, all
    /// within `options.retry_for` of the failure (and by `options.deadline`). An item that may
    /// have landed and left its lane already is [`Outcome::Unknown`], and the publish goes on.
    /// A request the server refused (throttled) was not applied: it is sent again after a
    /// pause, within the same budget.
    ///
    /// # Notable errors
    /// - [`Error::InDoubt`] when no session answered within `options.retry_for` (or the session
    ///   ended and `options.renew` is `None`): the items in doubt were handed on as
    ///   [`Outcome::Unknown`], and the error names the first item without an answer; those
    ///   after the window were not sent;
    /// - [`Error::Unpublishable`] naming the first envelope that can never be published
    ///   ([`Envelope::check_publishable`], or over [`task::MAX_BODY_BYTES`]), or whose id an
    ///   earlier envelope has (an item in doubt is looked for by its id): nothing is written;
    /// - any error of [`Queue::publish_all`] before that: unknown parents, batches.
    pub async fn publish_each<F>(
        &self,
        envelopes: &[Envelope],
        options: &PublishOptions<'_>,
        mut each: F,
    ) -> Result<Vec<Outcome>>
    where
        F: FnMut(usize, &Outcome) + Send,
    {
        let span = traces::publish_span(self.layout().root(), envelopes);
        let envelopes = traces::stamped(envelopes, &span);
        let envelopes: &[Envelope] = &envelopes;
        async {
            refuse_unpublishable(envelopes, self.features())?;
            let mut queue = self.clone();
            let mut outage = Outage::new(options);
            // Due times and checks are reads: made again once a session answers.
            let envelopes = loop {
                let checked = async {
                    let due = queue.with_due_times(envelopes).await?;
                    queue.batches().check_batches(&due).await?;
                    super::parents::check_order(&due)?;
                    Ok::<_, Error>(due)
                };
                match checked.await {
                    Ok(due) => break due,
                    Err(e) => queue = outage.back(&queue, e).await?,
                }
            };
            outage.over();
            let mut answers = Answers::new(&envelopes, &mut each);
            // Runs of tasks without parents go pipelined; a task with parents goes alone, after
            // them, naming those of this publish by the task names they got. So does a grouped
            // debounced task: its place must land between the tasks around it, and its write
            // needs a read first, which pipelined creates would pass.
            let alone =
                |e: &Envelope| !e.after.is_empty() || e.group.is_some() && e.debounce.is_some();
            let mut names: HashMap<String, String> = HashMap::new();
            let mut floors = Floors::new();
            let mut start = 0;
            while start < envelopes.len() {
                let rest = &envelopes[start..];
                let plain = rest.iter().take_while(|e| !alone(e)).count();
                let step: Cow<[Envelope]> = match plain {
                    0 => {
                        let mut child = rest[0].clone();
                        for parent in &mut child.after {
                            if let Some(name) = names.get(parent) {
                                *parent = name.clone();
                            }
                        }
                        Cow::Owned(vec![child])
                    }
                    _ => Cow::Borrowed(&rest[..plain.min(PUBLISH_WINDOW)]),
                };
                let len = step.len();
                let renamed = plain == 0 && step[0].after != rest[0].after;
                let (queue, outage, floors) = (&mut queue, &mut outage, &mut floors);
                match publish_step(queue, outage, floors, &step, start, &mut answers).await {
                    // A parent named by the task name it got in this publish was claimed, moved
                    // by a retry and completed meanwhile: a name it had finds it no more, its id
                    // does (its completion record).
                    Err(Error::Parent { .. }) if renamed => {
                        let one = &rest[..1];
                        publish_step(queue, outage, floors, one, start, &mut answers).await?
                    }
                    done => done?,
                }
                for outcome in &answers.outcomes[start..start + len] {
                    if let Some(Outcome::Published(Published::Created { id, task })) = outcome {
                        names.insert(id.clone(), task.clone());
                    }
                }
                start += len;
            }
            queue.landed().await;
            Ok(answers.into_outcomes())
        }
        .instrument(span)
        .await
    }

    /// Publishes `envelopes` in one multi-op, all of them or none ([`super::AllOrNothing::publish_batch`]),
    /// riding out a lost connection as [`Queue::publish_each`] does: once a session answers
    /// again, a batch that landed is found (when any of its items is found, all of it landed:
    /// each is answered as found, or with its task's name worked out, or
    /// [`Outcome::Unnamed`]), one that did not is sent again whole, within `options.retry_for`
    /// (and by `options.deadline`). One whose fate cannot be told is answered
    /// [`Outcome::Unknown`] item by item; no part of it is ever sent again alone.
    ///
    /// # Notable errors
    /// - those of [`super::AllOrNothing::publish_batch`];
    /// - [`Error::InDoubt`] naming the first item without an answer when no session answered
    ///   in time.
    pub async fn publish_batch_with(
        &self,
        envelopes: &[Envelope],
        options: &PublishOptions<'_>,
    ) -> Result<Vec<Outcome>> {
        let span = traces::publish_span(self.layout().root(), envelopes);
        let envelopes = traces::stamped(envelopes, &span);
        let outcomes = publish_batch_in(self, &envelopes, options)
            .instrument(span)
            .await?;
        self.landed().await;
        Ok(outcomes)
    }

    /// Publishes one envelope; returns the task's name. With an idempotency key that is
    /// taken, nothing is created and the name is that of the task that has the key
    /// ([`Queue::publish_all`] says which happened).
    ///
    /// ```
    /// use event_bridge::{Config, Envelope, Session};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> event_bridge::Result<()> {
    /// let config = Config::from_env()?;
    /// # // The example runs against the ZooKeeper at ZK_TEST_ADDRESS (make test starts one), in
    /// # // a fresh chroot of its own.
    /// # let mut config = config;
    /// # let address = std::env::var("ZK_TEST_ADDRESS").unwrap_or_else(|_| "127.0.0.1:2181".into());
    /// # let chroot = format!("/eb-doctests/{}", uuid::Uuid::new_v4());
    /// # let zk = zookeeper_client::Client::connect(&address).await.expect("a ZooKeeper at ZK_TEST_ADDRESS");
    /// # let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    /// # zk.mkdir(&chroot, &open).await.expect("the example's chroot");
    /// # config.zookeeper = format!("{address}{chroot}");
    /// let queue = Session::open(config, "producer", None).await?.queue();
    ///
    /// let mut signup = Envelope::new("user.signup", json!({"user": 42}));
    /// signup.idempotency_key = Some("signup-42".into());
    /// let name = queue.publish(&signup).await?;
    ///
    /// // A second publish with the same key (a producer's retry) creates nothing: the answer
    /// // names the task that has the key.
    /// let mut retry = Envelope::new("user.signup", json!({"user": 42}));
    /// retry.idempotency_key = Some("signup-42".into());
    /// assert_eq!(queue.publish(&retry).await?, name);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish(&self, envelope: &Envelope) -> Result<String> {
        let mut names = self.publish_many(std::slice::from_ref(envelope)).await?;
        Ok(names.remove(0))
    }

    /// Publishes a body as it is (any producer's JSON) in the normal lane, as a 000 producer
    /// does; returns the task's name.
    pub async fn publish_raw(&self, body: &[u8]) -> Result<String> {
        let name = self.publish_in(&Lane::NORMAL, body).await?;
        self.landed().await;
        Ok(name)
    }

    /// Publishes a body at the tail of `lane` (made already); returns the task's name.
    pub(crate) async fn publish_in(&self, lane: &Lane, body: &[u8]) -> Result<String> {
        task::check_size(body)?;
        let prefix = self.layout().lane_prefix(lane);
        let mut created = self
            .client()
            .create(
                &prefix,
                body,
                &self.created(zk::CreateMode::PersistentSequential),
            )
            .await;
        if matches!(lane, Lane::Key(_)) && created == Err(zk::Error::NoNode) {
            // A key lane deleted by hand since this process made it: made again.
            self.key_lanes().forget_key_lane(lane);
            self.key_lanes()
                .ensure_lanes(std::slice::from_ref(lane))
                .await?;
            created = self
                .client()
                .create(
                    &prefix,
                    body,
                    &self.created(zk::CreateMode::PersistentSequential),
                )
                .await;
        }
        let (_, seq) = created.map_err(|e| Error::zk("create", &prefix, e))?;
        Ok(format!("{}{seq}", lane.prefix()))
    }

    /// Publishes many envelopes pipelined, keeping their order; returns the task names (for a
    /// taken idempotency key, that of the task that has it).
    pub async fn publish_many(&self, envelopes: &[Envelope]) -> Result<Vec<String>> {
        let published = self.publish_all(envelopes).await?;
        published
            .into_iter()
            .map(|p| match p {
                Published::Created { task, .. } => Ok(task),
                Published::Existing {
                    task: Some(task), ..
                } => Ok(task),
                Published::Debounced { key, .. } => Ok(format!("debounce/{key}")),
                Published::Blocked { id, .. } => Ok(format!("after/{id}")),
                Published::Buried { dead_letter, .. } => Ok(format!("dead/{dead_letter}")),
                Published::Existing { id, task: None, .. } => Err(Error::Unreadable {
                    path: id,
                    problem: "its idempotency key is taken by a task whose name was never written"
                        .into(),
                }),
            })
            .collect()
    }

    /// `envelopes` with the delays they ask for (`delay_ms`) made due times (`retry_at`, by
    /// ZooKeeper's clock read once); as they are when none asks.
    pub(crate) async fn with_due_times<'e>(
        &self,
        envelopes: &'e [Envelope],
    ) -> Result<std::borrow::Cow<'e, [Envelope]>> {
        if envelopes.iter().all(|e| e.delay_ms.is_none()) {
            return Ok(std::borrow::Cow::Borrowed(envelopes));
        }
        let now = self.server_time().await?.now_ms();
        let due = envelopes.iter().map(|e| {
            let mut e = e.clone();
            if let Some(delay) = e.delay_ms.take() {
                e.retry_at = Some(e.retry_at.unwrap_or(0).max(now + delay as i64));
            }
            e
        });
        Ok(std::borrow::Cow::Owned(due.collect()))
    }
}

/// [`Queue::publish_batch_with`] within its PRODUCER span, on `origin`'s session (and a new one
/// when it ends).
async fn publish_batch_in(
    origin: &Queue,
    envelopes: &[Envelope],
    options: &PublishOptions<'_>,
) -> Result<Vec<Outcome>> {
    origin.all_or_nothing().check_batch(envelopes)?;
    super::parents::check_order(envelopes)?;
    let mut queue = origin.clone();
    let mut outage = Outage::new(options);
    let envelopes = loop {
        match queue.with_due_times(envelopes).await {
            Ok(due) => break due,
            Err(e) => queue = outage.back(&queue, e).await?,
        }
    };
    outage.over();
    let ids: Vec<String> = envelopes.iter().map(|e| e.id.clone()).collect();
    let none: Vec<Option<Outcome>> = vec![None; envelopes.len()];
    let mut known = Floors::new();
    loop {
        // The floors: read first when a lane has none yet (or the batch has a debounced
        // item), else along.
        if !known.pipelinable(&envelopes) {
            match queue.in_doubt().read_floors(&envelopes).await {
                Ok(floors) => known.update(&floors),
                Err(e) if !retriable(&e, queue.session_over()) => return Err(e),
                Err(e) => match outage.back(&queue, e).await {
                    Ok(back) => {
                        queue = back;
                        continue;
                    }
                    Err(e) => return Err(cut_short(e, &ids, &none, options.retry_for)),
                },
            }
        }
        let floors = queue.in_doubt().read_floors(&envelopes);
        let tried = queue.all_or_nothing().try_batch(&envelopes).await;
        let floors = floors.await.ok();
        let lost = match tried {
            Ok(Some(published)) => {
                outage.over();
                return Ok(published.into_iter().map(Outcome::Published).collect());
            }
            Ok(None) => {
                return Err(Error::Unreadable {
                    path: origin.layout().keys(),
                    problem: "the batch's keys or parents kept changing while it was \
                              published; try again"
                        .into(),
                });
            }
            // Refused by the server before its multi-op was applied: sent again whole.
            Err(e) if refused(&e) && !super::bulk::wrote_before(&e, &envelopes) => {
                match outage.back(&queue, e).await {
                    Ok(back) => {
                        queue = back;
                        continue;
                    }
                    Err(e) => return Err(cut_short(e, &ids, &none, options.retry_for)),
                }
            }
            Err(e) if in_doubt(&e, queue.session_over()) || refused(&e) => e,
            Err(e) => return Err(e),
        };
        let floors = match floors {
            Some(fresh) => {
                known.update(&fresh);
                fresh
            }
            None => known.clone(),
        };
        let doubt = BatchInDoubt {
            envelopes: &envelopes[..],
            ids: &ids[..],
            floors: &floors,
        };
        let found = batch_in_doubt(&mut queue, &mut outage, lost, doubt, options).await?;
        // None of it landed: the whole batch again.
        if let Some(outcomes) = found {
            outage.over();
            return Ok(outcomes);
        }
    }
}

/// The outcomes of a publish, handed on in order as soon as they and those before them are
/// known; and the names of the tasks it was answered for (a number missing from a lane that is
/// one of them is explained).
struct Answers<'f, F> {
    ids: Vec<String>,
    outcomes: Vec<Option<Outcome>>,
    next: usize,
    each: &'f mut F,
    names: HashSet<String>,
}

impl<'f, F: FnMut(usize, &Outcome)> Answers<'f, F> {
    fn new(envelopes: &[Envelope], each: &'f mut F) -> Self {
        Answers {
            ids: envelopes.iter().map(|e| e.id.clone()).collect(),
            outcomes: vec![None; envelopes.len()],
            next: 0,
            each,
            names: HashSet::new(),
        }
    }

    fn set(&mut self, i: usize, outcome: Outcome) {
        if let Outcome::Published(Published::Created { task, .. }) = &outcome {
            self.names.insert(task.clone());
        }
        self.outcomes[i] = Some(outcome);
        while let Some(Some(outcome)) = self.outcomes.get(self.next) {
            (self.each)(self.next, outcome);
            self.next += 1;
        }
    }

    fn into_outcomes(self) -> Vec<Outcome> {
        (self.outcomes.into_iter())
            .map(|o| o.expect("every item settled"))
            .collect()
    }
}

/// Publishes `items` (a window of tasks without parents, or one child), item `i` of them being
/// item `first + i` of the publish: sent, and after a lost connection, what was in doubt found
/// or sent again, until every item has its outcome in `answers`. `floors` are the latest tails
/// read of each lane (a floor for a window whose own read was lost).
async fn publish_step<F: FnMut(usize, &Outcome) + Send>(
    queue: &mut Queue,
    outage: &mut Outage<'_, '_>,
    floors: &mut Floors,
    items: &[Envelope],
    first: usize,
    answers: &mut Answers<'_, F>,
) -> Result<()> {
    let mut pending: Vec<usize> = (0..items.len()).collect();
    while !pending.is_empty() {
        let window: Cow<[Envelope]> = match pending.len() == items.len() {
            true => Cow::Borrowed(items),
            false => Cow::Owned(pending.iter().map(|&i| items[i].clone()).collect()),
        };
        let mut landed = |j: usize, one: Published| {
            answers.set(first + pending[j], Outcome::Published(one));
        };
        let sent = queue.send_window(&window, floors, &mut landed).await?;
        let round = match sent.floors {
            Some(fresh) => {
                floors.update(&fresh);
                fresh
            }
            None => floors.clone(),
        };
        let Some(lost) = sent.lost else {
            break;
        };
        let doubts: Vec<&Envelope> = sent.doubts.iter().map(|&j| &window[j]).collect();
        let how = Settle::Each(&sent.losses);
        let fates = settle(queue, outage, lost, &doubts, how, &round, &answers.names).await;
        let fates = match fates {
            Ok(fates) => fates,
            Err(e) => {
                // No session in time: what was sent is unknown, the rest not sent.
                for &j in &sent.doubts {
                    let (i, id) = (pending[j], window[j].id.clone());
                    let reason = format!("its answer was lost with the connection, and {e}");
                    answers.set(first + i, Outcome::Unknown { id, reason });
                }
                let outcomes = &answers.outcomes;
                return Err(cut_short(e, &answers.ids, outcomes, outage.retry_for()));
            }
        };
        let mut next = Vec::new();
        for (&j, fate) in sent.doubts.iter().zip(fates) {
            let i = pending[j];
            // Its key holds an earlier item of this publish (answered, or found): it did not
            // land, and goes after that one, as published.
            let fate = match fate {
                Fate::Replaced { by, .. } if answers.ids[..first + i].contains(&by) => {
                    Fate::NotLanded
                }
                fate => fate,
            };
            match Outcome::of(fate, &items[i].id) {
                Some(outcome) => answers.set(first + i, outcome),
                None => next.push(i),
            }
        }
        next.extend(sent.unsent.iter().map(|&j| pending[j]));
        next.sort_unstable();
        pending = next;
    }
    // Nothing is pending: a later failure is an outage of its own.
    outage.over();
    Ok(())
}

/// How the items in doubt were sent: one by one (each tagged with the connection loss it
/// failed on), or as one all-or-nothing batch.
#[derive(Clone, Copy)]
enum Settle<'l> {
    Each(&'l [u64]),
    Batch,
}

/// Refuses a publish of `envelopes` before anything is written when one can never be
/// published (its fields, or its size: sent, the others around it would land and it not), or
/// when two share an id (what is in doubt after a lost connection is found by id). Each
/// feature checks its own fields ([`Features::check_publish`]).
fn refuse_unpublishable(envelopes: &[Envelope], features: &Features) -> Result<()> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (i, envelope) in envelopes.iter().enumerate() {
        (envelope.check_publishable())
            .and_then(|()| features.check_publish(envelope))
            .and_then(|()| task::check_envelope_size(envelope))
            .map_err(|problem| Error::Unpublishable {
                item: i + 1,
                problem,
            })?;
        if let Some(first) = ids.insert(&envelope.id, i + 1) {
            let id = crate::task::shown(&envelope.id);
            return Err(Error::Unpublishable {
                item: i + 1,
                problem: format!(
                    "id {id} is also task {first}'s: ids must be unique within a publish \
                     (status and cancel by id would find only one task, and a publish cut \
                     by a lost connection finds what landed by id)"
                ),
            });
        }
    }
    Ok(())
}

/// An all-or-nothing publish whose answer was lost: its envelopes, their ids, and the lanes'
/// tails read before it was sent (what it landed after, if it did).
struct BatchInDoubt<'a> {
    envelopes: &'a [Envelope],
    ids: &'a [String],
    floors: &'a Floors,
}

/// What became of the all-or-nothing publish `doubt` whose answer was lost with `lost`: each
/// item's outcome, or `None` when none of it landed (to be sent again whole).
async fn batch_in_doubt(
    queue: &mut Queue,
    outage: &mut Outage<'_, '_>,
    lost: Error,
    BatchInDoubt {
        envelopes,
        ids,
        floors,
    }: BatchInDoubt<'_>,
    options: &PublishOptions<'_>,
) -> Result<Option<Vec<Outcome>>> {
    let batch: Vec<&Envelope> = envelopes.iter().collect();
    let answered = HashSet::new();
    let fates = settle(
        queue,
        outage,
        lost,
        &batch,
        Settle::Batch,
        floors,
        &answered,
    );
    let fates = match fates.await {
        Ok(fates) => fates,
        Err(e) => {
            let unknown = |id: &String| {
                let reason = e.to_string();
                Some(Outcome::Unknown {
                    id: id.clone(),
                    reason,
                })
            };
            let outcomes: Vec<Option<Outcome>> = ids.iter().map(unknown).collect();
            return Err(cut_short(e, ids, &outcomes, options.retry_for));
        }
    };
    if fates.iter().all(|f| matches!(f, Fate::NotLanded)) {
        return Ok(None);
    }
    Ok(Some(
        (fates.into_iter().zip(ids))
            .map(|(fate, id)| Outcome::of(fate, id).expect("a batch lands whole or not"))
            .collect(),
    ))
}

/// Once a session answers again after `lost`: what became of `doubts`, sent after `floors`
/// were read (see `landed`) as `how` says, on the session the publish goes on with (in
/// `queue`). The search is bounded by the outage's deadline too.
async fn settle(
    queue: &mut Queue,
    outage: &mut Outage<'_, '_>,
    lost: Error,
    doubts: &[&Envelope],
    how: Settle<'_>,
    floors: &Floors,
    answered: &HashSet<String>,
) -> Result<Vec<Fate>> {
    *queue = outage.back(queue, lost).await?;
    loop {
        let on: &Queue = queue;
        let look = async {
            match how {
                Settle::Each(losses) => {
                    on.in_doubt().landed(doubts, losses, floors, answered).await
                }
                Settle::Batch => on.in_doubt().landed_whole(doubts, floors, answered).await,
            }
        };
        let looked = outage.within(on, look).await;
        match looked {
            Ok(fates) => return Ok(fates),
            Err(e) => *queue = outage.back(queue, e).await?,
        }
    }
}

/// The error of a publish cut short by `error` (no session in time): it names the first item
/// with no outcome, or the first unknown one, among `ids` (the publish's envelope ids).
fn cut_short(
    error: Error,
    ids: &[String],
    outcomes: &[Option<Outcome>],
    retry_for: std::time::Duration,
) -> Error {
    let first = outcomes
        .iter()
        .position(|o| !o.as_ref().is_some_and(Outcome::landed))
        .unwrap_or(0);
    let unknown = (outcomes.iter())
        .filter(|o| matches!(o, Some(Outcome::Unknown { .. })))
        .count();
    let unsent = outcomes.iter().filter(|o| o.is_none()).count();
    let why = match &error {
        Error::Timeout { .. } => format!("no ZooKeeper session answered within {retry_for:?}"),
        other => other.to_string(),
    };
    Error::InDoubt {
        item: first + 1,
        id: ids.get(first).cloned().unwrap_or_default(),
        problem: format!("the connection was lost and {why}"),
        cut: Some(crate::error::CutShort { unknown, unsent }),
    }
}
