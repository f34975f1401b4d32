//! Every minute of the run: the publish-to-delivery latency of the plain tasks first delivered
//! in that minute (publish call returned → the request's arrival at the receiver), and each
//! worker's resident memory (`VmRSS` of `/proc/<pid>/status`). Printed as it goes (a soak runs
//! for half an hour), and kept for the end: a soak then compares the memory of its last ten
//! minutes with minute five's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::consumers::WorkerSlot;
use crate::producer::{Kind, PublishTimes};
use crate::receiver::Receiver;

/// One minute's figures.
#[derive(Clone, Debug)]
pub struct Minute {
    pub minute: u32,
    /// Plain tasks first delivered in the minute, and their latency's p50 and p99.
    pub delivered: usize,
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// Per worker: its pid and resident memory in kB, when it runs.
    pub rss: Vec<Option<(u32, u64)>>,
}

pub struct Monitor {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<Minute>>,
}

impl Monitor {
    pub fn start(
        start: Instant,
        receiver: Arc<Receiver>,
        times: PublishTimes,
        workers: Arc<[WorkerSlot; 2]>,
    ) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut minutes = Vec::new();
            let mut seen: HashSet<String> = HashSet::new();
            let mut read = 0;
            for minute in 1.. {
                let mark = start + Duration::from_secs(60 * u64::from(minute));
                let over = (tokio::time::timeout_at(mark, stopped.wait_for(|s| *s)).await).is_ok();
                if over {
                    break;
                }
                let latencies = {
                    let times = times.lock().expect("times lock");
                    receiver.with(|ledger| {
                        let fresh = &ledger.deliveries[read..];
                        read = ledger.deliveries.len();
                        let mut fresh: Vec<_> = (fresh.iter())
                            .filter(|d| d.event_type == Kind::Plain.event_type())
                            .collect();
                        fresh.sort_by_key(|d| d.arrived);
                        let mut latencies = Vec::new();
                        for d in fresh {
                            if seen.insert(d.id.clone())
                                && let Some(at) = times.get(&d.id)
                            {
                                latencies.push(d.arrived.saturating_duration_since(*at));
                            }
                        }
                        latencies
                    })
                };
                let mut rss = Vec::new();
                for worker in workers.iter() {
                    rss.push(match worker.victim().await {
                        Some(victim) => vm_rss(victim.pid).map(|kb| (victim.pid, kb)),
                        None => None,
                    });
                }
                let figures = Minute::new(minute, latencies, rss);
                println!("{}", figures.line());
                minutes.push(figures);
            }
            minutes
        });
        Monitor { stop, task }
    }

    pub async fn stop(self) -> Vec<Minute> {
        let _ = self.stop.send(true);
        self.task.await.expect("the monitor")
    }
}

impl Minute {
    fn new(minute: u32, mut latencies: Vec<Duration>, rss: Vec<Option<(u32, u64)>>) -> Self {
        latencies.sort();
        Minute {
            minute,
            delivered: latencies.len(),
            p50: percentile(&latencies, 0.50),
            p99: percentile(&latencies, 0.99),
            rss,
        }
    }

    pub fn line(&self) -> String {
        let ms = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{} ms", d.as_millis()));
        let rss: Vec<String> = (self.rss.iter().enumerate())
            .map(|(i, r)| match r {
                Some((pid, kb)) => format!("worker-{i} {:.1} MB (pid {pid})", *kb as f64 / 1024.0),
                None => format!("worker-{i} not running"),
            })
            .collect();
        format!(
            "chaos minute {:>3}: plain publish->delivery p50 {:>7}, p99 {:>7} over {:>5} tasks; RSS {}",
            self.minute,
            ms(self.p50),
            ms(self.p99),
            self.delivered,
            rss.join(", ")
        )
    }
}

/// The `q` quantile of sorted `values` (nearest rank).
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// A process's resident memory in kB, from `/proc/<pid>/status`.
pub fn vm_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A soak's memory verdict per worker: the most it used in the last ten minutes against
/// minute five (the same process throughout). `None` when the run is too short or the worker
/// was started again after minute five.
pub fn rss_verdicts(minutes: &[Minute]) -> Vec<Option<RssVerdict>> {
    let workers = minutes.first().map_or(0, |m| m.rss.len());
    let Some(five) = minutes.iter().find(|m| m.minute == 5) else {
        return vec![None; workers];
    };
    let last = minutes.last().map_or(0, |m| m.minute);
    let from = last.saturating_sub(9).max(6);
    (0..workers)
        .map(|w| {
            let (pid, base) = five.rss[w]?;
            let tail: Vec<u64> = (minutes.iter())
                .filter(|m| m.minute >= from)
                .map(|m| match m.rss[w] {
                    Some((p, kb)) if p == pid => Some(kb),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let most = *tail.iter().max()?;
            Some(RssVerdict {
                base,
                most,
                from,
                to: last,
            })
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
pub struct RssVerdict {
    /// kB at minute five, and the most from minute `from` to `to`.
    pub base: u64,
    pub most: u64,
    pub from: u32,
    pub to: u32,
}

impl RssVerdict {
    pub fn ratio(&self) -> f64 {
        self.most as f64 / self.base as f64
    }

    pub fn within(&self) -> bool {
        self.ratio() <= 1.2
    }
}
