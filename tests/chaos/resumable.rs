//! Resumable tasks in the mixed traffic: webhook-driven, as the HTTP sink resumes them. Each
//! task runs four steps, one a delivery: the receiver answers the first `202` with a
//! checkpoint (resume at once), the second with a checkpoint and `resume_in` (a sleep), the
//! third with a checkpoint and `wait_for` its pair's key (`timeout` a few seconds), and the
//! fourth `200`. Every checkpoint names its step and the fencing token of the delivery that
//! answered it. Tasks come in pairs sharing a key; a pair gets no signal, one, or two, sent
//! through the library at random moments from the publish on: some before either wait
//! registers (kept), some racing the waits.
//!
//! Judged afterwards (`judge`):
//! - a checkpointed step never runs again: in arrival order, the step a task's deliveries
//!   carry never goes back (a stale holder's request, below a higher token, aside);
//! - a step that ran but whose checkpoint did not land may run again: counted, within what
//!   the faults explain;
//! - no stale-token checkpoint is accepted: each checkpoint a delivery carries was answered to
//!   a delivery no later claim's delivery had arrived before;
//! - no signal is consumed twice (one payload, one task) or lost (every signal sent is consumed
//!   or still kept under its key);
//! - every wait ends: each task reaches its last step, with a signal or its timeout.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use event_bridge::queue::Signalled;
use event_bridge::{Config, Envelope, Queue};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::checks::Inputs;
use crate::receiver::{Answer, Delivery};

pub const RESUMABLE_TYPE: &str = "chaos.resumable";
/// Pairs of resumable tasks published, one pair every [`PAIR_EVERY`].
const PAIRS: usize = 24;
const PAIR_EVERY: Duration = Duration::from_millis(1_500);
/// A task's wait for its pair's signal times out after this.
pub const WAIT_TIMEOUT: &str = "6s";
/// The last step: its delivery is answered `200`.
const LAST_STEP: u64 = 3;

/// What a resumable task's delivery carried: the step it runs (from its checkpoint, 0 on the
/// first), the token of the delivery that answered that checkpoint, how its wait ended, and
/// the sleep or wait its record ends in.
#[derive(Clone, Debug, PartialEq)]
pub struct Resumed {
    pub step: u64,
    pub from_token: Option<i64>,
    pub outcome: Option<Value>,
    pub ended: Option<Ended>,
}

/// The sleep or wait a delivery's record ends in, and how it ended (see `redrives`).
#[derive(Clone, Debug, PartialEq)]
pub enum Ended {
    /// A sleep until `until_ms` (ZooKeeper ms).
    Sleep { until_ms: i64 },
    /// A wait whose timeout, at `until_ms`, ended it.
    Timeout { until_ms: i64 },
    /// A wait a signal ended.
    Signal,
}

impl Ended {
    /// The last entry of a record's `done`, when it is a sleep or a wait that ended.
    fn of(entry: &Value) -> Option<Ended> {
        let until_ms = entry["until_ms"].as_i64();
        match (entry["kind"].as_str()?, entry.pointer("/outcome/by")) {
            ("sleep", _) => Some(Ended::Sleep {
                until_ms: until_ms?,
            }),
            ("wait", Some(by)) if by == "timeout" => Some(Ended::Timeout {
                until_ms: until_ms?,
            }),
            ("wait", Some(_)) => Some(Ended::Signal),
            _ => None,
        }
    }
}

impl Resumed {
    /// What a request's envelope carries, for a resumable task.
    pub fn of(envelope: &Value) -> Option<Resumed> {
        if envelope.get("type")?.as_str()? != RESUMABLE_TYPE {
            return None;
        }
        let checkpoint = envelope.pointer("/resume/checkpoint");
        let done = envelope.pointer("/resume/done").and_then(Value::as_array);
        Some(Resumed {
            step: checkpoint.and_then(|c| c["step"].as_u64()).unwrap_or(0),
            from_token: checkpoint.and_then(|c| c["token"].as_i64()),
            outcome: done
                .and_then(|d| d.last())
                .and_then(|w| w.get("outcome"))
                .cloned(),
            ended: done.and_then(|d| d.last()).and_then(Ended::of),
        })
    }
}

/// The receiver's answer to a resumable task's delivery that it answers well: the next
/// step's checkpoint, or `200` after the last (with the result every task's `200` carries:
/// see `results`).
pub fn answer(resumed: &Resumed, task: &str, token: i64, key: &str) -> String {
    let checkpoint = json!({"step": resumed.step + 1, "token": token});
    let body = match resumed.step {
        0 => json!({"checkpoint": checkpoint}),
        1 => json!({"checkpoint": checkpoint, "resume_in": "1s"}),
        2 => json!({"checkpoint": checkpoint, "wait_for": [key], "timeout": WAIT_TIMEOUT}),
        _ => {
            let body = crate::results::answer(task, token);
            return format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    }
    .to_string();
    format!(
        "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The key a task's payload names.
pub fn key_of(envelope: &Value) -> Option<String> {
    envelope
        .pointer("/payload/key")?
        .as_str()
        .map(str::to_string)
}

/// A signal as sent: its key, its payload's id, and whether it landed (`None`: no answer, it
/// may have).
#[derive(Clone, Debug)]
pub struct SignalSent {
    pub key: String,
    pub id: String,
    pub landed: Option<bool>,
}

/// What was published: each task's id and key, the signals, and the tasks cancelled in their
/// wait and redriven (`redrives`).
#[derive(Clone, Debug, Default)]
pub struct ResumablePublished {
    pub tasks: Vec<(String, String)>,
    pub signals: Vec<SignalSent>,
    pub redrives: Vec<crate::redrives::Redrive>,
}

impl ResumablePublished {
    pub fn ids(&self) -> HashSet<&str> {
        self.tasks.iter().map(|(id, _)| id.as_str()).collect()
    }
}

/// Publishes [`PAIRS`] pairs from `start`, and their signals.
pub async fn publish(config: Config, start: Instant) -> ResumablePublished {
    let mut published = ResumablePublished::default();
    let mut signals = Vec::new();
    let mut redrives = Vec::new();
    let mut queue = crate::producer::new_queue(&config, "resumable").await.ok();
    // The signals share one session, made again when it ends.
    let signaller = std::sync::Arc::new(tokio::sync::Mutex::new(None));
    for pair in 0..PAIRS {
        harness::real_time(start + PAIR_EVERY * (pair as u32 + 1), "a pair a tick").await;
        let key = format!("pair-{pair}");
        let envelopes: Vec<Envelope> = (0..2)
            .map(|i| {
                let mut e = Envelope::new(RESUMABLE_TYPE, json!({"key": key, "i": i}));
                e.idempotency_key = Some(format!("res-{pair}-{i}"));
                e
            })
            .collect();
        publish_pair(&config, &mut queue, &envelopes).await;
        for (i, e) in envelopes.iter().enumerate() {
            published.tasks.push((e.id.clone(), key.clone()));
            if crate::redrives::redriven(pair, i) {
                let redrive = crate::redrives::cancel_and_redrive(config.clone(), e.id.clone());
                redrives.push(tokio::spawn(redrive));
            }
        }
        for n in 0..pair % 3 {
            let after = Duration::from_millis(fastrand::u64(0..=4_000) + 2_000 * n as u64);
            let (config, key) = (config.clone(), key.clone());
            let id = format!("{key}/{n}");
            let at = Instant::now() + after;
            let signaller = signaller.clone();
            signals.push(tokio::spawn(send(config, signaller, key, id, at)));
        }
    }
    for signal in signals {
        published
            .signals
            .push(signal.await.expect("a signal's task"));
    }
    for redrive in redrives {
        published
            .redrives
            .push(redrive.await.expect("a redrive's task"));
    }
    published
}

/// Publishes a pair, again on a new session after a failure: their idempotency keys make a
/// publish that landed the first time create nothing the second.
async fn publish_pair(config: &Config, queue: &mut Option<Queue>, envelopes: &[Envelope]) {
    for _ in 0..20 {
        if let Some(q) = queue.as_ref()
            && q.publish_many(envelopes).await.is_ok()
        {
            return;
        }
        harness::real_time(crate::producer::RETRY_PAUSE, "a publish after a failure").await;
        *queue = crate::producer::new_queue(config, "resumable").await.ok();
    }
    panic!("a pair of resumable tasks could not be published");
}

/// Sends signal `key` with payload id `id` at `at`, once: a signal without an answer may have
/// landed, and sending it again could make two.
async fn send(
    config: Config,
    signaller: std::sync::Arc<tokio::sync::Mutex<Option<Queue>>>,
    key: String,
    id: String,
    at: Instant,
) -> SignalSent {
    harness::real_time(at, "a signal at its moment").await;
    let queue = {
        let mut shared = signaller.lock().await;
        if shared.as_ref().is_none_or(Queue::session_over) {
            *shared = crate::producer::new_queue(&config, "signal").await.ok();
        }
        shared.clone()
    };
    let landed = match queue {
        Some(queue) => match queue.signals().signal(&key, &json!({"id": id})).await {
            Ok(Signalled::Delivered { .. } | Signalled::Kept) => Some(true),
            Ok(_) => Some(true),
            Err(event_bridge::Error::Signal { .. }) => Some(false),
            Err(_) => None,
        },
        None => Some(false),
    };
    SignalSent { key, id, landed }
}

#[derive(Debug, Default)]
pub struct ResumableFigures {
    pub tasks: usize,
    pub signals_sent: usize,
    pub signals_uncertain: usize,
    /// Tasks whose last step ran, and how their waits ended.
    pub finished: usize,
    pub by_signal: usize,
    pub by_timeout: usize,
    /// Ok-answered deliveries of a step that had run already (its checkpoint had not landed).
    pub reran: usize,
    /// A step run after a later step's checkpoint was delivered.
    pub went_back: Vec<String>,
    /// Checkpoints delivered that a delivery answered after a later claim's delivery arrived.
    pub stale_accepted: Vec<String>,
    /// Payloads that ended two tasks' waits.
    pub consumed_twice: Vec<String>,
    /// Signals that landed and were neither consumed nor kept.
    pub lost_signals: Vec<String>,
    /// Signals still kept under their key at the end.
    pub kept: usize,
    pub unfinished: Vec<String>,
}

impl ResumableFigures {
    pub fn failed(&self) -> bool {
        !(self.went_back.is_empty()
            && self.stale_accepted.is_empty()
            && self.consumed_twice.is_empty()
            && self.lost_signals.is_empty()
            && self.unfinished.is_empty())
            || self.finished != self.tasks
            || self.by_signal == 0
            || self.by_timeout == 0
    }
}

/// Judges the resumable tasks' deliveries (see the module documentation); `kept`: the signals'
/// payload ids still kept under their keys at the end.
pub fn judge(
    input: &Inputs,
    by_id: &HashMap<&str, Vec<&Delivery>>,
    kept: &[String],
) -> ResumableFigures {
    let published = input.resumable;
    let mut f = ResumableFigures {
        tasks: published.tasks.len(),
        signals_sent: published.signals.len(),
        signals_uncertain: published
            .signals
            .iter()
            .filter(|s| s.landed.is_none())
            .count(),
        kept: kept.len(),
        ..Default::default()
    };
    let mut consumed: BTreeMap<String, HashSet<&str>> = BTreeMap::new();
    for (id, _) in &published.tasks {
        let list = by_id.get(id.as_str()).map_or(&[][..], Vec::as_slice);
        judge_task(&mut f, id, list, &mut consumed);
    }
    for (payload, tasks) in &consumed {
        if tasks.len() > 1 {
            f.consumed_twice.push(format!("{payload}: {tasks:?}"));
        }
    }
    let kept: HashSet<&str> = kept.iter().map(String::as_str).collect();
    for s in published.signals.iter().filter(|s| s.landed == Some(true)) {
        if !consumed.contains_key(&s.id) && !kept.contains(s.id.as_str()) {
            f.lost_signals.push(format!("{} (key {})", s.id, s.key));
        }
    }
    f
}

fn judge_task<'a>(
    f: &mut ResumableFigures,
    id: &'a str,
    list: &[&Delivery],
    consumed: &mut BTreeMap<String, HashSet<&'a str>>,
) {
    let mut highest = i64::MIN;
    let mut furthest = 0;
    let mut ran: HashSet<u64> = HashSet::new();
    let mut last = None;
    for d in list {
        let Some(resumed) = &d.resume else { continue };
        // A stale holder's request (below a token seen already) is the receiver's to refuse.
        if d.token < highest {
            continue;
        }
        highest = d.token;
        if resumed.step < furthest {
            f.went_back.push(format!(
                "{id} ({}) step {} after step {furthest} was delivered",
                d.task, resumed.step
            ));
        }
        furthest = furthest.max(resumed.step);
        if let Some(from) = resumed.from_token {
            stale(f, id, list, resumed.step, from);
        }
        if d.answer == Answer::Ok && !ran.insert(resumed.step) {
            f.reran += 1;
        }
        if d.answer == Answer::Ok && resumed.step == LAST_STEP {
            last = Some(resumed.outcome.clone());
        }
    }
    let Some(outcome) = last else {
        f.unfinished.push(id.to_string());
        return;
    };
    f.finished += 1;
    match outcome.as_ref().and_then(|o| o["by"].as_str()) {
        Some("signal") => {
            f.by_signal += 1;
            let payload = outcome.as_ref().and_then(|o| o.pointer("/payload/id"));
            let payload = payload.and_then(Value::as_str).unwrap_or("?").to_string();
            consumed.entry(payload).or_default().insert(id);
        }
        Some("timeout") => f.by_timeout += 1,
        _ => f
            .unfinished
            .push(format!("{id}: its wait's outcome is {outcome:?}")),
    }
}

/// Checks that the checkpoint a delivery of step `step` carries (answered to the delivery of
/// step - 1 with token `from`) came from a delivery that no later claim's delivery preceded.
fn stale(f: &mut ResumableFigures, id: &str, list: &[&Delivery], step: u64, from: i64) {
    let answered = list.iter().find(|d| {
        d.token == from
            && d.answer == Answer::Ok
            && d.resume.as_ref().is_some_and(|r| r.step + 1 == step)
    });
    let Some(answered) = answered else {
        f.stale_accepted.push(format!(
            "{id}: step {step}'s checkpoint (token {from}) answered by no delivery"
        ));
        return;
    };
    if let Some(later) = list
        .iter()
        .find(|d| d.token > from && d.arrived < answered.answered)
    {
        f.stale_accepted.push(format!(
            "{id}: step {step}'s checkpoint answered to token {from} after token {} arrived",
            later.token
        ));
    }
}
