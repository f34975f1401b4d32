//! The contract, judged from what the receiver recorded, what the producer was told, what the
//! faults and the operator did, the consumers' logs, and what was left in ZooKeeper. Each
//! check is a figure here; `summary` prints them and fails the test on the ones that break
//! the contract.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::consumers::{BACKOFF_BASE, BACKOFF_MAX, LIMITED_RATE_PER_S};
use crate::control::{PauseWindow, ScheduleSpan};
use crate::faults::{Fault, Record};
use crate::logs::Claim;
use crate::monitor::percentile;
use crate::producer::{Kind, LIMITED_TYPE, PAUSABLE_TYPE, Published, RepeatAnswer, TENANT_TYPE};
use crate::receiver::{Answer, Delivery, Ledger, Violation};
use crate::tree::Left;

/// A pause must stop new deliveries of its type within this.
pub const PAUSE_GRACE: Duration = Duration::from_secs(1);
/// A retry that comes sooner than its backoff by more than this is early (the receiver's
/// clock and the queue's, ZooKeeper's on this same machine, differ by a round trip or so).
pub const EARLY_TOLERANCE: Duration = Duration::from_millis(100);
/// What is asserted: nothing claimed more than this before it was due. Consumers judge
/// "due" by ZooKeeper's time read from a write's `mtime`, taken at the middle of the write's
/// round trip: the estimate can run ahead by half a slow round trip (seen: 0.3 s after a
/// leader change on two loaded cores).
pub const EARLY_BOUND: Duration = Duration::from_secs(1);
/// A delayed task delivered this long before it was due is early.
pub const DELAY_TOLERANCE_MS: i64 = 100;
/// Admissions of the limited route in a window of the gate's moments beyond `rate × T +
/// burst` forgiven for the rounding of floating-point tokens (the moments are the gate's own:
/// no jitter).
pub const RATE_ROUNDING: f64 = 1e-6;

/// Percentiles of a set of durations (seconds), with how many.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spread {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        Spread {
            count: values.len(),
            p50: percentile(&values, 0.5).unwrap_or(0.0),
            p99: percentile(&values, 0.99).unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }

    pub fn show(&self) -> String {
        if self.count == 0 {
            return "none".into();
        }
        format!(
            "p50 {:.2} s, p99 {:.2} s, max {:.2} s over {}",
            self.p50, self.p99, self.max, self.count
        )
    }
}

/// A window of the limited route's starts: how many, over how long.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub starts: usize,
    pub seconds: f64,
    /// Starts beyond `rate × seconds`.
    pub excess: f64,
}

#[derive(Default)]
pub struct Figures {
    pub resumable: crate::resumable::ResumableFigures,
    pub reclaims: crate::reclaims::ReclaimFigures,
    pub waits: crate::redrives::WaitFigures,
    pub spans: crate::spans::SpanFigures,
    pub steps: crate::steps::StepFigures,
    pub answers: BTreeMap<&'static str, usize>,
    pub requests: usize,
    // lost and stuck
    pub must_deliver: usize,
    pub lost: Vec<String>,
    pub strangers: Vec<String>,
    // cancel
    pub cancels: usize,
    pub cancel_answers: BTreeMap<String, usize>,
    /// Cancels that came after the task was due: the task may have run before, so its
    /// deliveries are not judged.
    pub cancels_unjudged: usize,
    /// Cancels answered otherwise than `cancelled`: id, task, answer.
    pub cancels_odd: Vec<String>,
    pub cancelled_delivered: Vec<String>,
    /// Cancelled ids the producer may have published twice that were delivered: the other
    /// copy, which nobody cancelled.
    pub cancelled_delivered_exempt: usize,
    pub cancelled_dead: usize,
    pub cancelled_not_dead: Vec<String>,
    pub other_dead: Vec<String>,
    // order
    pub groups: usize,
    pub grouped_successes: usize,
    pub order_violations: Vec<String>,
    /// Out-of-order successes on ids the producer may have published twice: not judged.
    pub order_exempt: usize,
    // pause
    pub pauses: Vec<PauseFigures>,
    // keys
    pub keys: usize,
    pub keys_two_ids: Vec<String>,
    pub repeats: usize,
    pub repeats_existing_same: usize,
    pub repeat_violations: Vec<String>,
    pub key_anomalies: Vec<String>,
    // limit
    pub most_open: usize,
    /// Moments over `max_in_flight` at the receiver: explained by a frozen worker's request
    /// (its session expired while its handler ran, which frees its slot early: documented),
    /// and not.
    pub over_limit_explained: usize,
    pub over_limit_unexplained: Vec<String>,
    /// The tenants' route: the most requests of one concurrency key open at once, and the
    /// moments over its cap, explained (as above) and not.
    pub most_open_per_key: usize,
    pub over_key_limit_explained: usize,
    pub over_key_limit_unexplained: Vec<String>,
    pub limited_claims: usize,
    pub worst_claims: Window,
    /// Admissions of the limited route through its gate, and the worst window of their moments.
    pub limited_admitted: usize,
    pub worst_admitted: Window,
    pub worst_arrivals: Window,
    pub burst: f64,
    // schedule
    pub slots: BTreeMap<i64, usize>,
    pub slots_required: Vec<i64>,
    pub slot_violations: Vec<String>,
    pub last_slot_ms: Option<i64>,
    // fencing
    pub violations: Vec<Violation>,
    pub violations_exempt: usize,
    /// Requests with a lower token sent by a consumer frozen (SIGSTOP) while it held the task:
    /// what the token lets a receiver refuse; not a failure.
    pub violations_frozen: usize,
    pub malformed: u64,
    // duplicates
    pub duplicates: usize,
    pub allowed_duplicates: usize,
    // timing
    /// Lateness past the backoff: ungrouped tasks of unlimited routes, grouped tasks, the
    /// limited route.
    pub retry_late: Spread,
    pub retry_late_grouped: Spread,
    pub retry_late_limited: Spread,
    /// Retries whose next claim was lost to a fault (the next delivery's attempt skips one:
    /// a claim whose answer a leader change lost, or a victim's), not measured.
    pub retries_skipped: usize,
    /// The worst retries, for the record.
    pub retries_latest: Vec<String>,
    pub retries_early: Vec<String>,
    /// How early the earliest retry came (s; 0 when none was early).
    pub retries_earliest: f64,
    pub back_after_fault: Vec<(String, Spread)>,
    pub never_back: Vec<String>,
    /// Victims' tasks whose handler had succeeded before the fault, not delivered again
    /// (their completion landed).
    pub back_done_before: usize,
    /// Victims' tasks cancelled while held and buried as cancelled, not delivered again.
    pub back_cancelled: usize,
    pub delayed_early: Vec<String>,
    /// How early the earliest delayed task came (s; 0 when none was early).
    pub delayed_earliest: f64,
    pub delayed_late: Spread,
    pub plain_latency: Spread,
    /// Publish -> first delivery by kind (delayed tasks: from due).
    pub latency_by_kind: Vec<(&'static str, Spread)>,
    // lanes
    pub lanes: crate::lanes::LaneFigures,
    pub expiry: crate::expiry::ExpiryFigures,
    // fairness across keys
    pub fairness: crate::fairness::FairFigures,
    // debounce
    pub debounce: crate::debounce::DebounceFigures,
    // batch
    pub batch: crate::batches::BatchFigures,
    // dependencies
    pub after: crate::after::AfterFigures,
}

pub struct PauseFigures {
    pub length: f64,
    /// Deliveries of the type that started more than [`PAUSE_GRACE`] after the pause returned
    /// and before the resume began.
    pub violations: Vec<String>,
    /// Its deliveries in the grace second.
    pub in_grace: usize,
    /// Tasks of the type published while paused.
    pub published: usize,
    /// From the resume's start to its first delivery.
    pub first_after: Option<f64>,
}

pub struct Inputs<'a> {
    pub start: Instant,
    /// The wall clock at `start`, ms.
    pub start_ms: i64,
    pub ledger: &'a Ledger,
    pub published: &'a Published,
    pub faults: &'a [Record],
    pub pauses: &'a [PauseWindow],
    pub schedule: ScheduleSpan,
    pub stored_schedule: Option<serde_json::Value>,
    pub left: &'a Left,
    pub claims: &'a [Claim],
    /// Admissions through rates' gates: the gate's path, and the bucket's moment (ZooKeeper ms).
    pub admitted: &'a [(String, i64)],
    /// When each claim's handler ended (task, fencing token: wall ms), as its consumer logged.
    pub ended: &'a HashMap<(String, i64), i64>,
    pub batch: Option<&'a event_bridge::batch::BatchStatus>,
    /// The resumable tasks and their signals (see `resumable`), and the signals' payload ids
    /// still kept at the end.
    pub resumable: &'a crate::resumable::ResumablePublished,
    pub kept_signals: &'a [String],
    /// Tasks released to resume in another run, cut at a run's deadline, and claimed before
    /// their sleep or wait ended (suspended again), as the consumers logged.
    pub released: &'a [crate::logs::Released],
    pub cuts: &'a [crate::logs::Cut],
    pub back_early: usize,
    /// Every span the consumers exported (see `spans`).
    pub spans: &'a [serde_json::Value],
    /// The stepper's steps as it logged them, and its tasks: published, completed and dead
    /// (`steps`).
    pub steps_ran: &'a [crate::logs::StepRan],
    pub stepped: (usize, (usize, usize)),
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Writes the receiver's ledger, the producer's record and the consumers' spans into `dir` as
/// JSON lines (`deliveries.jsonl`, `published.jsonl`, `spans.jsonl`; times in wall-clock ms
/// and in seconds from the start of publishing), for reading beside the consumers' logs when
/// a check fails.
pub fn dump(dir: &std::path::Path, input: &Inputs) {
    use std::io::Write;
    let since = |at: Instant| at.saturating_duration_since(input.start).as_secs_f64();
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dir.join("deliveries.jsonl")).expect("create deliveries.jsonl"),
    );
    for d in &input.ledger.deliveries {
        let line = serde_json::json!({
            "id": d.id, "task": d.task, "type": d.event_type, "group": d.group, "seq": d.seq,
            "key": d.key, "slot_ms": d.slot_ms, "attempt": d.attempt, "token": d.token,
            "arrived_ms": d.arrived_ms, "arrived_s": since(d.arrived),
            "answered_s": since(d.answered), "answer": format!("{:?}", d.answer),
        });
        writeln!(out, "{line}").expect("write deliveries.jsonl");
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dir.join("faults.jsonl")).expect("create faults.jsonl"),
    );
    for r in input.faults {
        let line = serde_json::json!({
            "at_s": r.at.as_secs_f64(), "what": r.what, "held": r.held, "leases": r.leases,
            "victim_held": r.victim_held,
        });
        writeln!(out, "{line}").expect("write faults.jsonl");
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dir.join("published.jsonl")).expect("create published.jsonl"),
    );
    for s in &input.published.sent {
        let line = serde_json::json!({
            "id": s.id, "kind": s.kind.name(), "task": s.task, "at_s": since(s.at),
            "due_ms": s.due_ms, "key": s.key, "group": s.group,
            "uncertain": input.published.uncertain.contains(&s.id),
        });
        writeln!(out, "{line}").expect("write published.jsonl");
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dir.join("spans.jsonl")).expect("create spans.jsonl"),
    );
    for span in input.spans {
        writeln!(out, "{span}").expect("write spans.jsonl");
    }
}

/// The backoff a failed delivery earns: the queue's for its attempt, at least the
/// `Retry-After` of a 503, at most `BACKOFF_MAX_MS`.
pub fn backoff_bound(d: &Delivery) -> Duration {
    let doublings = d.attempt.saturating_sub(1).min(20);
    let backoff = (BACKOFF_BASE * (1u32 << doublings)).min(BACKOFF_MAX);
    match d.answer {
        Answer::Busy => backoff.max(Duration::from_secs(1)).min(BACKOFF_MAX),
        _ => backoff,
    }
}

pub fn judge(input: &Inputs) -> Figures {
    let mut f = Figures::default();
    let (published, ledger) = (input.published, input.ledger);
    let mut by_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &ledger.deliveries {
        by_id.entry(d.id.as_str()).or_default().push(d);
        let name = match d.answer {
            Answer::Ok => "200",
            Answer::Error => "500",
            Answer::Busy => "503",
            Answer::TimedOut => "timed out",
            Answer::Dropped => "dropped",
        };
        *f.answers.entry(name).or_default() += 1;
    }
    for list in by_id.values_mut() {
        list.sort_by_key(|d| d.arrived);
    }
    f.requests = ledger.deliveries.len();
    let succeeded = |id: &str| {
        by_id
            .get(id)
            .is_some_and(|l| l.iter().any(|d| d.answer == Answer::Ok))
    };

    // Lost: every published task but the cancelled, and every schedule's task seen.
    let scheduled: HashSet<&str> = (ledger.deliveries.iter())
        .filter(|d| d.slot_ms.is_some())
        .map(|d| d.id.as_str())
        .collect();
    let deliverable = published.deliverable();
    f.must_deliver = deliverable.len() + scheduled.len();
    f.lost = (deliverable.iter().map(String::as_str))
        .chain(scheduled.iter().copied())
        .filter(|id| !succeeded(id))
        .map(str::to_string)
        .collect();
    f.batch = crate::batches::judge(input, &by_id);
    let resumable = input.resumable.ids();
    let mut sent: HashSet<&str> = published.sent.iter().map(|s| s.id.as_str()).collect();
    sent.extend(resumable.iter().copied());
    let callbacks = &f.batch.callback_ids;
    f.strangers = (by_id.keys())
        .filter(|id| !sent.contains(*id) && !scheduled.contains(*id))
        .filter(|id| !callbacks.contains(**id))
        .map(|id| id.to_string())
        .collect();

    // Cancels: never delivered, dead with the reason `cancelled`; nothing else dead.
    // A cancel that answered after the task was due came too late (the machine was slow, or
    // the publish rode out a leader election before it answered, past the task's due time):
    // the task may have run, even before a cancel that then found it waiting out a retry and
    // buried it, so its deliveries are not judged; every other cancel must have answered
    // `cancelled`.
    let late: HashSet<&str> = (published.cancels.iter())
        .filter(|c| c.late)
        .map(|c| c.id.as_str())
        .collect();
    let cancelled: HashSet<&str> = (published.sent.iter())
        .filter(|s| s.kind == Kind::Cancelled && !late.contains(s.id.as_str()))
        .map(|s| s.id.as_str())
        .collect();
    f.cancels = published.count(Kind::Cancelled);
    f.cancels_unjudged = late.len();
    for c in &published.cancels {
        *f.cancel_answers.entry(c.answer.clone()).or_default() += 1;
        if c.answer != "cancelled" && !c.late {
            f.cancels_odd
                .push(format!("{} ({}): {}", c.id, c.task, c.answer));
        }
    }
    let (exempt, delivered): (Vec<&str>, Vec<&str>) = (cancelled.iter())
        .filter(|id| by_id.contains_key(*id))
        .partition(|id| published.uncertain.contains(**id));
    f.cancelled_delivered = delivered.into_iter().map(str::to_string).collect();
    f.cancelled_delivered_exempt = exempt.len();
    let dead_cancelled: HashSet<&str> = (input.left.dead.iter())
        .filter(|d| d.reason == "cancelled")
        .map(|d| d.id.as_str())
        .collect();
    f.cancelled_dead = cancelled
        .iter()
        .filter(|id| dead_cancelled.contains(*id))
        .count();
    f.cancelled_not_dead = (cancelled.iter())
        .filter(|id| !dead_cancelled.contains(*id))
        .map(|id| id.to_string())
        .collect();
    // A probe's cancel that found the task held answers `marked`: its holder's completion
    // still counts, but a holder that dies leaves it to be buried as cancelled, not run again.
    let probed: HashSet<&str> = (published.probes.iter())
        .filter(|p| p.order.cancel && ["cancelled", "marked"].contains(&p.last.state.as_str()))
        .map(|p| p.order.last.as_str())
        .collect();
    let marked_dead: HashSet<&str> = (published.probes.iter())
        .filter(|p| p.order.cancel && p.last.state == "marked")
        .map(|p| p.order.last.as_str())
        .filter(|id| dead_cancelled.contains(id))
        .collect();
    let any_cancel = |id: &str| cancelled.contains(id) || late.contains(id) || probed.contains(id);
    let died_with_parent = crate::after::AfterFigures::expected_dead(input);
    // Judged by `expiry`: published expired, dead as expired.
    let expired: HashSet<&str> = (published.sent.iter())
        .filter(|s| s.kind == Kind::Expired)
        .map(|s| s.id.as_str())
        .collect();
    f.other_dead = (input.left.dead.iter())
        .filter(|d| !(any_cancel(d.id.as_str()) && d.reason == "cancelled"))
        .filter(|d| !died_with_parent.contains(&d.id))
        .filter(|d| !(expired.contains(d.id.as_str()) && d.reason == "expired"))
        .map(|d| format!("{} ({}, id {}): {}", d.name, d.event_type, d.id, d.reason))
        .collect();

    order(&mut f, input, &by_id);
    pauses(&mut f, input);
    keys(&mut f, input);
    limit(&mut f, input);
    f.lanes = crate::lanes::judge(input, &by_id);
    f.expiry = crate::expiry::judge(input, &by_id);
    f.fairness = crate::fairness::judge(input, &by_id);
    f.debounce = crate::debounce::judge(input, &by_id);
    f.after = crate::after::judge(input, &by_id);
    schedule(&mut f, input, &by_id);

    // Fencing, as the receiver judged it; ids maybe published twice are not judged.
    let uncertain = &published.uncertain;
    let (exempt, violations): (Vec<_>, Vec<_>) =
        (ledger.violations.iter().cloned()).partition(|v| uncertain.contains(&v.id));
    // A frozen holder's request can reach the receiver after its thaw, later than the next
    // holder's: the bytes were handed to the HTTP client's connection task before the freeze,
    // and no check in the holder can take them back. That is the stale writer the fencing token
    // is for: the receiver sees a lower token and can refuse it. Counted apart, not failed.
    let (refusable, violations) = frozen_apart(violations, input.claims, &freezes(input));
    f.violations = violations;
    f.violations_exempt = exempt.len();
    f.violations_frozen = refusable.len();
    f.malformed = ledger.malformed;

    // Duplicates: deliveries after the id's first success (a resumable task's steps are
    // judged by `resumable`).
    for (id, list) in &by_id {
        if resumable.contains(id) {
            continue;
        }
        if let Some(first) = list.iter().position(|d| d.answer == Answer::Ok) {
            f.duplicates += list.len() - first - 1;
        }
    }
    let held: usize = input.faults.iter().map(|r| r.held).sum();
    f.allowed_duplicates = held + published.resent;

    f.resumable = crate::resumable::judge(input, &by_id, input.kept_signals);
    f.reclaims = crate::reclaims::judge(input.released, input.claims);
    let resumable = (ledger.deliveries.iter()).filter(|d| d.resume.is_some());
    f.waits = crate::redrives::judge(resumable, &input.resumable.redrives, input.back_early);
    f.spans = crate::spans::judge(input.spans, &ledger.deliveries);
    let stepper = |at: &crate::logs::At| at.log == crate::steps::LOG;
    let released: Vec<_> = (input.released.iter())
        .filter(|r| stepper(&r.at))
        .cloned()
        .collect();
    let cuts: Vec<_> = input
        .cuts
        .iter()
        .filter(|c| stepper(&c.at))
        .cloned()
        .collect();
    f.steps = crate::steps::judge(input.steps_ran, &released, &cuts);
    (f.steps.tasks, (f.steps.completed, f.steps.dead)) = input.stepped;
    retries(&mut f, input, &by_id);
    // A task buried as cancelled is not expected back after a fault, whoever buried it: a
    // victim may have held one whose cancel came late, which another consumer buried once
    // the victim's lease was freed.
    let buried: HashSet<&str> = marked_dead.union(&dead_cancelled).copied().collect();
    back_after_faults(&mut f, input, &by_id, &buried);

    // Delayed tasks: never before due; how long after.
    let claimers: HashMap<(&str, i64), &Claim> = (input.claims.iter())
        .map(|c| ((c.task.as_str(), c.token), c))
        .collect();
    let mut late = Vec::new();
    for s in published.sent.iter().filter(|s| s.kind == Kind::Delayed) {
        let (Some(due), Some(first)) = (s.due_ms, by_id.get(s.id.as_str()).and_then(|l| l.first()))
        else {
            continue;
        };
        f.delayed_earliest = f
            .delayed_earliest
            .max((due - first.arrived_ms) as f64 / 1000.0);
        if first.arrived_ms < due - DELAY_TOLERANCE_MS {
            let claim = claimers.get(&(first.task.as_str(), first.token));
            f.delayed_early.push(format!(
                "{} ({}) delivered {} ms before due, at {}, claimed {} by {}",
                s.id,
                first.task,
                due - first.arrived_ms,
                crate::receiver::clock(first.arrived_ms),
                claim.map_or("?".into(), |c| crate::receiver::clock(c.at_ms)),
                claim.map_or("?", |c| c.by.as_str()),
            ));
        }
        late.push((first.arrived_ms - due) as f64 / 1000.0);
    }
    f.delayed_late = Spread::of(late);

    // Plain tasks: publish -> first delivery.
    let plain: Vec<f64> = (published.sent.iter())
        .filter(|s| s.kind == Kind::Plain)
        .filter_map(|s| {
            let first = by_id.get(s.id.as_str())?.first()?;
            Some(secs(first.arrived.saturating_duration_since(s.at)))
        })
        .collect();
    f.plain_latency = Spread::of(plain);
    for kind in Kind::ALL {
        if matches!(kind, Kind::Cancelled | Kind::Delayed | Kind::Expired) {
            continue;
        }
        let values: Vec<f64> = (published.sent.iter())
            .filter(|s| s.kind == kind)
            .filter_map(|s| {
                let first = by_id.get(s.id.as_str())?.first()?;
                Some(secs(first.arrived.saturating_duration_since(s.at)))
            })
            .collect();
        f.latency_by_kind.push((kind.name(), Spread::of(values)));
    }
    f
}

/// Per group, successes in publish order: a success of seq n never after one of m > n.
fn order(f: &mut Figures, input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) {
    let mut groups: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for list in by_id.values() {
        for d in list.iter().filter(|d| d.answer == Answer::Ok) {
            if let (Some(g), Some(_)) = (&d.group, d.seq) {
                groups.entry(g.as_str()).or_default().push(d);
            }
        }
    }
    f.groups = groups.len();
    for (group, mut successes) in groups {
        successes.sort_by_key(|d| d.arrived);
        f.grouped_successes += successes.len();
        let mut highest: Option<&Delivery> = None;
        for d in successes {
            let seq = d.seq.unwrap_or(0);
            match highest {
                Some(h) if seq < h.seq.unwrap_or(0) => {
                    if input.published.uncertain.contains(&d.id) {
                        f.order_exempt += 1;
                    } else {
                        let by = |d: &Delivery| {
                            (input.claims.iter())
                                .find(|c| c.task == d.task && c.token == d.token)
                                .map_or("?".to_string(), |c| c.by.clone())
                        };
                        f.order_violations.push(format!(
                            "group {group}: seq {seq} ({}, {}, claimed by {}) succeeded {:.3} s after seq {} ({}, claimed by {})",
                            d.task,
                            crate::receiver::clock(d.arrived_ms),
                            by(d),
                            secs(d.arrived.saturating_duration_since(h.arrived)),
                            h.seq.unwrap_or(0),
                            h.task,
                            by(h)
                        ));
                    }
                }
                Some(h) if seq <= h.seq.unwrap_or(0) => {}
                _ => highest = Some(d),
            }
        }
    }
}

/// No delivery of the paused type starts more than a second after `pause` returned, before
/// `resume` began.
fn pauses(f: &mut Figures, input: &Inputs) {
    for w in input.pauses {
        let grace = w.paused + PAUSE_GRACE;
        let of_type = (input.ledger.deliveries.iter()).filter(|d| d.event_type == PAUSABLE_TYPE);
        let mut figures = PauseFigures {
            length: secs(w.resuming - w.paused),
            violations: Vec::new(),
            in_grace: 0,
            published: (input.published.sent.iter())
                .filter(|s| s.kind == Kind::Pausable && s.at > w.paused && s.at < w.resuming)
                .count(),
            first_after: None,
        };
        for d in of_type {
            if d.arrived > w.paused && d.arrived <= grace {
                figures.in_grace += 1;
            } else if d.arrived > grace && d.arrived < w.resuming {
                figures.violations.push(format!(
                    "{} ({}) attempt {} arrived {:.2} s after the pause returned",
                    d.id,
                    d.task,
                    d.attempt,
                    secs(d.arrived - w.paused)
                ));
            } else if d.arrived >= w.resuming {
                let after = secs(d.arrived - w.resuming);
                figures.first_after = Some(figures.first_after.map_or(after, |a| a.min(after)));
            }
        }
        f.pauses.push(figures);
    }
}

/// One task per idempotency key: the receiver sees one id per key, and every repeat is
/// answered with the key's task.
fn keys(f: &mut Figures, input: &Inputs) {
    let mut ids: BTreeMap<&str, HashSet<&str>> = BTreeMap::new();
    for d in &input.ledger.deliveries {
        if let Some(key) = &d.key {
            ids.entry(key.as_str()).or_default().insert(d.id.as_str());
        }
    }
    f.keys = (input.published.sent.iter())
        .filter(|s| s.key.is_some())
        .count();
    f.keys_two_ids = (ids.iter())
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(key, ids)| format!("{key}: ids {ids:?}"))
        .collect();
    f.repeats = input.published.repeats.len();
    for r in &input.published.repeats {
        match &r.answer {
            RepeatAnswer::Existing { id, .. } if *id == r.original => f.repeats_existing_same += 1,
            other => f.repeat_violations.push(format!(
                "key {} published again (id {}): {other:?}, its task is {}",
                r.key, r.id, r.original
            )),
        }
    }
    f.key_anomalies = input.published.key_anomalies.clone();
}

/// The limited route: open requests at the receiver never above `max_in_flight`; admissions in
/// any window of its gate's moments (each admission's bucket moment, by ZooKeeper's clock, as
/// the admitting consumer logged it) within `rate × T + burst`: every consumer's admissions
/// are serialized by the gate's version, so a lost update of the bucket, or a moment moved
/// back, shows as more. The consumers' `task claimed` lines and the receiver's arrivals are
/// measured the same way, and shown (they carry the time from commit to log or to request).
/// The tenants' route: open requests of one concurrency key never above its `per_key` cap.
fn limit(f: &mut Figures, input: &Inputs) {
    f.most_open = input.ledger.most_open;
    let claimer: HashMap<(&str, i64), &str> = (input.claims.iter())
        .map(|c| ((c.task.as_str(), c.token), c.consumer.as_str()))
        .collect();
    let frozen: Vec<(&str, i64, i64)> = (input.faults.iter())
        .filter(|r| matches!(r.fault, Fault::PauseWorker(_)))
        .filter_map(|r| {
            let from = input.start_ms + r.at.as_millis() as i64 - 1_000;
            let to = from + (crate::faults::PAUSE + Duration::from_secs(3)).as_millis() as i64;
            Some((r.consumer.as_deref()?, from, to))
        })
        .collect();
    // A request the receiver held until its sender gave up: the sender stopped waiting (and
    // then freed its place) when its handler ended, as its log says, however late the receiver
    // saw the connection close. That is sooner than its arrival plus the sink's timeout when
    // the run's deadline shortened the request's timeout; without a log line, that bound.
    let gave_up = gave_up(&input.ledger.deliveries, input.ended);
    let (senders, cap) = (
        Senders {
            claimer: &claimer,
            frozen: &frozen,
            gave_up: &gave_up,
        },
        crate::consumers::LIMITED_MAX_IN_FLIGHT,
    );
    (f.over_limit_explained, f.over_limit_unexplained) =
        judge_over(&input.ledger.over_limit, cap, &senders);
    f.most_open_per_key = input.ledger.most_open_per_key;
    let cap = crate::consumers::TENANT_MAX_PER_KEY;
    (f.over_key_limit_explained, f.over_key_limit_unexplained) =
        judge_over(&input.ledger.over_key_limit, cap, &senders);
    let rate = LIMITED_RATE_PER_S;
    f.burst = (rate / 10.0).max(1.0);
    let limited: HashSet<(&str, i64)> = (input.ledger.deliveries.iter())
        .filter(|d| d.event_type == LIMITED_TYPE)
        .map(|d| (d.task.as_str(), d.token))
        .collect();
    let mut claims: Vec<i64> = (input.claims.iter())
        .filter(|c| limited.contains(&(c.task.as_str(), c.token)))
        .map(|c| c.at_ms)
        .collect();
    claims.sort();
    f.limited_claims = claims.len();
    f.worst_claims = worst_window(&claims, rate);
    let gate = format!(
        "/limits/{}",
        event_bridge::layout::encode_segment(LIMITED_TYPE)
    );
    let mut admitted: Vec<i64> = (input.admitted.iter())
        .filter(|(path, _)| path.ends_with(&gate))
        .map(|(_, at_ms)| *at_ms)
        .collect();
    admitted.sort();
    f.limited_admitted = admitted.len();
    f.worst_admitted = worst_window(&admitted, rate);
    let mut arrivals: Vec<i64> = (input.ledger.deliveries.iter())
        .filter(|d| d.event_type == LIMITED_TYPE)
        .map(|d| d.arrived_ms)
        .collect();
    arrivals.sort();
    f.worst_arrivals = worst_window(&arrivals, rate);
}

/// When the sender of each request the receiver never answered gave up on it (by task and
/// fencing token, wall ms): its handler's end as its consumer logged it, else (a timed-out
/// request whose line is missing) its arrival plus the sink's timeout, which no request
/// outlives.
fn gave_up<'a>(
    deliveries: &'a [Delivery],
    ended: &HashMap<(String, i64), i64>,
) -> HashMap<(&'a str, i64), i64> {
    let timeout = crate::consumers::HTTP_TIMEOUT.as_millis() as i64;
    deliveries
        .iter()
        .filter(|d| matches!(d.answer, Answer::TimedOut | Answer::Dropped))
        .filter_map(|d| {
            let logged = ended.get(&(d.task.clone(), d.token)).copied();
            let bound = (d.answer == Answer::TimedOut).then_some(d.arrived_ms + timeout);
            let at = match (logged, bound) {
                (Some(logged), Some(bound)) => logged.min(bound),
                (logged, bound) => logged.or(bound)?,
            };
            Some(((d.task.as_str(), d.token), at))
        })
        .collect()
}

/// Who sent the requests open at the receiver: the consumer of each claim (by task and token),
/// the frozen consumers (and when), and when the sender of a request that timed out gave up.
struct Senders<'a> {
    claimer: &'a HashMap<(&'a str, i64), &'a str>,
    frozen: &'a [(&'a str, i64, i64)],
    gave_up: &'a HashMap<(&'a str, i64), i64>,
}

impl Senders<'_> {
    fn by(&self, task: &str, token: i64) -> &str {
        self.claimer.get(&(task, token)).copied().unwrap_or("?")
    }

    /// Whether the request of `task` (`token`), open at the receiver at `at_ms`, no longer
    /// counts against the cap: its sender was frozen then (a worker whose session expired
    /// while its handler ran loses its slot early: documented), or had given up on it.
    fn explains(&self, (task, token): &(String, i64), at_ms: i64) -> bool {
        let by = self.by(task, *token);
        let frozen =
            (self.frozen.iter()).any(|(id, from, to)| *id == by && *from <= at_ms && at_ms <= *to);
        let gave_up = (self.gave_up.get(&(task.as_str(), *token))).is_some_and(|at| *at <= at_ms);
        frozen || gave_up
    }
}

/// Moments at which the receiver had more than `cap` requests open (of a route, of a key):
/// how many the requests [`Senders::explains`] explain, and the others, described.
fn judge_over(
    moments: &[(i64, Vec<(String, i64)>)],
    cap: usize,
    senders: &Senders,
) -> (usize, Vec<String>) {
    let (mut explained, mut unexplained) = (0, Vec::new());
    for (at_ms, open) in moments {
        if open.iter().filter(|o| !senders.explains(o, *at_ms)).count() <= cap {
            explained += 1;
            continue;
        }
        let who: Vec<String> = (open.iter())
            .map(|(task, token)| format!("{task} by {}", senders.by(task, *token)))
            .collect();
        unexplained.push(format!(
            "{} open at {}: {}",
            open.len(),
            crate::receiver::clock(*at_ms),
            who.join(", ")
        ));
    }
    (explained, unexplained)
}

/// The window of sorted times (ms) with the most starts beyond `rate` (per second).
fn worst_window(times: &[i64], rate: f64) -> Window {
    let mut worst = Window::default();
    for i in 0..times.len() {
        for j in i..times.len().min(i + 400) {
            let seconds = (times[j] - times[i]) as f64 / 1000.0;
            let starts = j - i + 1;
            let excess = starts as f64 - rate * seconds;
            if excess > worst.excess {
                worst = Window {
                    starts,
                    seconds,
                    excess,
                };
            }
        }
    }
    worst
}

/// Exactly one task per slot of the every-minute schedule: every slot after it was added and
/// well before it was paused made one, none made two, none came after the pause.
fn schedule(f: &mut Figures, input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) {
    let span = input.schedule;
    let mut slots: BTreeMap<i64, HashSet<&str>> = BTreeMap::new();
    for (id, list) in by_id {
        if let Some(slot) = list.first().and_then(|d| d.slot_ms) {
            slots.entry(slot).or_default().insert(id);
        }
    }
    f.slots = slots.iter().map(|(s, ids)| (*s, ids.len())).collect();
    let minute = 60_000;
    let mut slot = (span.added_ms / minute + 1) * minute;
    while slot <= span.pausing_ms - 5_000 {
        f.slots_required.push(slot);
        slot += minute;
    }
    for required in &f.slots_required {
        if !slots.contains_key(required) {
            f.slot_violations.push(format!(
                "slot {} made no task",
                crate::receiver::clock(*required)
            ));
        }
    }
    for (slot, ids) in &slots {
        if ids.len() > 1 {
            f.slot_violations.push(format!(
                "slot {} made {} tasks: {ids:?}",
                crate::receiver::clock(*slot),
                ids.len()
            ));
        }
        if *slot <= span.adding_ms || *slot > span.paused_ms {
            f.slot_violations.push(format!(
                "slot {} made a task outside the schedule's life ({} to {})",
                crate::receiver::clock(*slot),
                crate::receiver::clock(span.adding_ms),
                crate::receiver::clock(span.paused_ms)
            ));
        }
    }
    f.last_slot_ms = (input.stored_schedule.as_ref()).and_then(|s| s.get("last_slot_ms")?.as_i64());
}

/// For each failed delivery answered at t, the next delivery of its id at t2: t2 − t − its
/// backoff. Left out: ids maybe published twice, deliveries of the paused type whose retry
/// spans a pause, and tasks a killed or frozen consumer held (they wait for their lease).
fn retries(f: &mut Figures, input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) {
    let victims: HashMap<&str, Vec<Instant>> = {
        let mut v: HashMap<&str, Vec<Instant>> = HashMap::new();
        for r in input.faults {
            for (_, id) in &r.victim_held {
                v.entry(id.as_str()).or_default().push(input.start + r.at);
            }
        }
        v
    };
    let paused_span = |a: Instant, b: Instant, event_type: &str| {
        event_type == PAUSABLE_TYPE && (input.pauses.iter()).any(|w| a < w.resuming && b > w.paused)
    };
    let (mut late, mut late_grouped, mut late_limited) = (Vec::new(), Vec::new(), Vec::new());
    let mut latest: Vec<(f64, String)> = Vec::new();
    for (id, list) in by_id {
        if input.published.uncertain.contains(*id) {
            continue;
        }
        for pair in list.windows(2) {
            let (failed, next) = (pair[0], pair[1]);
            if !failed.answer.failed() {
                continue;
            }
            let (t, t2) = (failed.answered, next.arrived);
            let hit = victims.get(id).is_some_and(|times| {
                times
                    .iter()
                    .any(|at| *at + Duration::from_secs(1) >= failed.arrived && *at <= t2)
            });
            if hit || paused_span(t, t2, &failed.event_type) {
                continue;
            }
            if next.attempt > failed.attempt + 1 {
                f.retries_skipped += 1;
                continue;
            }
            let bound = backoff_bound(failed);
            let lateness = secs(t2.saturating_duration_since(t)) - secs(bound);
            f.retries_earliest = f.retries_earliest.max(-lateness);
            if lateness < -secs(EARLY_TOLERANCE) {
                f.retries_early.push(format!(
                    "{id} ({}) attempt {} answered {:?} at {}, next attempt {} arrived after {:.3} s, backoff {:?}",
                    failed.task,
                    failed.attempt,
                    failed.answer,
                    crate::receiver::clock(failed.arrived_ms),
                    next.attempt,
                    secs(t2.saturating_duration_since(t)),
                    bound
                ));
            }
            latest.push((
                lateness,
                format!(
                    "{:.2} s: {} {} attempt {} {:?} at +{:.2}s, next {} attempt {} at +{:.2}s",
                    lateness,
                    failed.event_type,
                    failed.task,
                    failed.attempt,
                    failed.answer,
                    secs(t.saturating_duration_since(input.start)),
                    next.task,
                    next.attempt,
                    secs(t2.saturating_duration_since(input.start)),
                ),
            ));
            // A limited task's retry waits behind its route's (or its key's) backlog.
            if failed.event_type == LIMITED_TYPE || failed.event_type == TENANT_TYPE {
                late_limited.push(lateness);
            } else if failed.group.is_some() {
                late_grouped.push(lateness);
            } else {
                late.push(lateness);
            }
        }
    }
    latest.sort_by(|a, b| b.0.total_cmp(&a.0));
    f.retries_latest = latest.into_iter().take(5).map(|(_, s)| s).collect();
    f.retry_late = Spread::of(late);
    f.retry_late_grouped = Spread::of(late_grouped);
    f.retry_late_limited = Spread::of(late_limited);
}

/// For each task a killed or frozen consumer held: from the fault to its next delivery.
/// How soon what a killed or frozen consumer held came back. A task cancelled while held
/// (`marked`, in `buried`) and buried as cancelled is not expected back.
fn back_after_faults(
    f: &mut Figures,
    input: &Inputs,
    by_id: &HashMap<&str, Vec<&Delivery>>,
    buried: &HashSet<&str>,
) {
    let mut by_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in input.faults {
        let at = input.start + r.at;
        let kind = match r.fault {
            Fault::KillWorker(_) => "SIGKILL worker",
            Fault::PauseWorker(_) => "SIGSTOP worker",
            Fault::KillDrain(_) => "SIGKILL drain",
            Fault::KillScheduled => "SIGKILL scheduled run",
            Fault::KillLeader => continue,
        };
        for (name, id) in &r.victim_held {
            let deliveries = by_id.get(id.as_str());
            let next = deliveries
                .and_then(|l| l.iter().find(|d| d.arrived > at))
                .map(|d| secs(d.arrived - at));
            // Its handler had succeeded: the victim's completion may have landed before the
            // fault (a task left unsettled would still be in `tasks/` at the end: stuck).
            let succeeded_before = deliveries
                .is_some_and(|l| l.iter().any(|d| d.answer == Answer::Ok && d.arrived <= at));
            match next {
                Some(after) => by_kind.entry(kind).or_default().push(after),
                None if succeeded_before => f.back_done_before += 1,
                None if buried.contains(id.as_str()) => f.back_cancelled += 1,
                None => f.never_back.push(format!(
                    "{name} (id {id}), held at {kind} +{:.1}s",
                    secs(r.at)
                )),
            }
        }
    }
    let all: Vec<f64> = by_kind.values().flatten().copied().collect();
    f.back_after_fault = by_kind
        .into_iter()
        .map(|(k, v)| (k.to_string(), Spread::of(v)))
        .collect();
    f.back_after_fault.push(("all".into(), Spread::of(all)));
}

/// The workers frozen (SIGSTOP) during the run: consumer id, and from when until when they
/// were frozen (wall clock, ms).
/// The violations a frozen holder made (`refusable`: its claim came before its freeze, its
/// request within a second of its thaw), and the rest. A claim is found by its task and its
/// token: the tasks of one claim batch share its token (their leases are created by one
/// multi-op, one zxid), so a token alone may name another task of the batch, claimed (or
/// logged) after the thaw.
fn frozen_apart(
    violations: Vec<Violation>,
    claims: &[Claim],
    frozen: &[(String, i64, i64)],
) -> (Vec<Violation>, Vec<Violation>) {
    let claimed_by: HashMap<(&str, i64), &Claim> = (claims.iter())
        .map(|c| ((c.task.as_str(), c.token), c))
        .collect();
    violations.into_iter().partition(|v| {
        claimed_by
            .get(&(v.task.as_str(), v.token))
            .is_some_and(|claim| {
                frozen.iter().any(|(consumer, from, to)| {
                    *consumer == claim.consumer && claim.at_ms < *from && v.at_ms <= to + 1_000
                })
            })
    })
}

fn freezes(input: &Inputs) -> Vec<(String, i64, i64)> {
    (input.faults.iter())
        .filter(|r| matches!(r.fault, crate::faults::Fault::PauseWorker(_)))
        .filter_map(|r| {
            let from = input.start_ms + r.at.as_millis() as i64;
            let to = from + crate::faults::PAUSE.as_millis() as i64;
            Some((r.consumer.clone()?, from, to))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(task: &str, at_ms: i64) -> Claim {
        Claim {
            at_ms,
            task: task.into(),
            token: 7,
            by: "worker-1".into(),
            consumer: "worker-q3".into(),
            run: "r".into(),
            at: crate::logs::At::default(),
        }
    }

    /// A frozen worker's claim batch: one task's handler started before the freeze and its
    /// request came at the thaw; the batch's other tasks were logged claimed after the thaw,
    /// with the same token. The request is the frozen holder's, refusable by its token.
    #[test]
    fn a_frozen_holders_request_is_judged_by_its_own_tasks_claim() {
        let claims = [
            claim("high-0000000013", 1_000),
            claim("task-0000000068", 16_500),
        ];
        let frozen = [("worker-q3".to_string(), 1_200, 16_200)];
        let violation = |task: &str| Violation {
            id: "id".into(),
            task: task.into(),
            token: 7,
            highest: 9,
            at_ms: 16_500,
        };
        let (refusable, violations) =
            frozen_apart(vec![violation("high-0000000013")], &claims, &frozen);
        assert_eq!((refusable.len(), violations.len()), (1, 0));
        // A task claimed after the thaw that delivers below a later token is a violation.
        let (refusable, violations) =
            frozen_apart(vec![violation("task-0000000068")], &claims, &frozen);
        assert_eq!((refusable.len(), violations.len()), (0, 1));
    }

    /// Seen once: a request held at the receiver until its sender's 2 s timeout; the sender
    /// freed its place and another consumer's request arrived 13 ms later, before the receiver
    /// saw the first connection close. The first no longer counted; a third one would.
    #[test]
    fn a_request_its_sender_gave_up_on_does_not_count_against_the_cap() {
        let claimer = HashMap::from([
            (("task-1504", 1), "cli-a"),
            (("task-1478", 2), "cli-b"),
            (("task-1584", 3), "worker-c"),
        ]);
        let gave_up = HashMap::from([(("task-1504", 1), 38_546)]);
        let senders = Senders {
            claimer: &claimer,
            frozen: &[],
            gave_up: &gave_up,
        };
        let open = |tasks: &[(&str, i64)]| -> Vec<(String, i64)> {
            tasks.iter().map(|(t, k)| (t.to_string(), *k)).collect()
        };
        let three = open(&[("task-1478", 2), ("task-1504", 1), ("task-1584", 3)]);
        let (explained, unexplained) = judge_over(&[(38_559, three.clone())], 2, &senders);
        assert_eq!((explained, unexplained.len()), (1, 0));
        // Before its sender's timeout, the same request counts.
        let (explained, unexplained) = judge_over(&[(38_500, three)], 2, &senders);
        assert_eq!((explained, unexplained.len()), (0, 1));
    }

    /// Seen in CI (issue 44): a request whose run's deadline shortened its timeout was given
    /// up on by its sender long before its arrival plus the route's timeout; the place it
    /// freed let another request in. Its sender's `handler ended` line says when it stopped
    /// counting.
    #[test]
    fn a_request_counts_until_its_senders_handler_ended_not_until_the_routes_timeout() {
        let delivery = |task: &str, token: i64, arrived_ms: i64, answer: Answer| Delivery {
            id: format!("id-{task}"),
            task: task.into(),
            event_type: "chaos.limited".into(),
            group: None,
            seq: None,
            key: None,
            slot_ms: None,
            attempt: 1,
            token,
            arrived: Instant::now(),
            arrived_ms,
            answer,
            answered: Instant::now(),
            resume: None,
        };
        let deliveries = [
            delivery("task-1", 1, 10_000, Answer::TimedOut),
            delivery("task-2", 2, 10_000, Answer::Dropped),
            delivery("task-3", 3, 10_000, Answer::TimedOut),
        ];
        let ended = HashMap::from([
            (("task-1".to_string(), 1), 10_400),
            (("task-2".to_string(), 2), 10_300),
        ]);
        let gave_up = gave_up(&deliveries, &ended);
        assert_eq!(
            gave_up.get(&("task-1", 1)),
            Some(&10_400),
            "its sender's line"
        );
        assert_eq!(
            gave_up.get(&("task-2", 2)),
            Some(&10_300),
            "a dropped one too"
        );
        let bound = 10_000 + crate::consumers::HTTP_TIMEOUT.as_millis() as i64;
        assert_eq!(
            gave_up.get(&("task-3", 3)),
            Some(&bound),
            "no line: the timeout"
        );
        let claimer = HashMap::from([
            (("task-1", 1), "drain-a"),
            (("task-4", 4), "drain-b"),
            (("task-5", 5), "worker-c"),
        ]);
        let senders = Senders {
            claimer: &claimer,
            frozen: &[],
            gave_up: &gave_up,
        };
        let open: Vec<(String, i64)> = [("task-1", 1), ("task-4", 4), ("task-5", 5)]
            .iter()
            .map(|(t, k)| (t.to_string(), *k))
            .collect();
        let (explained, unexplained) = judge_over(&[(10_450, open)], 2, &senders);
        assert_eq!((explained, unexplained.len()), (1, 0));
    }
}
