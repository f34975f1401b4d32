//! The run's figures, printed (with `--nocapture`), and the verdict on them.

use std::process::ExitStatus;
use std::time::Duration;

use crate::checks::{EARLY_BOUND, EARLY_TOLERANCE, Figures, PAUSE_GRACE, RATE_ROUNDING};
use crate::consumers::{LIMITED_MAX_IN_FLIGHT, LIMITED_RATE_PER_S, LoopReport};
use crate::faults::Record;
use crate::logs::LogScan;
use crate::monitor::{Minute, RssVerdict};
use crate::producer::{GROUPS, Kind, Published};
use crate::tree::{LEASE_TIMEOUT, Left};

/// Generous bounds on the timing figures: a 2-core machine shared with builds must not fail
/// the test by being slow. The design targets are printed beside them.
///
/// A retry is judged against fresh tasks of its sort in the same run: no later past its
/// backoff than the slowest first delivery of a fresh task (ungrouped: the plain, high, low
/// and keyed tasks; grouped: the grouped tasks, which wait behind their group) plus this. So
/// a retry is never starved beside new work, however slow the machine makes both.
pub const RETRY_LATE_BOUND: Duration = Duration::from_secs(10);
/// A retry of the limited route comes back at the tail of the route's own backlog (the route's
/// throughput is its limit, and slots a killed consumer held are freed only when its session
/// expires), so it is judged against the route: no later than the slowest first delivery of a
/// task of that route, plus this.
pub const RETRY_LATE_LIMITED_BOUND: Duration = Duration::from_secs(10);
pub const RETRY_LATE_TARGET: Duration = Duration::from_secs(1);
pub const BACK_AFTER_FAULT_BOUND: Duration = Duration::from_secs(40);
/// The lease expires at most a lease timeout after the fault; the reaper runs every second.
pub const BACK_AFTER_FAULT_TARGET: Duration = Duration::from_secs(12);

pub struct Timings {
    pub ensemble: Duration,
    pub publishing: Duration,
    /// From the end of the faults and publishing until every task was delivered.
    pub settling: Duration,
    pub total: Duration,
}

pub struct Outcome {
    pub rate: f64,
    pub soak_minutes: Option<u64>,
    /// Every task delivered and the tree empty before the settling guard ran out.
    pub settled: bool,
    pub published: Published,
    pub figures: Figures,
    pub left: Left,
    /// The sampled completion records' results (`results`).
    pub results: crate::results::ResultFigures,
    pub faults: Vec<Record>,
    pub workers: Vec<Option<ExitStatus>>,
    pub drains: Vec<LoopReport>,
    pub scheduled: LoopReport,
    pub reaps: LoopReport,
    pub logs: LogScan,
    /// Sessions that ZooKeeper's servers say watch `tasks/` once the queue settled: one per
    /// worker when every worker's watch survived the faults.
    pub watching: usize,
    /// From the settled queue until every worker watched (or the guard ran out).
    pub watch_back: Duration,
    pub minutes: Vec<Minute>,
    pub rss: Vec<Option<RssVerdict>>,
    pub timings: Timings,
}

fn flag(bad: bool) -> &'static str {
    if bad { "  <-- FAILS" } else { "" }
}

fn some<T: std::fmt::Debug>(list: &[T]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = list.iter().take(3).map(|x| format!("{x:?}")).collect();
    format!(" e.g. {}", shown.join("; "))
}

impl Outcome {
    pub fn print(&self) {
        let (p, f, l) = (&self.published, &self.figures, &self.left);
        println!(
            "\n== chaos: the queue's contract under mixed traffic and faults: {} tasks at {}/s{}, \
             3 ZooKeeper servers, 2 workers x8, 2 drain loops, scheduled runs, a reap loop",
            p.sent.len(),
            self.rate,
            self.soak_minutes
                .map_or(String::new(), |m| format!(" (soak: {m} min)"))
        );
        let kinds: Vec<String> = (Kind::ALL.iter())
            .map(|k| format!("{} {}", k.name(), p.count(*k)))
            .collect();
        println!(
            "published   {}; + {} repeats of keys; schedule slots {} (failed publish calls sent again: {}, envelopes in them: {}; items a publish could not tell: {}, of them found by status {}, sent again {})",
            kinds.join(", "),
            p.repeats.len(),
            f.slots.len(),
            p.retries,
            p.resent,
            p.unknown,
            p.unknown_found,
            p.unknown - p.unknown_found
        );
        let answers: Vec<String> = (f.answers.iter())
            .map(|(a, n)| format!("{a} {n}"))
            .collect();
        println!(
            "requests    {} at the receiver: {}",
            f.requests,
            answers.join(", ")
        );
        println!(
            "lost        {:>6}  of {} to deliver (published but cancelled, and schedule tasks): no 200{}{}",
            f.lost.len(),
            f.must_deliver,
            some(&f.lost),
            flag(!f.lost.is_empty())
        );
        let stuck = l.stuck();
        println!(
            "stuck       {:>6}  lanes {}, delayed/ {}, leases/ {}, groups/ {} (paused {}), limit slots {}, debounce/ {} (and the backdrop's {} of {}, due in an hour), after/ {}, dependents/ {}; cancel marks {}{}",
            stuck,
            l.tasks,
            l.delayed,
            l.leases,
            l.groups,
            l.paused_groups,
            l.limit_slots,
            l.debounced,
            l.backdrop,
            crate::debounce::BACKDROP,
            l.blocked,
            l.markers,
            l.cancel_marks,
            flag(stuck > 0)
        );
        for task in &l.lane_tasks {
            println!("            a lane still holds {task}");
        }
        for key in &l.debounced_keys {
            let name = key.split(' ').next().unwrap_or_default();
            let probed = (f.debounce.answers.get(name)).map_or("not probed", String::as_str);
            println!("            debounce/ still holds {key}; {probed}");
        }
        let (explained, wrong) = l
            .explained
            .clone()
            .unwrap_or((0, vec!["could not run".into()]));
        println!(
            "explain     {:>6}  disagreements with what is left, of {explained} dead letters and debounced keys explained{}{}",
            wrong.len(),
            some(&wrong),
            flag(!wrong.is_empty())
        );
        let audited = l.audit.as_ref().map_or(usize::MAX, Vec::len);
        println!(
            "audit       {:>6}  stuck states the audit found once the queue settled{}{}",
            l.audit
                .as_ref()
                .map_or("-".to_string(), |f| f.len().to_string()),
            l.audit
                .as_ref()
                .map_or(" (it could not run)".to_string(), |f| some(f)),
            flag(audited > 0)
        );
        println!(
            "order       {:>6}  successes out of publish order in {} groups ({} of the {} groups used, {} grouped successes; on ids maybe published twice, not judged: {}){}{}",
            f.order_violations.len(),
            f.groups,
            f.groups,
            GROUPS,
            f.grouped_successes,
            f.order_exempt,
            some(&f.order_violations),
            flag(!f.order_violations.is_empty())
        );
        for (i, w) in f.pauses.iter().enumerate() {
            println!(
                "pause #{}   {:>6}  deliveries of {} started more than {:?} after `pause` returned, before `resume` ({:.1} s paused; {} in the first {:?}; {} published meanwhile; first delivery {} after resume){}{}",
                i + 1,
                w.violations.len(),
                crate::producer::PAUSABLE_TYPE,
                PAUSE_GRACE,
                w.length,
                w.in_grace,
                PAUSE_GRACE,
                w.published,
                w.first_after.map_or("none".into(), |a| format!("{a:.2} s")),
                some(&w.violations),
                flag(!w.violations.is_empty())
            );
        }
        let key_bad = f.keys_two_ids.len() + f.repeat_violations.len() + f.key_anomalies.len();
        println!(
            "keys        {:>6}  keys with two tasks ({} keys; {} repeats answered Existing with the key's task: {} of {}){}{}{}",
            f.keys_two_ids.len() + f.repeat_violations.len(),
            f.keys,
            f.repeats,
            f.repeats_existing_same,
            f.repeats,
            some(&f.keys_two_ids),
            some(&f.repeat_violations),
            flag(key_bad > 0)
        );
        let cancel_answers: Vec<String> = (f.cancel_answers.iter())
            .map(|(a, n)| format!("{a} {n}"))
            .collect();
        println!(
            "cancel      {:>6}  cancelled tasks delivered (and {} published twice: the copy nobody cancelled); {} of {} dead with reason cancelled (cancel answered: {}; answered after due, their deliveries not judged, the task may have run before (a slow machine, or a publish riding out an election): {}); other dead letters {}{}{}{}{}",
            f.cancelled_delivered.len(),
            f.cancelled_delivered_exempt,
            f.cancelled_dead,
            f.cancels,
            cancel_answers.join(", "),
            f.cancels_unjudged,
            f.other_dead.len(),
            some(&f.cancels_odd),
            some(&f.cancelled_not_dead),
            some(&f.other_dead),
            flag(
                !f.cancelled_delivered.is_empty()
                    || !f.cancelled_not_dead.is_empty()
                    || !f.other_dead.is_empty()
            )
        );
        let early = EARLY_BOUND.as_secs_f64();
        println!(
            "delayed     {:>6}  delivered more than {:?} before due (earliest {:.3} s before; design: never, asserted: not by more than {:?}); first delivery after due: {}{}{}",
            f.delayed_early.len(),
            EARLY_TOLERANCE,
            f.delayed_earliest,
            EARLY_BOUND,
            f.delayed_late.show(),
            some(&f.delayed_early),
            flag(f.delayed_earliest > early)
        );
        println!(
            "limit       {:>6}  most requests of {} open at once (max_in_flight {}; over it at {} moments, each with the request of a frozen worker whose session expired, which frees its slot early: documented, or one held past the sink's timeout, its sender gone; unexplained {}); rate {}/s burst {}: worst window of the gate's moments {} admitted in {:.3} s, {:.2} over rate x T (allowed: the burst) over {} admissions; shown, not asserted (commit to log, to request): the consumers' logs {} starts in {:.3} s, {:.1} over; at the receiver: {} in {:.3} s, {:.1} over; over {} claims{}{}",
            f.most_open,
            crate::producer::LIMITED_TYPE,
            LIMITED_MAX_IN_FLIGHT,
            f.over_limit_explained,
            f.over_limit_unexplained.len(),
            LIMITED_RATE_PER_S,
            f.burst,
            f.worst_admitted.starts,
            f.worst_admitted.seconds,
            f.worst_admitted.excess,
            f.limited_admitted,
            f.worst_claims.starts,
            f.worst_claims.seconds,
            f.worst_claims.excess,
            f.worst_arrivals.starts,
            f.worst_arrivals.seconds,
            f.worst_arrivals.excess,
            f.limited_claims,
            some(&f.over_limit_unexplained),
            flag(
                !f.over_limit_unexplained.is_empty()
                    || f.worst_admitted.excess > f.burst + RATE_ROUNDING
            )
        );
        println!(
            "per key     {:>6}  most requests of one concurrency key of {} open at once ({} keys, per_key max_in_flight {}; over it at {} moments, each with a frozen worker's request; unexplained {}){}{}",
            f.most_open_per_key,
            crate::producer::TENANT_TYPE,
            crate::producer::TENANT_KEYS,
            crate::consumers::TENANT_MAX_PER_KEY,
            f.over_key_limit_explained,
            f.over_key_limit_unexplained.len(),
            some(&f.over_key_limit_unexplained),
            flag(!f.over_key_limit_unexplained.is_empty())
        );
        println!(
            "lanes       {:>6}  most low tasks first delivered between a high task's publish and its delivery ({} high delivered, {} on their first claim; bound {}){}{}",
            f.lanes.worst,
            f.lanes.high,
            f.lanes.judged,
            f.lanes.bound,
            some(&f.lanes.violations),
            flag(!f.lanes.violations.is_empty())
        );
        println!(
            "expired     {:>6}  published already expired: never delivered, dead as expired ({} published, {} dead as expired, {} in doubt){}{}",
            f.expiry.violations.len(),
            f.expiry.published,
            f.expiry.dead_expired,
            f.expiry.unjudged,
            some(&f.expiry.violations),
            flag(!f.expiry.violations.is_empty())
        );
        println!(
            "fairness    {:>6}  most flood tasks first delivered between a trickle task's publish and its delivery ({} flood published, {} trickle delivered, {} judged; bound {}){}{}",
            f.fairness.worst,
            f.fairness.flood,
            f.fairness.trickle,
            f.fairness.judged,
            f.fairness.bound,
            some(&f.fairness.violations),
            flag(!f.fairness.violations.is_empty())
        );
        println!(
            "debounce    {:>6}  replaced envelopes delivered ({} debounced publishes, three a key; {} replaced; {} sent again after a failed publish, not judged; {} replaced or run, the next publish's answer cannot tell (its key fired, or it was judged from what landed), not judged){}{}",
            f.debounce.delivered_replaced.len(),
            f.debounce.publishes,
            f.debounce.replaced,
            f.debounce.uncertain,
            f.debounce.untold,
            some(&f.debounce.delivered_replaced),
            flag(!f.debounce.delivered_replaced.is_empty())
        );
        println!(
            "debounce    {:>6}  probe answers against the contract (status of {} keys right after publishing: {}; cancel of {}: {}, {} withdrawn){}{}",
            f.debounce.probe_violations.len(),
            f.debounce.statuses,
            counts(&f.debounce.status_states),
            f.debounce.cancels,
            counts(&f.debounce.cancel_states),
            f.debounce.withdrawn,
            some(&f.debounce.probe_violations),
            flag(!f.debounce.probe_violations.is_empty())
        );
        println!(
            "batch       {:>6}  violations ({} members published; the batch at the end: {}){}{}",
            f.batch.violations.len(),
            f.batch.members,
            f.batch
                .status
                .as_ref()
                .map_or("unread".into(), |s| s.to_string()),
            some(&f.batch.violations),
            flag(!f.batch.violations.is_empty())
        );
        let a = &f.after;
        println!(
            "after       {:>6}  violations ({} children of plain tasks, {} running after a cancelled parent, {} failing with one: {} dead with it; {} with a parent maybe published twice, not judged){}{}",
            a.violations.len(),
            a.after_plain,
            a.run_anyway,
            a.fail_with,
            a.died,
            a.unjudged,
            some(&a.violations),
            flag(!a.violations.is_empty())
        );
        let r = &self.results;
        println!(
            "results     {:>6}  completion records without the receiver's answer to their claim as result ({} ids looked up of {} answered 200){}{}{}",
            r.missing.len() + r.wrong.len(),
            r.sampled,
            r.succeeded,
            some(&r.missing),
            some(&r.wrong),
            flag(!r.missing.is_empty() || !r.wrong.is_empty() || r.sampled == 0)
        );
        let slots: Vec<String> = (f.slots.iter())
            .map(|(s, n)| format!("{} x{n}", crate::receiver::clock(*s)))
            .collect();
        println!(
            "schedule    {:>6}  slot violations; tasks per slot: {} (required slots {}; last_slot_ms stored {}){}{}",
            f.slot_violations.len(),
            if slots.is_empty() {
                "none".into()
            } else {
                slots.join(", ")
            },
            f.slots_required.len(),
            f.last_slot_ms.map_or("none".into(), crate::receiver::clock),
            some(&f.slot_violations),
            flag(!f.slot_violations.is_empty())
        );
        println!(
            "fencing     {:>6}  requests with a token below one already delivered for the id (on ids maybe published twice, not judged: {}; sent by a frozen holder before its freeze, refusable by their lower token: {}); malformed requests {}, unknown ids {}{}",
            f.violations.len(),
            f.violations_exempt,
            f.violations_frozen,
            f.malformed,
            f.strangers.len(),
            flag(!f.violations.is_empty() || f.malformed > 0 || !f.strangers.is_empty())
        );
        for v in f.violations.iter().take(10) {
            println!(
                "  violation: id {} ({}) token {} after {}, arrived {} UTC",
                v.id,
                v.task,
                v.token,
                v.highest,
                v.arrived()
            );
        }
        println!(
            "duplicates  {:>6}  deliveries after a success (allowed: {}: what victims held, every lease at a leader kill, envelopes sent twice){}",
            f.duplicates,
            f.allowed_duplicates,
            flag(f.duplicates > f.allowed_duplicates)
        );
        let r = &f.resumable;
        println!(
            "resumable   {:>6}  of {} resumable tasks finished ({} waits ended by a signal, {} by their timeout); {} signals sent ({} without an answer, not judged), {} kept at the end; {} steps ran again after a checkpoint that did not land (within the duplicates' allowance {}); went back {}, stale checkpoints accepted {}, signals consumed twice {}, lost {}{}{}",
            r.finished,
            r.tasks,
            r.by_signal,
            r.by_timeout,
            r.signals_sent,
            r.signals_uncertain,
            r.kept,
            r.reran,
            f.allowed_duplicates,
            r.went_back.len(),
            r.stale_accepted.len(),
            r.consumed_twice.len(),
            r.lost_signals.len(),
            some(
                &[
                    &r.went_back[..],
                    &r.stale_accepted,
                    &r.consumed_twice,
                    &r.lost_signals,
                    &r.unfinished
                ]
                .concat()
            ),
            flag(r.failed() || r.reran > f.allowed_duplicates)
        );
        let c = &f.reclaims;
        println!(
            "re-claims   {:>6}  of {} tasks released to resume in another run claimed again by the run that released them ({} taken again by a worker's run after its {:?}, allowed){}{}",
            c.violations.len(),
            c.released,
            c.taken_again_late,
            crate::reclaims::TAKE_AGAIN_AFTER,
            some(&c.violations),
            flag(!c.violations.is_empty() || c.released == 0)
        );
        let w = &f.waits;
        println!(
            "waits       {:>6}  deliveries before their sleep or wait ended (of {} after a sleep, {} after a wait's timeout); {} redriven in their wait ({} while it went on; {} claims suspended again before it ended){}{}",
            w.early.len(),
            w.after_sleep,
            w.after_timeout,
            w.redriven,
            w.in_time,
            w.back_early,
            some(&[&w.early[..], &w.trouble].concat()),
            flag(w.failed())
        );
        let t = &f.steps;
        println!(
            "steps       {:>6}  recorded steps run again, and {} cuts after progress counted as interruptions ({} of {} stepped tasks completed, {} dead of runs without progress; {} steps ran; {} runs cut at their deadline, {} of them after progress){}{}",
            t.ran_again.len(),
            t.progress_lost.len(),
            t.completed,
            t.tasks,
            t.dead,
            t.steps_ran,
            t.cuts,
            t.progressed,
            some(&[&t.ran_again[..], &t.progress_lost].concat()),
            flag(t.failed())
        );
        let s = &f.spans;
        println!(
            "spans       {:>6}  against the conventions of {} attempts and {} requests exported ({} attempts and {} requests failed: status ERROR and an error.type asked of each){}{}",
            s.violations.len(),
            s.attempts,
            s.requests,
            s.failed_attempts,
            s.failed_requests,
            some(&s.violations),
            flag(s.failed())
        );
        let (bound, grouped_bound) = (retry_bound(f, UNGROUPED), retry_bound(f, GROUPED));
        println!(
            "retries     {:>6}  came more than {:?} before their backoff was over (earliest {:.3} s before; design: never, asserted: not by more than {:?}){}{}",
            f.retries_early.len(),
            EARLY_TOLERANCE,
            f.retries_earliest,
            EARLY_BOUND,
            some(&f.retries_early),
            flag(f.retries_earliest > early)
        );
        println!(
            "            lateness past the backoff (failure answered -> next delivery - backoff; design target {:?}; asserted: no more than the slowest first delivery of fresh tasks of their sort + {:?}; limited and tenant routes + {:?} = {:.2} s, as their retries wait behind their backlog):",
            RETRY_LATE_TARGET,
            RETRY_LATE_BOUND,
            RETRY_LATE_LIMITED_BOUND,
            limited_retry_bound(f)
        );
        println!(
            "              ungrouped {} (bound {bound:.2} s){}",
            f.retry_late.show(),
            flag(f.retry_late.max > bound)
        );
        println!(
            "              grouped   {} (bound {grouped_bound:.2} s){}",
            f.retry_late_grouped.show(),
            flag(f.retry_late_grouped.max > grouped_bound)
        );
        println!(
            "              limited (the route's and the tenants': behind their backlog) {}{}",
            f.retry_late_limited.show(),
            flag(f.retry_late_limited.max > limited_retry_bound(f))
        );
        println!(
            "              not measured: {} whose next claim was lost to a fault (an attempt skipped); latest: {}",
            f.retries_skipped,
            f.retries_latest.first().map_or("none", String::as_str)
        );
        for line in f.retries_latest.iter().skip(1) {
            println!("                {line}");
        }
        let back: Vec<String> = (f.back_after_fault.iter())
            .map(|(k, s)| format!("{k}: {}", s.show()))
            .collect();
        let worst = f.back_after_fault.last().map_or(0.0, |(_, s)| s.max);
        println!(
            "back       {:>6}  tasks a killed or frozen consumer held never came back; fault -> next delivery: {} (design target <= {:?}: lease {:?} + reaper; asserted <= {:?}; {} whose handler had succeeded before the fault not run again: their completion landed; {} cancelled while held, buried as cancelled){}{}",
            f.never_back.len(),
            back.join("; "),
            BACK_AFTER_FAULT_TARGET,
            LEASE_TIMEOUT,
            BACK_AFTER_FAULT_BOUND,
            f.back_done_before,
            f.back_cancelled,
            some(&f.never_back),
            flag(!f.never_back.is_empty() || worst > BACK_AFTER_FAULT_BOUND.as_secs_f64())
        );
        println!(
            "latency        publish -> first delivery: plain {}",
            f.plain_latency.show()
        );
        for (kind, spread) in f.latency_by_kind.iter().filter(|(k, _)| *k != "plain") {
            println!("               {kind:<9} {}", spread.show());
        }
        if self.soak_minutes.is_some() {
            for (i, verdict) in self.rss.iter().enumerate() {
                match verdict {
                    Some(v) => println!(
                        "rss         worker-{i}: minute 5 {:.1} MB, most in minutes {}..{} {:.1} MB: {:.2}x ({}){}",
                        v.base as f64 / 1024.0,
                        v.from,
                        v.to,
                        v.most as f64 / 1024.0,
                        v.ratio(),
                        if v.within() {
                            "within 1.2x"
                        } else {
                            "above 1.2x"
                        },
                        flag(!v.within())
                    ),
                    None => println!(
                        "rss         worker-{i}: no verdict (the soak is shorter than six minutes, or the worker was started again after minute five)"
                    ),
                }
            }
        }
        println!("minutes (plain tasks first delivered in each, workers' memory at its end):");
        for minute in &self.minutes {
            println!("  {}", minute.line());
        }
        println!("faults (at, what, tasks the victim held / every lease then):");
        for r in &self.faults {
            println!(
                "  +{:>6.1}s  {:<90} held {:>3} / {:>3}",
                r.at.as_secs_f64(),
                r.what,
                r.held,
                r.leases
            );
        }
        self.print_consumers();
        let tm = &self.timings;
        println!(
            "time: ensemble formed in {:.1}s, publishing {:.1}s, settling {:.1}s, whole test {:.1}s",
            tm.ensemble.as_secs_f64(),
            tm.publishing.as_secs_f64(),
            tm.settling.as_secs_f64(),
            tm.total.as_secs_f64()
        );
    }

    fn print_consumers(&self) {
        let runs =
            |r: &LoopReport| format!("{} runs ({} killed, {} failed)", r.runs, r.killed, r.failed);
        let drains: Vec<_> = self.drains.iter().map(runs).collect();
        let exits: Vec<_> = (self.workers.iter())
            .map(|s| s.map_or("still running after the guard".into(), |s| s.to_string()))
            .collect();
        println!("workers stopped by SIGTERM: {}", exits.join(", "));
        println!(
            "drain loops: {}; scheduled runs: {}; reap loop: {}",
            drains.join(", "),
            runs(&self.scheduled),
            runs(&self.reaps)
        );
        let claims: Vec<_> = (self.logs.claims.iter())
            .map(|(who, n)| format!("{who} {n}"))
            .collect();
        println!("claims: {}", claims.join(", "));
        println!(
            "sessions watching tasks/ at the end: {} of {} workers, {:.1} s after the queue settled{}",
            self.watching,
            self.workers.len(),
            self.watch_back.as_secs_f64(),
            if self.watching < self.workers.len() {
                " (a worker's watch was lost: it only looks every 5 s)"
            } else {
                ""
            }
        );
        println!("warnings in the consumers' logs:");
        for (message, count) in &self.logs.warnings {
            println!("  {count:>6}  {message}");
        }
    }

    /// Fails the test on anything the contract forbids, with every failure named at once.
    pub fn check(&self) {
        let (f, l) = (&self.figures, &self.left);
        let mut failures: Vec<String> = Vec::new();
        let mut fail = |bad: bool, what: String| {
            if bad {
                failures.push(what);
            }
        };
        fail(
            !self.settled,
            "the queue did not settle within the guard".into(),
        );
        fail(
            !f.lost.is_empty(),
            format!("{} tasks never answered 200{}", f.lost.len(), some(&f.lost)),
        );
        fail(l.stuck() > 0, format!("stuck: {l:?}"));
        fail(
            l.audit.as_ref().is_none_or(|found| !found.is_empty()),
            format!("the audit at the end found stuck states: {:?}", l.audit),
        );
        fail(
            l.explained
                .as_ref()
                .is_none_or(|(_, wrong)| !wrong.is_empty()),
            format!("explain disagreed with what is left: {:?}", l.explained),
        );
        fail(
            l.backdrop != crate::debounce::BACKDROP,
            format!(
                "{} of the {} backdrop keys (due in an hour) still pending: one fired early, \
                 or went",
                l.backdrop,
                crate::debounce::BACKDROP
            ),
        );
        // A bulk publish cut by a leader kill finds what landed and sends the rest itself; an
        // item it cannot tell is `unknown` (judged by the checks as any other: no twin among
        // the certain ones), never an error.
        fail(
            self.published.retries > 0,
            format!(
                "{} bulk publishes failed under the faults ({} tasks sent again, each perhaps \
                 twice)",
                self.published.retries, self.published.resent
            ),
        );
        fail(
            !f.order_violations.is_empty(),
            format!("groups out of order{}", some(&f.order_violations)),
        );
        for w in &f.pauses {
            fail(
                !w.violations.is_empty(),
                format!("deliveries of a paused type{}", some(&w.violations)),
            );
        }
        fail(
            !f.keys_two_ids.is_empty() || !f.repeat_violations.is_empty(),
            format!(
                "keys with two tasks{}{}",
                some(&f.keys_two_ids),
                some(&f.repeat_violations)
            ),
        );
        fail(
            !f.key_anomalies.is_empty(),
            format!("fresh keys taken{}", some(&f.key_anomalies)),
        );
        fail(
            !f.cancelled_delivered.is_empty(),
            format!("cancelled tasks delivered{}", some(&f.cancelled_delivered)),
        );
        fail(
            !f.cancelled_not_dead.is_empty(),
            format!(
                "cancelled tasks not dead with reason cancelled{} (cancel answers {:?})",
                some(&f.cancelled_not_dead),
                f.cancel_answers
            ),
        );
        fail(
            !f.other_dead.is_empty(),
            format!("dead letters besides the cancelled{}", some(&f.other_dead)),
        );
        let early = EARLY_BOUND.as_secs_f64();
        fail(
            f.delayed_earliest > early,
            format!(
                "a delayed task was delivered {:.3} s before due{}",
                f.delayed_earliest,
                some(&f.delayed_early)
            ),
        );
        fail(
            !f.over_limit_unexplained.is_empty(),
            format!(
                "requests of the limited route open at once beyond max_in_flight {LIMITED_MAX_IN_FLIGHT}{}",
                some(&f.over_limit_unexplained)
            ),
        );
        fail(
            !f.over_key_limit_unexplained.is_empty(),
            format!(
                "requests of one tenant open at once beyond its per_key max_in_flight {}{}",
                crate::consumers::TENANT_MAX_PER_KEY,
                some(&f.over_key_limit_unexplained)
            ),
        );
        fail(
            !f.expiry.violations.is_empty(),
            format!(
                "expired tasks ran, or are not dead as expired{}",
                some(&f.expiry.violations)
            ),
        );
        fail(
            !f.lanes.violations.is_empty(),
            format!(
                "high tasks left behind the low lane{}",
                some(&f.lanes.violations)
            ),
        );
        fail(
            !f.fairness.violations.is_empty(),
            format!(
                "a key's tasks left behind another key's burst{}",
                some(&f.fairness.violations)
            ),
        );
        fail(
            !f.debounce.delivered_replaced.is_empty(),
            format!(
                "debounced envelopes delivered after another replaced them{}",
                some(&f.debounce.delivered_replaced)
            ),
        );
        fail(
            !f.batch.violations.is_empty() || f.batch.members == 0,
            format!(
                "the batch's callbacks or counts broke the contract ({} members){}",
                f.batch.members,
                some(&f.batch.violations)
            ),
        );
        fail(
            !f.after.violations.is_empty() || f.after.after_plain == 0 || f.after.fail_with == 0,
            format!(
                "children ran before their parents, or did not die with them ({} children of plain tasks, {} failing with a cancelled parent){}",
                f.after.after_plain,
                f.after.fail_with,
                some(&f.after.violations)
            ),
        );
        fail(
            !f.debounce.probe_violations.is_empty(),
            format!(
                "status or cancel of a debounced publish answered against the contract{}",
                some(&f.debounce.probe_violations)
            ),
        );
        fail(
            f.debounce.withdrawn == 0 || !f.debounce.status_states.contains_key("debounced"),
            "no debounced publish was withdrawn, or none found pending: the probes saw nothing"
                .into(),
        );
        fail(
            f.debounce.replaced == 0,
            "no debounced envelope was replaced: the debounce check saw nothing".into(),
        );
        fail(
            f.fairness.judged == 0,
            "no trickle task was judged: the fairness check saw nothing".into(),
        );
        fail(
            f.lanes.judged == 0,
            "no high task was judged: the lanes check saw nothing".into(),
        );
        fail(
            f.most_open_per_key < crate::consumers::TENANT_MAX_PER_KEY,
            "no tenant ever had a request open: the per-key check saw nothing".into(),
        );
        fail(
            f.worst_admitted.excess > f.burst + RATE_ROUNDING,
            format!(
                "the limited route admitted too fast: {:?}",
                f.worst_admitted
            ),
        );
        fail(
            f.limited_admitted == 0,
            "no admission through the limited route's gate was logged: the rate check saw nothing"
                .into(),
        );
        fail(
            !f.slot_violations.is_empty(),
            format!("schedule slots{}", some(&f.slot_violations)),
        );
        fail(
            !f.violations.is_empty(),
            format!("stale holders delivered: {:?}", f.violations),
        );
        let r = &self.results;
        fail(
            !r.missing.is_empty() || !r.wrong.is_empty(),
            format!("results not kept{}{}", some(&r.missing), some(&r.wrong)),
        );
        fail(
            r.sampled == 0,
            "no completion record was looked up: the results check saw nothing".into(),
        );
        fail(
            f.malformed > 0 || !f.strangers.is_empty(),
            format!(
                "requests the sink should not have sent: {} malformed, unknown ids{}",
                f.malformed,
                some(&f.strangers)
            ),
        );
        let r = &f.resumable;
        fail(
            r.failed() || r.reran > f.allowed_duplicates,
            format!("resumable tasks broke their contract: {r:?}"),
        );
        fail(
            !f.reclaims.violations.is_empty() || f.reclaims.released == 0,
            format!(
                "tasks released to resume in another run were claimed again by the same run (or \
                 none was released): {:?}",
                f.reclaims
            ),
        );
        fail(
            f.steps.failed(),
            format!(
                "stepped tasks lost progress, or one was left unfinished (or no run was cut after \
                 progress): {:?}",
                f.steps
            ),
        );
        fail(
            f.spans.failed(),
            format!(
                "failed attempts' spans without error status (or no failed attempt's spans \
                 arrived): {:?}",
                f.spans
            ),
        );
        fail(
            f.waits.failed(),
            format!(
                "deliveries came before their sleep or wait ended (or no redrive landed in a \
                 wait): {:?}",
                f.waits
            ),
        );
        fail(
            f.duplicates > f.allowed_duplicates,
            format!(
                "{} duplicates, more than the {} the faults explain",
                f.duplicates, f.allowed_duplicates
            ),
        );
        fail(
            f.retries_earliest > early,
            format!(
                "a retry came {:.3} s before its backoff was over{}",
                f.retries_earliest,
                some(&f.retries_early)
            ),
        );
        let (bound, grouped_bound) = (retry_bound(f, UNGROUPED), retry_bound(f, GROUPED));
        fail(
            f.retry_late.max > bound || f.retry_late_grouped.max > grouped_bound,
            format!(
                "a retry came later after its backoff than the slowest fresh task of its sort \
                 took to its first delivery, plus {RETRY_LATE_BOUND:?}: ungrouped {} (bound \
                 {bound:.2} s); grouped {} (bound {grouped_bound:.2} s)",
                f.retry_late.show(),
                f.retry_late_grouped.show()
            ),
        );
        let limited = limited_retry_bound(f);
        fail(
            f.retry_late_limited.max > limited,
            format!(
                "a retry of a limited route came more than {limited:.2} s after its backoff \
                 (the slowest first delivery of the limited and tenant routes plus \
                 {RETRY_LATE_LIMITED_BOUND:?}): {}",
                f.retry_late_limited.show()
            ),
        );
        fail(
            !f.never_back.is_empty(),
            format!("tasks a victim held never came back{}", some(&f.never_back)),
        );
        let worst = f.back_after_fault.last().map_or(0.0, |(_, s)| s.max);
        fail(
            worst > BACK_AFTER_FAULT_BOUND.as_secs_f64(),
            format!("a victim's task came back only after {worst:.1} s"),
        );
        fail(
            !self.logs.panics.is_empty(),
            format!("a consumer panicked: {:#?}", self.logs.panics),
        );
        for status in &self.workers {
            fail(
                !status.is_some_and(|s| s.success()),
                format!("a worker did not stop cleanly on SIGTERM: {status:?}"),
            );
        }
        fail(
            self.watching != self.workers.len(),
            "every worker still watches tasks/ after the reconnects (else it only polls)".into(),
        );
        for v in self.rss.iter().flatten() {
            fail(
                !v.within(),
                format!("a worker's memory grew {:.2}x after minute five", v.ratio()),
            );
        }
        assert!(
            failures.is_empty(),
            "the contract was broken:\n  - {}",
            failures.join("\n  - ")
        );
    }
}

/// The fresh tasks an ungrouped retry of an unlimited route is judged against, and a grouped
/// one (see [`RETRY_LATE_BOUND`]).
const UNGROUPED: &[&str] = &["plain", "high", "low", "keyed"];
const GROUPED: &[&str] = &["grouped"];

/// How late a retry of the limited or tenant routes may come past its backoff: their slowest
/// first delivery (how long a backlog made a fresh task wait: the route's, or one key's)
/// plus a bound.
fn limited_retry_bound(f: &crate::checks::Figures) -> f64 {
    slowest_first_delivery(f, &["limited", "tenant"]) + RETRY_LATE_LIMITED_BOUND.as_secs_f64()
}

/// How late a retry may come past its backoff: the slowest first delivery of the fresh tasks
/// of `kinds` in this run, plus [`RETRY_LATE_BOUND`].
fn retry_bound(f: &crate::checks::Figures, kinds: &[&str]) -> f64 {
    slowest_first_delivery(f, kinds) + RETRY_LATE_BOUND.as_secs_f64()
}

/// The longest any fresh task of `kinds` waited from its publish to its first delivery.
fn slowest_first_delivery(f: &crate::checks::Figures, kinds: &[&str]) -> f64 {
    (f.latency_by_kind.iter())
        .filter(|(kind, _)| kinds.contains(kind))
        .map(|(_, spread)| spread.max)
        .fold(0.0, f64::max)
}

/// `state xN, …`, sorted.
fn counts(states: &std::collections::HashMap<String, usize>) -> String {
    let mut all: Vec<String> = states.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    all.sort();
    all.join(", ")
}
