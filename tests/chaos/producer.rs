//! The producer: the library's `Queue` on a session of its own, publishing a steady mix of
//! tasks (`publish_each` every tick, for the tasks due by then), riding out leader changes.
//!
//! The mix, by the task's number modulo 20: 7 plain, 1 of a tenant (one of three concurrency
//! keys, on a route that lets each key run one task at a time; held back and published in
//! bursts with the limited ones, so that the cap binds), 2 delayed (due in 1–3 s), 2 keyed (a
//! third of the keys published again once or twice, 2–12 s later, by a new envelope with the
//! same key), 3 grouped (30 groups; the payload carries the group's sequence number; one in 20
//! of them a child of a plain task, one in 20 debounced, each keeping its turn), 2 to
//! the limited route (held back and published in bursts every 5 s, so that its limits bind),
//! 2 of the type that is paused mid-run, 1 cancelled (published due in 8 s, cancelled by
//! [`event_bridge::cancel::cancel`] 1–2 s after, on a session of its own; half of them head
//! a group of their own with one task behind them, which must run once the head is gone).
//!
//! `publish_each` rides out a leader change by itself (what landed is found, the rest sent
//! again), and a session that expired under it is replaced (as the command does), so a batch
//! should never fail (`summary` checks it). One that fails all the same is
//! published again whole: some of it may have landed before the link dropped, so those
//! envelopes may exist twice (their ids are kept as uncertain, and allowed
//! for when duplicates and token order are judged). A keyed envelope sent again finds its own
//! key and answers `Existing` with its own id.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::features::expiry::ExpiresAt;
use event_bridge::queue::{KeyState, Outcome, PublishOptions, Published as Answer};
use event_bridge::task::{Debounce, Priority};
use event_bridge::{Config, Envelope, Queue};
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::debounce::Probe;

const TICK: Duration = Duration::from_millis(100);
/// The pause before a publish or a cancel that failed is tried again (a publish tried again
/// may add a duplicate the checks then allow: the pace is part of the run).
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);
pub const GROUPS: usize = 30;
/// Limited tasks wait this long between bursts.
const LIMITED_BURST_EVERY: Duration = Duration::from_secs(5);
/// A cancelled task is published due this far ahead, and cancelled 1–2 s after publishing.
const CANCEL_DUE: Duration = Duration::from_secs(8);

/// The kinds of task, each its own event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Plain,
    Delayed,
    Keyed,
    Grouped,
    Limited,
    Pausable,
    Cancelled,
    Tenant,
    /// Plain tasks of the high lane, and of the low lane.
    High,
    Low,
    /// Published three times with one debounce key: one of them runs, the last.
    Debounced,
    /// A burst of one concurrency key ([`FLOOD`] tasks at once), and a task a tick of
    /// another key while it drains: fairness across keys (see `fairness`).
    Flood,
    Trickle,
    /// Published with an `expires_at` already past: never run, dead as expired (see
    /// `expiry`).
    Expired,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Plain,
        Kind::Delayed,
        Kind::Keyed,
        Kind::Grouped,
        Kind::Limited,
        Kind::Pausable,
        Kind::Cancelled,
        Kind::Tenant,
        Kind::High,
        Kind::Low,
        Kind::Debounced,
        Kind::Flood,
        Kind::Trickle,
        Kind::Expired,
    ];

    pub fn event_type(self) -> &'static str {
        match self {
            Kind::Plain => "chaos.plain",
            Kind::Delayed => "chaos.delayed",
            Kind::Keyed => "chaos.keyed",
            Kind::Grouped => "chaos.grouped",
            Kind::Limited => LIMITED_TYPE,
            Kind::Pausable => PAUSABLE_TYPE,
            Kind::Cancelled => "chaos.cancelled",
            Kind::Tenant => TENANT_TYPE,
            Kind::High => HIGH_TYPE,
            Kind::Low => LOW_TYPE,
            Kind::Debounced => "chaos.debounced",
            Kind::Flood => FLOOD_TYPE,
            Kind::Trickle => TRICKLE_TYPE,
            Kind::Expired => "chaos.expired",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Delayed => "delayed",
            Kind::Keyed => "keyed",
            Kind::Grouped => "grouped",
            Kind::Limited => "limited",
            Kind::Pausable => "pausable",
            Kind::Cancelled => "cancelled",
            Kind::Tenant => "tenant",
            Kind::High => "high",
            Kind::Low => "low",
            Kind::Debounced => "debounced",
            Kind::Flood => "flood",
            Kind::Trickle => "trickle",
            Kind::Expired => "expired",
        }
    }

    /// The kind of task number `n`.
    fn of(n: usize) -> Kind {
        match n % 20 {
            0 => Kind::High,
            1 => Kind::Low,
            2 => Kind::Debounced,
            3..=6 => Kind::Plain,
            7 => Kind::Tenant,
            8 | 9 => Kind::Delayed,
            10 | 11 => Kind::Keyed,
            12..=14 => Kind::Grouped,
            15 | 16 => Kind::Limited,
            17 | 18 => Kind::Pausable,
            _ => Kind::Cancelled,
        }
    }
}

pub const LIMITED_TYPE: &str = "chaos.limited";
pub const TENANT_TYPE: &str = "chaos.tenant";
/// A debounced task's period and maximum wait.
pub const DEBOUNCE_PERIOD: Duration = Duration::from_millis(500);
pub const DEBOUNCE_MAX: Duration = Duration::from_millis(2_000);
/// The same for a key the run probes right after its publish: long enough that a probe finds
/// it pending however slow the machine (with half a second, on two loaded cores most probes
/// came after the key had fired, and some runs' probes saw nothing pending at all).
pub const PROBED_DEBOUNCE_PERIOD: Duration = Duration::from_secs(5);
pub const PROBED_DEBOUNCE_MAX: Duration = Duration::from_secs(10);
pub const HIGH_TYPE: &str = "chaos.high";
pub const LOW_TYPE: &str = "chaos.low";
/// The concurrency keys tenant tasks carry.
pub const TENANT_KEYS: usize = 3;
pub const PAUSABLE_TYPE: &str = "chaos.pausable";
pub const FLOOD_TYPE: &str = "chaos.flood";
pub const TRICKLE_TYPE: &str = "chaos.trickle";
/// Tasks of the flood's burst, published once a fifth of the run is out (between leader
/// kills), and ticks after it that each publish a trickle task.
pub const FLOOD: usize = 1_500;
const TRICKLE_TICKS: usize = 40;
pub const SCHEDULED_TYPE: &str = "chaos.tick";

/// One task the producer published (or may have: a batch sent again).
#[derive(Clone, Debug)]
pub struct Sent {
    pub id: String,
    pub kind: Kind,
    /// The name ZooKeeper gave it (for a keyed task sent again, the name its key names).
    pub task: Option<String>,
    /// When its publish call returned.
    pub at: Instant,
    /// Not claimable before this ZooKeeper time (ms), for delayed and cancelled tasks.
    pub due_ms: Option<i64>,
    pub key: Option<String>,
    pub group: Option<(String, u64)>,
    /// It joined the batch.
    pub batch: bool,
    /// The ids of the tasks it runs after.
    pub after: Vec<String>,
    /// It fails with its parent (a task the producer cancels).
    pub dies_with_parent: bool,
}

/// A key published again: what the publish answered.
#[derive(Clone, Debug)]
pub struct Repeat {
    pub key: String,
    /// The id of the task the key's first publish created.
    pub original: String,
    /// The repeat's own envelope id.
    pub id: String,
    pub answer: RepeatAnswer,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepeatAnswer {
    /// Nothing created; the key's task named, with its state.
    Existing { id: String, state: String },
    /// A second task for the key.
    Created { task: String },
}

/// A cancel as it went.
#[derive(Clone, Debug)]
pub struct Cancel {
    pub id: String,
    pub task: String,
    /// The cancel's answer (`cancelled`, `marked`, …) or the last error.
    pub answer: String,
    /// The answer came after the task was due (a slow machine: the test's timing, not the
    /// queue, failed).
    pub late: bool,
}

/// Plain tasks' publish times, by id, as they are published (for the per-minute latency).
pub type PublishTimes = Arc<Mutex<HashMap<String, Instant>>>;

/// What was published.
pub struct Published {
    pub sent: Vec<Sent>,
    pub repeats: Vec<Repeat>,
    pub cancels: Vec<Cancel>,
    /// Failed publish calls (an error, not an unknown item), each sent again.
    pub retries: usize,
    /// Items a publish could not tell the fate of (`unknown`), and of them those `status`
    /// found (published after all) and those sent again (not found).
    pub unknown: usize,
    pub unknown_found: usize,
    /// Envelopes in those failed calls: each may have landed twice.
    pub resent: usize,
    /// Their ids.
    pub uncertain: HashSet<String>,
    /// Fresh keyed publishes answered with another id's task (never expected).
    pub key_anomalies: Vec<String>,
    /// Debounced envelopes another one replaced (never to be delivered).
    pub replaced: HashSet<String>,
    /// Debounced envelopes that were replaced or ran, the answers cannot tell which: the next
    /// publish of their key answered replacing nothing (not judged).
    pub untold: HashSet<String>,
    /// Debounced keys probed by status or cancel right after their publish.
    pub probes: Vec<Probe>,
    /// From the first tick to the last envelope published.
    pub took: Duration,
}

impl Published {
    /// The ids of tasks that must be delivered: every one published but the cancelled (and the
    /// debounced publishes a probe cancelled).
    pub fn deliverable(&self) -> Vec<String> {
        let probed: HashSet<&str> = (self.probes.iter())
            .filter(|p| p.order.cancel)
            .map(|p| p.order.last.as_str())
            .collect();
        (self.sent.iter())
            .filter(|s| !matches!(s.kind, Kind::Cancelled | Kind::Expired))
            .filter(|s| !self.replaced.contains(&s.id))
            .filter(|s| !self.untold.contains(&s.id))
            .filter(|s| !s.dies_with_parent)
            .filter(|s| !probed.contains(s.id.as_str()))
            .filter(|s| !(s.kind == Kind::Debounced && self.uncertain.contains(&s.id)))
            .map(|s| s.id.clone())
            .collect()
    }

    pub fn count(&self, kind: Kind) -> usize {
        self.sent.iter().filter(|s| s.kind == kind).count()
    }
}

/// Publishes `total` tasks at `rate` a second from `start`.
pub async fn publish(
    config: &Config,
    total: usize,
    rate: f64,
    start: Instant,
    times: PublishTimes,
) -> Published {
    let mut producer = Producer::connect(config).await;
    crate::batches::open(&producer.queue).await;
    // Keys that wait the whole run, beside the debounced traffic, and keys held for the
    // probes to cancel half-way (see `debounce`).
    let (backdrop, held) = (crate::debounce::backdrop(), crate::debounce::held());
    producer.publish(&backdrop).await;
    producer.publish(&held).await;
    let mut sure_probes = Some(crate::debounce::sure_orders(&backdrop, &held));
    let (cancel_tx, cancel_rx) = mpsc::unbounded_channel();
    let canceller = tokio::spawn(cancel_loop(config.clone(), cancel_rx));
    let (probe_tx, probe_rx) = mpsc::unbounded_channel();
    let prober = tokio::spawn(crate::debounce::probe_loop(config.clone(), probe_rx));
    let mut plan = Plan::default();
    let mut sent_count = 0;
    let mut last_burst = Instant::now();
    // Ticks left that publish a trickle task; `None` before the flood.
    let mut trickle: Option<usize> = None;
    // The tasks published already expired go out on the first tick.
    let mut expired_sent = false;
    let end_estimate = Duration::from_secs_f64(total as f64 / rate);
    while sent_count < total || !plan.held.is_empty() {
        harness::real_time(
            TICK,
            "the producer's pace: tasks go out at the planned rate",
        )
        .await;
        let due = ((start.elapsed().as_secs_f64() * rate) as usize).clamp(sent_count, total);
        let now_ms = producer.zk_now();
        let mut batch = Vec::new();
        if !expired_sent {
            batch.extend((0..crate::expiry::EXPIRED).map(|i| expired(i, now_ms)));
            expired_sent = true;
        }
        for n in sent_count..due {
            let (kind, mut envelope) = plan.task(n, now_ms);
            if kind == Kind::Keyed && fastrand::u32(..3) == 0 {
                let key = envelope.idempotency_key.clone().expect("a keyed task");
                for _ in 0..fastrand::usize(1..=2) {
                    let at = start.elapsed() + Duration::from_millis(fastrand::u64(2_000..=12_000));
                    plan.repeats
                        .push((at.min(end_estimate), key.clone(), envelope.id.clone()));
                }
            }
            // Half the cancelled tasks head a group of their own, with a task behind them:
            // that task must run once the head is cancelled.
            let follower = (kind == Kind::Cancelled && fastrand::bool()).then(|| {
                let group = format!("c-{n}");
                envelope.group = Some(group.clone());
                envelope.payload = json!({ "n": n, "group": group, "seq": 1 });
                let mut follower = Envelope::new(Kind::Grouped.event_type(), json!({}));
                follower.payload = json!({ "n": n, "group": group, "seq": 2 });
                follower.group = Some(group);
                follower
            });
            // A debounced task is published three times with its key: the last replaces the
            // others.
            let again = (kind == Kind::Debounced).then(|| {
                (1..3).map(move |k| {
                    let mut again = Envelope::new(kind.event_type(), json!({ "n": n, "k": k }));
                    again.debounce = Some(debounce(n));
                    (kind, again)
                })
            });
            match kind {
                Kind::Limited | Kind::Tenant => plan.held.push((kind, envelope)),
                _ => batch.push((kind, envelope)),
            }
            batch.extend(again.into_iter().flatten());
            batch.extend(follower.map(|f| (Kind::Grouped, f)));
        }
        sent_count = due;
        // Half-way: checked once this tick's count is known, so that a tick that jumps from
        // under half to the end (the loop stalled on a slow publish, as on a loaded machine)
        // still sends them; before, the check came first, that tick was the last, the held
        // keys were never cancelled, and the checker found them stuck.
        if sent_count >= total / 2
            && let Some(orders) = sure_probes.take()
        {
            for order in orders {
                let _ = probe_tx.send(order);
            }
        }
        if trickle.is_none() && sent_count * 7 >= total * 2 {
            batch.extend((0..FLOOD).map(|i| fair(Kind::Flood, i)));
            trickle = Some(TRICKLE_TICKS);
        }
        if let Some(left) = trickle.as_mut().filter(|left| **left > 0) {
            *left -= 1;
            batch.push(fair(Kind::Trickle, TRICKLE_TICKS - *left));
        }
        let elapsed = start.elapsed();
        let (now, later): (Vec<_>, Vec<_>) = (plan.repeats.drain(..)).partition(|r| r.0 <= elapsed);
        plan.repeats = later;
        for (_, key, original) in now {
            let mut envelope =
                Envelope::new(Kind::Keyed.event_type(), json!({ "repeat_of": original }));
            envelope.idempotency_key = Some(key.clone());
            plan.repeat_of.insert(envelope.id.clone(), (key, original));
            batch.push((Kind::Keyed, envelope));
        }
        if last_burst.elapsed() >= LIMITED_BURST_EVERY || sent_count == total {
            last_burst = Instant::now();
            batch.append(&mut plan.held);
        }
        if sent_count == total {
            // The last tick: the repeats still to come go now.
            for (_, key, original) in plan.repeats.drain(..) {
                let mut envelope =
                    Envelope::new(Kind::Keyed.event_type(), json!({ "repeat_of": original }));
                envelope.idempotency_key = Some(key.clone());
                plan.repeat_of.insert(envelope.id.clone(), (key, original));
                batch.push((Kind::Keyed, envelope));
            }
        }
        let envelopes: Vec<Envelope> = batch.iter().map(|(_, e)| e.clone()).collect();
        let answers = producer.publish(&envelopes).await;
        let at = Instant::now();
        let mut debounced: HashMap<String, Vec<String>> = HashMap::new();
        let mut replaced_nothing: HashSet<String> = HashSet::new();
        for ((kind, envelope), answer) in batch.into_iter().zip(answers) {
            if let Some(debounce) = &envelope.debounce {
                (debounced.entry(debounce.key.clone()).or_default()).push(envelope.id.clone());
            }
            if let Some((key, original)) = plan.repeat_of.remove(&envelope.id) {
                let answer = match answer {
                    Answer::Existing { id, state, .. } => RepeatAnswer::Existing {
                        id,
                        state: state.as_str().to_string(),
                    },
                    Answer::Created { task, .. } => RepeatAnswer::Created { task },
                    other => unreachable!("a publish answered {other:?}"),
                };
                producer.repeats.push(Repeat {
                    key,
                    original,
                    id: envelope.id,
                    answer,
                });
                continue;
            }
            let task = match answer {
                // A debounced publish answered with its task: its answer was lost with the
                // connection, and what landed was found after its key fired (`task`), which
                // cannot say what it replaced: the envelope before it is not judged.
                Answer::Created { task, .. } if envelope.debounce.is_some() => {
                    replaced_nothing.insert(envelope.id.clone());
                    Some(task)
                }
                Answer::Created { task, .. } => Some(task),
                Answer::Debounced { id, replaced, .. } => {
                    // Replacing itself: the batch was sent again after its first try landed.
                    match replaced.filter(|r| *r != id) {
                        Some(replaced) => drop(producer.replaced.insert(replaced)),
                        None => drop(replaced_nothing.insert(id)),
                    }
                    None
                }
                Answer::Existing { id, task, .. } if id == envelope.id => task,
                // A child waiting for its parents, or dead with one: no task name.
                Answer::Blocked { .. } | Answer::Buried { .. } => None,
                Answer::Existing { id, .. } => {
                    producer.key_anomalies.push(format!(
                        "fresh key {:?} of {} answered with task id {id}",
                        envelope.idempotency_key, envelope.id
                    ));
                    None
                }
                other => unreachable!("a publish answered {other:?}"),
            };
            if kind == Kind::Plain {
                times
                    .lock()
                    .expect("times lock")
                    .insert(envelope.id.clone(), at);
            }
            if kind == Kind::Cancelled
                && let Some(task) = &task
            {
                let when = at + Duration::from_millis(fastrand::u64(1_000..=2_000));
                let due = envelope.retry_at.expect("a cancelled task is delayed");
                let _ = cancel_tx.send((envelope.id.clone(), task.clone(), when, due));
            }
            let dies_with_parent =
                kind == Kind::Plain && crate::after::dies_with_parent(n_of(&envelope));
            // The parents' ids (the envelope may name them by task name).
            let after = (crate::after::parents_of(n_of(&envelope)))
                .filter(|_| kind == Kind::Plain)
                .map_or(Vec::new(), |(parents, _)| {
                    parents.iter().map(|p| plan.ids[p].clone()).collect()
                });
            producer.sent.push(Sent {
                id: envelope.id,
                kind,
                task,
                at,
                // A delay's due time is at least ZooKeeper's time before the publish (as the
                // producer reads it, never ahead of the server) and the delay.
                due_ms: (envelope.retry_at)
                    .or(envelope.delay_ms.map(|delay| now_ms + delay as i64)),
                key: envelope.idempotency_key,
                batch: envelope.batch.is_some(),
                dies_with_parent,
                after,
                group: envelope
                    .group
                    .map(|g| (g, envelope.payload["seq"].as_u64().unwrap_or(0))),
            });
        }
        for ids in debounced.values() {
            // A publish answered as replacing nothing: the key had fired, so the envelope
            // before it ran; or a fault cut the call and the answer came from what landed
            // (pending under its key, or a task once its key fired), which cannot say what an
            // envelope replaced. Which of the two, the answers do not tell: the envelope
            // before it is not judged.
            for pair in ids.windows(2) {
                if replaced_nothing.contains(&pair[1]) && !producer.replaced.contains(&pair[0]) {
                    producer.untold.insert(pair[0].clone());
                }
            }
        }
        for (key, ids) in debounced {
            // Only the debounced kind's keys are probed (not grouped debounced tasks').
            let Some(n) = key.strip_prefix("deb-").and_then(|n| n.parse().ok()) else {
                continue;
            };
            if ids.iter().any(|id| producer.uncertain.contains(id)) {
                continue;
            }
            if let Some(order) = crate::debounce::order_for(n, &key, &ids) {
                let _ = probe_tx.send(order);
            }
        }
    }
    let took = start.elapsed();
    crate::batches::seal(&producer.queue).await;
    drop(cancel_tx);
    drop(probe_tx);
    let cancels = canceller.await.expect("the canceller");
    let probes = prober.await.expect("the prober");
    Published {
        sent: producer.sent,
        repeats: producer.repeats,
        cancels,
        retries: producer.retries,
        unknown: producer.unknown,
        unknown_found: producer.unknown_found,
        resent: producer.resent,
        uncertain: producer.uncertain,
        key_anomalies: producer.key_anomalies,
        replaced: producer.replaced,
        untold: producer.untold,
        probes,
        took,
    }
}

/// The task number an envelope's payload carries.
fn n_of(envelope: &Envelope) -> usize {
    envelope.payload["n"].as_u64().unwrap_or(u64::MAX) as usize
}

/// Task `i` of the flood or the trickle: its kind's concurrency key, on a route without
/// limits.
fn fair(kind: Kind, i: usize) -> (Kind, Envelope) {
    let mut envelope = Envelope::new(kind.event_type(), json!({ "fair": i }));
    envelope.concurrency_key = Some(kind.name().into());
    (kind, envelope)
}

/// The `i`th task published already expired at ZooKeeper time `now_ms`.
fn expired(i: usize, now_ms: i64) -> (Kind, Envelope) {
    let mut envelope = Envelope::new(Kind::Expired.event_type(), json!({ "expired": i }));
    let past = ExpiresAt::at_ms(now_ms - 1).expect("in range");
    past.set(&mut envelope);
    (Kind::Expired, envelope)
}

/// The debounce of task number `n`'s three publishes.
fn debounce(n: usize) -> Debounce {
    let (period, max) = match crate::debounce::probed(n) {
        true => (PROBED_DEBOUNCE_PERIOD, PROBED_DEBOUNCE_MAX),
        false => (DEBOUNCE_PERIOD, DEBOUNCE_MAX),
    };
    Debounce {
        key: format!("deb-{n}"),
        period_ms: period.as_millis() as u64,
        max_ms: Some(max.as_millis() as u64),
    }
}

/// What is to come: group sequence numbers, keys to publish again, limited and tenant tasks
/// held back.
#[derive(Default)]
struct Plan {
    seqs: HashMap<String, u64>,
    /// (when, key, the id of the key's task).
    repeats: Vec<(Duration, String, String)>,
    /// Repeat envelopes in flight: their key and the original id.
    repeat_of: HashMap<String, (String, String)>,
    /// Tasks of the limited route and of tenants, published in bursts.
    held: Vec<(Kind, Envelope)>,
    /// Each task's id by its number, for the children that name it.
    ids: HashMap<usize, String>,
}

impl Plan {
    /// Task number `n`'s kind and envelope, at ZooKeeper time `now_ms`.
    fn task(&mut self, n: usize, now_ms: i64) -> (Kind, Envelope) {
        let kind = Kind::of(n);
        let mut envelope = Envelope::new(kind.event_type(), json!({ "n": n }));
        match kind {
            Kind::Delayed => {
                let delay = fastrand::i64(1_000..=3_000);
                // Half wait in the high lane: back there when due. The other half ask for a
                // `delay`, which the publish makes a due time by ZooKeeper's clock.
                if n % 20 == 8 {
                    envelope.retry_at = Some(now_ms + delay);
                    envelope.priority = Priority::High;
                } else {
                    envelope.delay_ms = Some(delay as u64);
                }
            }
            Kind::Debounced => envelope.debounce = Some(debounce(n)),
            Kind::High => envelope.priority = Priority::High,
            Kind::Low => envelope.priority = Priority::Low,
            Kind::Keyed => envelope.idempotency_key = Some(format!("key-{n}")),
            Kind::Grouped => {
                let group = format!("g-{:02}", fastrand::usize(..GROUPS));
                let seq = self.seqs.entry(group.clone()).or_default();
                *seq += 1;
                envelope.payload = json!({ "n": n, "group": group, "seq": *seq });
                envelope.group = Some(group);
                // Some wait before they can run, and keep their turn in their group all the
                // same (the order check holds them to it): a child of the plain task 8
                // before it, a debounced task (its own key, published once).
                match n % 60 {
                    // By id: its parent may have completed under a later name (a retry
                    // moves a task), which only its id finds.
                    12 => envelope.after = vec![self.ids[&(n - 8)].clone()],
                    33 => {
                        envelope.debounce = Some(Debounce {
                            key: format!("gdeb-{n}"),
                            ..debounce(n)
                        })
                    }
                    _ => {}
                }
            }
            Kind::Cancelled => {
                envelope.retry_at = Some(now_ms + CANCEL_DUE.as_millis() as i64);
            }
            Kind::Tenant => envelope.concurrency_key = Some(format!("tenant-{}", n % TENANT_KEYS)),
            Kind::Plain if crate::batches::joins(n) => {
                envelope.batch = Some(crate::batches::BATCH.into())
            }
            Kind::Plain if crate::after::parents_of(n).is_some() => {
                let (parents, on_parent_dead) = crate::after::parents_of(n).expect("parents");
                // By id: a retry moves a task under a new name, and a name it had finds it
                // no more once it completed (the checker once named parents of an earlier
                // publish by name, and a publish kept failing on one that had moved).
                envelope.after = parents.iter().map(|p| self.ids[p].clone()).collect();
                envelope.on_parent_dead = on_parent_dead;
            }
            Kind::Plain
            | Kind::Limited
            | Kind::Pausable
            | Kind::Flood
            | Kind::Trickle
            | Kind::Expired => {}
        }
        self.ids.insert(n, envelope.id.clone());
        (kind, envelope)
    }
}

struct Producer {
    config: Config,
    queue: Queue,
    zk: ZkTime,
    sent: Vec<Sent>,
    repeats: Vec<Repeat>,
    retries: usize,
    unknown: usize,
    unknown_found: usize,
    resent: usize,
    uncertain: HashSet<String>,
    key_anomalies: Vec<String>,
    replaced: HashSet<String>,
    untold: HashSet<String>,
}

impl Producer {
    async fn connect(config: &Config) -> Self {
        let queue = new_queue(config, "chaos-producer")
            .await
            .expect("the producer's session");
        let zk = queue.server_time().await.expect("ZooKeeper's time");
        Producer {
            config: config.clone(),
            queue,
            zk,
            sent: Vec::new(),
            repeats: Vec::new(),
            retries: 0,
            unknown: 0,
            unknown_found: 0,
            resent: 0,
            uncertain: HashSet::new(),
            key_anomalies: Vec::new(),
            replaced: HashSet::new(),
            untold: HashSet::new(),
        }
    }

    /// ZooKeeper's time, carried forward from the last reading.
    fn zk_now(&self) -> i64 {
        self.zk.now_ms()
    }

    /// Publishes `batch`, again until it works (on a new session when the old one is over);
    /// gives up after a minute of failures (a hang guard).
    async fn publish(&mut self, batch: &[Envelope]) -> Vec<Answer> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut tries = harness::Tries::every(Duration::from_secs(60), RETRY_PAUSE);
        while tries.again().await {
            if self.queue.session_over()
                && let Ok(queue) = new_queue(&self.config, "chaos-producer").await
            {
                self.queue = queue;
            }
            // A session that expires under the publish is replaced, as the command does.
            let config = self.config.clone();
            let renew = |_: Queue| -> BoxFuture<'_, event_bridge::Result<Queue>> {
                Box::pin(new_queue(&config, "chaos-producer"))
            };
            let options = PublishOptions {
                renew: Some(&renew),
                ..PublishOptions::default()
            };
            let e = match self.queue.publish_each(batch, &options, |_, _| {}).await {
                Ok(outcomes) => return Box::pin(self.settle_unknown(batch, outcomes)).await,
                Err(e) => e.to_string(),
            };
            self.retries += 1;
            self.resent += batch.len();
            self.uncertain.extend(batch.iter().map(|e| e.id.clone()));
            eprintln!(
                "chaos: publishing {} tasks failed ({e}); again",
                batch.len()
            );
        }
        panic!("publishing kept failing for a minute");
    }
}

/// Cancels each task it is sent (id, name, when, due ZooKeeper ms) at its time, each on a task
/// of its own (so that slow cancels do not make the later ones late), on a session of the
/// canceller's; returns what each cancel answered once the channel closes.
async fn cancel_loop(
    config: Config,
    mut rx: mpsc::UnboundedReceiver<(String, String, Instant, i64)>,
) -> Vec<Cancel> {
    let queue = new_queue(&config, "chaos-canceller")
        .await
        .expect("the canceller's session");
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let mut running = Vec::new();
    while let Some((id, task, when, due_ms)) = rx.recv().await {
        let (config, queue) = (config.clone(), Arc::clone(&queue));
        running.push(tokio::spawn(async move {
            harness::real_time(when, "each cancel at its planned time").await;
            let mut answer = String::from("never answered");
            let mut tries = harness::Tries::every(Duration::from_secs(30), RETRY_PAUSE);
            while tries.again().await {
                let mut shared = queue.lock().await;
                if shared.session_over()
                    && let Ok(fresh) = new_queue(&config, "chaos-canceller").await
                {
                    *shared = fresh;
                }
                let current = shared.clone();
                drop(shared);
                match event_bridge::cancel::cancel(&current, &task).await {
                    Ok(cancelled) => {
                        let state = serde_json::to_value(&cancelled).expect("an answer");
                        answer = state["state"].as_str().unwrap_or("?").to_string();
                        break;
                    }
                    Err(e) => answer = format!("error: {e}"),
                }
            }
            // Read on a live session, again after a failure: a clock that could not be read
            // once (a leader kill) said "on time" here, and a cancel that came after its
            // task ran was then judged as if it had come before.
            let mut late = None;
            let mut tries = harness::Tries::every(Duration::from_secs(30), RETRY_PAUSE);
            while late.is_none() && tries.again().await {
                let mut shared = queue.lock().await;
                if shared.session_over()
                    && let Ok(fresh) = new_queue(&config, "chaos-canceller").await
                {
                    *shared = fresh;
                }
                let current = shared.clone();
                drop(shared);
                late = current
                    .server_time()
                    .await
                    .ok()
                    .map(|now| now.now_ms() >= due_ms);
            }
            // Still unknown: not judged, as a late one.
            let late = late.unwrap_or(true);
            Cancel {
                id,
                task,
                answer,
                late,
            }
        }));
    }
    let mut done = Vec::new();
    for cancel in running {
        done.push(cancel.await.expect("a cancel"));
    }
    done
}

impl Producer {
    /// The answers of `batch` from its publish's `outcomes`; an item whose fate the publish
    /// could not tell is looked for by `status` (its id), as the command's answer advises: an
    /// item found was published after all (answered as found), one not found is sent again
    /// (its id kept as uncertain: it may exist twice).
    async fn settle_unknown(&mut self, batch: &[Envelope], outcomes: Vec<Outcome>) -> Vec<Answer> {
        let mut answers: Vec<Option<Answer>> = Vec::with_capacity(batch.len());
        let mut again = Vec::new();
        for (i, outcome) in outcomes.into_iter().enumerate() {
            if outcome.landed() {
                answers.push(Some(answer(outcome)));
                continue;
            }
            self.unknown += 1;
            let id = &batch[i].id;
            match self.status_of(id).await {
                Some(found) => {
                    self.unknown_found += 1;
                    answers.push(Some(found));
                }
                None => {
                    self.uncertain.insert(id.clone());
                    again.push(i);
                    answers.push(None);
                }
            }
        }
        if !again.is_empty() {
            let resend: Vec<Envelope> = again.iter().map(|&i| batch[i].clone()).collect();
            let sent = Box::pin(self.publish(&resend)).await;
            for (i, answer) in again.into_iter().zip(sent) {
                answers[i] = Some(answer);
            }
        }
        answers
            .into_iter()
            .map(|a| a.expect("every item answered"))
            .collect()
    }

    /// The task with envelope id `id` as `status` finds it, as the answer of a publish that
    /// made it (its name when it has one); `None` when it is nowhere.
    async fn status_of(&self, id: &str) -> Option<Answer> {
        use event_bridge::inspect::Status;
        let now = self.queue.server_time().await.ok()?;
        let status = event_bridge::inspect::status(&self.queue, &now, id)
            .await
            .ok()?;
        let task = match &status {
            Status::Pending { task }
            | Status::Leased { task }
            | Status::Waiting { task }
            | Status::Blocked { task } => Some(task.name.clone()),
            Status::Dead { name, .. } => Some(name.clone()),
            Status::Completed { record } => Some(record.task.clone()),
            Status::Debounced(_) | Status::Place { .. } => None,
            Status::NotFound => return None,
            _ => None,
        };
        Some(Answer::Existing {
            id: id.to_string(),
            task,
            state: KeyState::Pending,
        })
    }
}

/// A landed item's answer; one published whose name nothing tells (its answer lost, its task
/// gone from its lane already) as a key's own task of unknown name, which the checks judge by
/// id as any other.
fn answer(outcome: Outcome) -> Answer {
    match outcome {
        Outcome::Unnamed { id, .. } => Answer::Existing {
            id,
            task: None,
            state: KeyState::Pending,
        },
        landed => landed.published().cloned().expect("a landed item's answer"),
    }
}

pub async fn new_queue(config: &Config, prefix: &str) -> event_bridge::Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    Ok(Queue::new(client, config, Queue::new_consumer_id(prefix)))
}
