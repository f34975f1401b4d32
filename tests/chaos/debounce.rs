//! Debounce under mixed traffic, beside a backdrop of [`BACKDROP`] keys that wait an hour (so
//! more keys are pending than a run fired from before the due index: it looked at the first
//! 256 names `debounce/` listed, and a due key listed after them never fired). Every debounced
//! task is published three times with its key;
//! the publishes' answers say which envelope replaced which. A replaced envelope is never
//! delivered, and the one left of each key is (the lost check counts it).
//!
//! Some keys are probed right after their publish, on a session of the prober's: half of them
//! by `status` of the envelope left and of the first, replaced, one; a quarter by `cancel` of
//! the envelope left. `status` must find the pending publish as `debounced` under its key (or,
//! once it fired, as a task with its id) and must never find a replaced one. A cancel that
//! answers `withdrawn` must mean the envelope never runs and leaves no dead letter; one that
//! answers `marked` (held) that no attempt but the holder's runs, and that it ends completed or
//! a dead letter.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use event_bridge::{Config, Queue};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::checks::Inputs;
use crate::producer::{Kind, new_queue};
use crate::receiver::{Answer, Delivery};

/// Keys published at the start, due in an hour: pending through the whole run, never fired
/// (`summary` checks every one is still there).
pub const BACKDROP: usize = 600;

/// What the backdrop's keys start with.
pub const BACKDROP_PREFIX: &str = "backdrop-";

/// Keys published with the backdrop, due in an hour too, for probes to cancel half-way
/// through the run. The mixed traffic's keys are probed right after their publish, and on a
/// slow machine every one may have fired by then; these are pending whatever the machine's
/// speed, so a run always probes a pending key by status (a backdrop key) and by cancel.
pub const HELD: usize = 2;

/// What the held keys start with.
pub const HELD_PREFIX: &str = "held-";

/// The backdrop's envelopes.
pub fn backdrop() -> Vec<event_bridge::Envelope> {
    waiting_an_hour(BACKDROP_PREFIX, BACKDROP)
}

/// The held keys' envelopes.
pub fn held() -> Vec<event_bridge::Envelope> {
    waiting_an_hour(HELD_PREFIX, HELD)
}

fn waiting_an_hour(prefix: &str, count: usize) -> Vec<event_bridge::Envelope> {
    (0..count)
        .map(|i| {
            let mut envelope =
                event_bridge::Envelope::new("chaos.backdrop", serde_json::json!({ "i": i }));
            envelope.debounce = Some(event_bridge::task::Debounce {
                key: format!("{prefix}{i}"),
                period_ms: 3_600_000,
                max_ms: None,
            });
            envelope
        })
        .collect()
}

/// Probes of keys sure to be pending: `status` of the first [`HELD`] backdrop keys (they stay),
/// and a cancel of each held key (it must withdraw it: never run, no dead letter).
pub fn sure_orders(
    backdrop: &[event_bridge::Envelope],
    held: &[event_bridge::Envelope],
) -> Vec<ProbeOrder> {
    let order = |envelope: &event_bridge::Envelope, cancel: bool| {
        let key = envelope
            .debounce
            .as_ref()
            .expect("a debounced envelope")
            .key
            .clone();
        ProbeOrder {
            key,
            last: envelope.id.clone(),
            first: envelope.id.clone(),
            cancel,
        }
    };
    (backdrop.iter().take(HELD).map(|e| order(e, false)))
        .chain(held.iter().map(|e| order(e, true)))
        .collect()
}

/// A key to probe: its number, the envelope left and the first (replaced) one.
#[derive(Clone, Debug)]
pub struct ProbeOrder {
    pub key: String,
    pub last: String,
    pub first: String,
    /// Cancel the envelope left instead of asking its status.
    pub cancel: bool,
}

/// What one probe saw.
#[derive(Clone, Debug)]
pub struct Probe {
    pub order: ProbeOrder,
    /// `status` of the envelope left, and of the replaced one (the state, then whether the
    /// answer named the envelope's id and key), or the cancel's answer.
    pub last: Seen,
    pub first: Option<Seen>,
    /// When the answer about the envelope left came.
    pub answered: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub state: String,
    /// The answer named this envelope (its id, and its key when it is `debounced`).
    pub names_it: bool,
}

/// Whether the run probes the debounced key of task number `n` (half of them).
pub fn probed(n: usize) -> bool {
    (n / 20).is_multiple_of(2)
}

/// Which debounced keys a run probes: half by status, a quarter (of the others) by cancel.
pub fn order_for(n: usize, key: &str, ids: &[String]) -> Option<ProbeOrder> {
    let (first, last) = (ids.first()?, ids.last()?);
    if ids.len() != 3 || !probed(n) {
        return None;
    }
    Some(ProbeOrder {
        key: key.to_string(),
        last: last.clone(),
        first: first.clone(),
        cancel: (n / 20) % 4 == 2,
    })
}

/// Probes each key it is sent, each at once on a task of its own, on the prober's session;
/// returns what the probes saw once the channel closes.
pub async fn probe_loop(config: Config, mut rx: mpsc::UnboundedReceiver<ProbeOrder>) -> Vec<Probe> {
    let queue = new_queue(&config, "chaos-prober")
        .await
        .expect("the prober's session");
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let mut running = Vec::new();
    while let Some(order) = rx.recv().await {
        let (config, queue) = (config.clone(), Arc::clone(&queue));
        running.push(tokio::spawn(probe(config, queue, order)));
    }
    let mut done = Vec::new();
    for probe in running {
        done.push(probe.await.expect("a probe"));
    }
    done
}

async fn probe(config: Config, queue: Arc<tokio::sync::Mutex<Queue>>, order: ProbeOrder) -> Probe {
    let last = if order.cancel {
        ask(&config, &queue, |q| {
            cancel(q, order.last.clone(), order.key.clone())
        })
        .await
    } else {
        ask(&config, &queue, |q| {
            status(q, order.last.clone(), order.key.clone())
        })
        .await
    };
    let answered = Instant::now();
    let first = if order.cancel {
        None
    } else {
        Some(
            ask(&config, &queue, |q| {
                status(q, order.first.clone(), order.key.clone())
            })
            .await,
        )
    };
    Probe {
        order,
        last,
        first,
        answered,
    }
}

/// Runs `call` until it answers (on a new session when the old one is over), for 30 s at
/// most; the last error otherwise, as the state `error: …`.
async fn ask<F, Fut>(config: &Config, queue: &tokio::sync::Mutex<Queue>, call: F) -> Seen
where
    F: Fn(Queue) -> Fut,
    Fut: std::future::Future<Output = event_bridge::Result<Seen>>,
{
    let mut seen = Seen {
        state: "never answered".into(),
        names_it: false,
    };
    let mut tries = harness::Tries::every(Duration::from_secs(30), crate::producer::RETRY_PAUSE);
    while tries.again().await {
        let mut shared = queue.lock().await;
        if shared.session_over()
            && let Ok(fresh) = new_queue(config, "chaos-prober").await
        {
            *shared = fresh;
        }
        let current = shared.clone();
        drop(shared);
        match call(current).await {
            Ok(answer) => return answer,
            Err(e) => seen.state = format!("error: {e}"),
        }
    }
    seen
}

async fn status(queue: Queue, id: String, key: String) -> event_bridge::Result<Seen> {
    let now = queue.server_time().await?;
    let status = event_bridge::inspect::status(&queue, &now, &id).await?;
    Ok(seen(
        serde_json::to_value(&status).expect("a status"),
        &id,
        &key,
    ))
}

async fn cancel(queue: Queue, id: String, key: String) -> event_bridge::Result<Seen> {
    let cancelled = event_bridge::cancel::cancel(&queue, &id).await?;
    let answer = serde_json::to_value(&cancelled).expect("a cancel's answer");
    let state = answer["state"].as_str().unwrap_or("?").to_string();
    let names_it = state != "withdrawn" || answer["key"] == key.as_str();
    Ok(Seen { state, names_it })
}

/// The state of a status answer, and whether it names envelope `id` (and key `key` when it is
/// still debounced).
fn seen(answer: Value, id: &str, key: &str) -> Seen {
    let state = answer["state"].as_str().unwrap_or("?").to_string();
    let names_it = match state.as_str() {
        "debounced" => answer["id"] == id && answer["key"] == key,
        "pending" | "leased" | "waiting" => answer["task"]["id"] == id,
        _ => true,
    };
    Seen { state, names_it }
}

#[derive(Default)]
pub struct DebounceFigures {
    /// Debounced publishes, and those another replaced.
    pub publishes: usize,
    pub replaced: usize,
    /// Replaced envelopes delivered all the same (a violation), and debounced envelopes sent
    /// again after a failed publish (not judged: their answers are the retry's).
    pub delivered_replaced: Vec<String>,
    pub uncertain: usize,
    /// Replaced or run, the answers cannot tell which (not judged; see `Published::untold`).
    pub untold: usize,
    /// Keys probed by status, and what the envelope left was found as.
    pub statuses: usize,
    pub status_states: HashMap<String, usize>,
    /// Keys probed by cancel, and how many were withdrawn.
    pub cancels: usize,
    pub withdrawn: usize,
    pub cancel_states: HashMap<String, usize>,
    /// Probe answers that break the contract.
    pub probe_violations: Vec<String>,
    /// What each key probed was answered (the envelope's id, cancel or status, the answer),
    /// by key: what a key left stuck at the end was told.
    pub answers: HashMap<String, String>,
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> DebounceFigures {
    let published = input.published;
    let mut f = DebounceFigures::default();
    for sent in published.sent.iter().filter(|s| s.kind == Kind::Debounced) {
        f.publishes += 1;
        if published.uncertain.contains(&sent.id) {
            f.uncertain += 1;
            continue;
        }
        f.untold += usize::from(published.untold.contains(&sent.id));
        if !published.replaced.contains(&sent.id) {
            continue;
        }
        f.replaced += 1;
        if let Some(first) = by_id.get(sent.id.as_str()).and_then(|l| l.first()) {
            f.delivered_replaced.push(format!(
                "{} ({}) was replaced, yet delivered at {}",
                sent.id,
                first.task,
                crate::receiver::clock(first.arrived_ms)
            ));
        }
    }
    let dead: HashSet<&str> = input.left.dead.iter().map(|d| d.id.as_str()).collect();
    for probe in &published.probes {
        let delivered = by_id.get(probe.order.last.as_str()).map_or(&[][..], |l| l);
        let holder = holder_at(input, probe, delivered);
        let replaced = published.replaced.contains(&probe.order.first);
        if let Some(wrong) = judge_probe(probe, delivered, &dead, holder, replaced) {
            f.probe_violations.push(wrong);
        }
        let states = match probe.order.cancel {
            true => &mut f.cancel_states,
            false => &mut f.status_states,
        };
        *states.entry(probe.last.state.clone()).or_default() += 1;
        f.cancels += usize::from(probe.order.cancel);
        f.statuses += usize::from(!probe.order.cancel);
        f.withdrawn += usize::from(probe.order.cancel && probe.last.state == "withdrawn");
        let asked = if probe.order.cancel {
            "cancel"
        } else {
            "status"
        };
        let since = probe.answered.saturating_duration_since(input.start);
        let answer = format!(
            "{asked} of {} answered {} at +{:.1}s",
            probe.order.last,
            probe.last.state,
            since.as_secs_f64()
        );
        f.answers.insert(probe.order.key.clone(), answer);
    }
    f
}

/// The fencing token of the latest claim of the envelope left (under any of the names its
/// deliveries came under) that the consumers logged before `probe` answered: the holder a
/// `marked` answer means. `None` when no such claim was logged.
fn holder_at(input: &Inputs, probe: &Probe, delivered: &[&Delivery]) -> Option<i64> {
    let since = probe.answered.saturating_duration_since(input.start);
    let answered_ms = input.start_ms + since.as_millis() as i64;
    let names: HashSet<&str> = delivered.iter().map(|d| d.task.as_str()).collect();
    (input.claims.iter())
        .filter(|c| names.contains(c.task.as_str()) && c.at_ms <= answered_ms)
        .map(|c| c.token)
        .max()
}

/// What is wrong with `probe`'s answers, given the deliveries of the envelope left, the ids
/// of the dead letters, the token of the claim held when it answered (see [`holder_at`]), and
/// whether the publishes' answers say the first envelope was replaced (one whose period ended
/// before the next publish, as when a publish rode out an election, fired and ran: it was
/// never replaced).
fn judge_probe(
    probe: &Probe,
    delivered: &[&Delivery],
    dead: &HashSet<&str>,
    holder: Option<i64>,
    first_replaced: bool,
) -> Option<String> {
    let (order, last) = (&probe.order, &probe.last);
    let who = format!("{} (key {})", order.last, order.key);
    if last.state.starts_with("error") || last.state == "never answered" {
        return None;
    }
    if !last.names_it {
        return Some(format!(
            "{who}: {} answered for another envelope",
            last.state
        ));
    }
    if let Some(first) = &probe.first
        && first_replaced
        && first.state != "not_found"
    {
        return Some(format!(
            "{} was replaced by {}, yet status found it {}",
            order.first, order.last, first.state
        ));
    }
    // Before its first delivery, the envelope left is pending under its key, or a task in its
    // lane (fired), or held.
    let before = delivered.iter().any(|d| d.arrived <= probe.answered);
    let expected: &[&str] = match order.cancel {
        false => &["debounced", "pending", "leased"],
        true => &["withdrawn", "cancelled", "marked"],
    };
    if !before && !expected.contains(&last.state.as_str()) {
        return Some(format!(
            "{who}: answered {} before any delivery",
            last.state
        ));
    }
    match last.state.as_str() {
        "withdrawn" | "cancelled" if delivered.iter().any(|d| d.arrived > probe.answered) => {
            Some(format!("{who}: {}, yet delivered after", last.state))
        }
        "withdrawn" if dead.contains(order.last.as_str()) => {
            Some(format!("{who}: withdrawn, yet a dead letter"))
        }
        "cancelled" if !dead.contains(order.last.as_str()) => {
            Some(format!("{who}: cancelled, yet no dead letter"))
        }
        // Held when marked: the holder's attempt may still reach the receiver after the answer,
        // no later one; it ends completed by that attempt or buried as cancelled.
        "marked"
            if delivered
                .iter()
                .filter(|d| d.arrived > probe.answered)
                .count()
                > 1 =>
        {
            Some(format!("{who}: marked, yet delivered twice after"))
        }
        "marked"
            if let Some(later) = (delivered.iter())
                .filter(|d| d.arrived > probe.answered)
                .find(|d| holder.is_some_and(|h| d.token > h)) =>
        {
            Some(format!(
                "{who}: marked while token {} held it, yet run after by token {}",
                holder.unwrap_or_default(),
                later.token
            ))
        }
        "marked"
            if !dead.contains(order.last.as_str())
                && !delivered.iter().any(|d| d.answer == Answer::Ok) =>
        {
            Some(format!(
                "{who}: marked, yet neither completed nor a dead letter"
            ))
        }
        "dead" => Some(format!("{who}: status found it dead")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(first: &str) -> Probe {
        let seen = |state: &str| Seen {
            state: state.into(),
            names_it: true,
        };
        Probe {
            order: ProbeOrder {
                key: "k".into(),
                last: "last".into(),
                first: "first".into(),
                cancel: false,
            },
            last: seen("debounced"),
            first: Some(seen(first)),
            answered: Instant::now(),
        }
    }

    /// A replaced envelope found by status is a violation; the first envelope of a key that
    /// fired before the next publish (its answer replaced nothing) may be found completed.
    #[test]
    fn only_a_replaced_first_envelope_must_not_be_found() {
        let dead = HashSet::new();
        let completed = probe("completed");
        assert!(judge_probe(&completed, &[], &dead, None, true).is_some());
        assert!(judge_probe(&completed, &[], &dead, None, false).is_none());
        assert!(judge_probe(&probe("not_found"), &[], &dead, None, true).is_none());
    }
}
