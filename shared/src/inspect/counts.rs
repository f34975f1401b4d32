//! Counts by event type: from the [`SAMPLE`] tasks at the head of the queue by default (a
//! bounded look, whatever the backlog), or from the whole queue when asked (a request per
//! window of pending tasks, in bounded memory).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::clock::ZkTime;
use crate::error::Result;
use crate::queue::{Queue, TaskRead, Walk};
use crate::state::State;
use crate::stats::{self, Stats};
use crate::task::{self, Body};

/// Tasks at the head counted by type when the whole queue is not asked for.
pub const SAMPLE: usize = 1_000;

/// The counts with a count per event type.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DetailedStats {
    /// The plain counts (depth, leases, dead letters, …), flattened into the same JSON object.
    #[serde(flatten)]
    pub stats: Stats,
    /// Tasks whose type was counted: all pending tasks, or the sample at the head.
    pub counted: usize,
    /// Whether `by_type` covers every pending task (`--full`), or only the sample.
    pub full: bool,
    /// Counted tasks by event type (a place under its task's type, poison under `(poison)`).
    pub by_type: BTreeMap<String, usize>,
    /// Counted tasks we may not read (their ACL shuts us out).
    pub unreadable: usize,
    /// Of the tasks under `delayed/` (all with `full`, else the first [`SAMPLE`]): how many
    /// are resumable tasks asleep, and how many wait for a signal.
    pub sleeping: usize,
    /// Of those, tasks waiting for a signal.
    pub awaiting_signal: usize,
    /// How many tasks under `delayed/` were looked at for those two.
    pub delayed_counted: usize,
}

/// The counts, with the event types of the [`SAMPLE`] oldest tasks, or of all with `full`.
pub async fn detailed_stats(queue: &Queue, now: &ZkTime, full: bool) -> Result<DetailedStats> {
    let mut detailed = DetailedStats {
        stats: stats::collect(queue, now).await?,
        full,
        ..Default::default()
    };
    let limit = if full { usize::MAX } else { SAMPLE };
    let mut walk = Walk::new();
    while detailed.counted < limit {
        let Some(window) = walk.next_window(queue).await? else {
            break;
        };
        for probed in window.into_iter().take(limit - detailed.counted) {
            detailed.counted += 1;
            let TaskRead::Found { body, .. } = &probed.read else {
                detailed.unreadable += 1;
                continue;
            };
            let event_type = match task::parse(body) {
                Body::Envelope(e) => e.event_type,
                Body::Place(place) => place.event_type,
                Body::Plain(v) => task::Envelope::from_plain(&probed.name, v, 0).event_type,
                Body::Poison(_) => "(poison)".into(),
            };
            *detailed.by_type.entry(event_type).or_default() += 1;
        }
    }
    count_suspended(queue, &mut detailed, limit).await?;
    Ok(detailed)
}

/// Counts the resumable tasks asleep or waiting for a signal among the first `limit` tasks
/// under `delayed/` (each body read: this is the look `stats` takes beyond its glance).
async fn count_suspended(queue: &Queue, detailed: &mut DetailedStats, limit: usize) -> Result<()> {
    let delays = queue.delays();
    for bucket in delays.buckets().await? {
        for (_, node) in delays.waiting_in(bucket).await? {
            if detailed.delayed_counted >= limit {
                return Ok(());
            }
            let path = format!("{}/{node}", queue.layout().delay_bucket(bucket));
            let Some((body, _)) = queue.read_path(&path).await? else {
                continue;
            };
            detailed.delayed_counted += 1;
            if let Body::Envelope(envelope) = task::parse(&body) {
                match super::status::delayed_state(&envelope) {
                    State::Sleeping => detailed.sleeping += 1,
                    State::AwaitingSignal => detailed.awaiting_signal += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(())
}
