//! The gates of concurrency keys (`concurrency/<route>/<key>`, see `gate`): what `stats` shows
//! of them, and how they are read for the reaper's sweep of gates nobody needs any more (the
//! concurrency keys' feature's, `features/concurrency_keys/`). A key's gate is made by the
//! first claim of a task with that key; without the sweep, every key ever used would leave
//! one behind. Also the load of the gates one task goes through, as `explain` shows it.
//!
//! A task of a route with `per_key` limits and a key goes through its key's gate, then through
//! the route's gate when the route has limits of its own: keys' gates decide first, the route's
//! gate counts only the tasks they let through, and each bucket is charged for the tasks finally
//! admitted (`Gates::through_gates`, `gate.rs`). All of a claim batch's gates not known are read
//! in one multi-read. A probe of a key lane's window reads that key's gates along (four at most,
//! `Gates::prefetch_key_gates`), so a claim of a key's tasks knows the gate without a read of its
//! own; what such a read learns never replaces what a claim of this process knows.
//!
//! A gate that does not exist yet reads as empty (nothing in flight, a full bucket), and the
//! claim's multi-op creates it where it would rewrite it; its parents (`concurrency/`, the
//! route's folder) are made once per process, before. Another claim that made the gate between
//! the read and the multi-op fails the create, as a stale rewrite fails, and the claim reads the
//! gates afresh and tries once more. Made apart (a create, then a second read), new gates held
//! the `make bench` row over 100 keys at 0.47x of plain; made in the multi-op, at 0.72x. A gate's
//! data says the cap it was admitted under and when its bucket is full again (`{"max_in_flight":
//! 2, "tokens": …, "at_ms": …, "full_at_ms": …}`), so that `stats` can tell a key at its cap
//! without the routes, and the reaper can delete a gate that holds nothing (no slot, untouched for
//! a minute, bucket full again by ZooKeeper's clock) at the version read: a claim through the gate
//! in between keeps it, and a claim that finds it deleted makes it again.
//!
//! A run keeps claiming other keys while one is at its cap: a pass whose walk reached the tail
//! having met tasks over a limit, while other tasks of it still run, walks again from the head
//! once the soonest of them may be tried (`Pass::wait_for_limits`, `process/pass/refill.rs`),
//! and a key at its cap waits in its own lane while the walk takes the other key lanes in turn.
//!
//! # Costs
//!
//! Per claim batch of a key, two more operations in the claim's multi-op (the gate's rewrite, its
//! slot) and about two in the completion's (the slot's rename); no request of its own, also for a
//! new key.

use serde::Serialize;
use zookeeper_client as zk;

use super::Gates;
use crate::error::Result;
use crate::layout::{decode_segment, encode_segment};
use crate::limit::GateData;

/// A concurrency key with tasks in flight, as `stats` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KeyInFlight {
    /// The route: its event type, or `@default`.
    pub route: String,
    /// The concurrency key.
    pub key: String,
    /// Tasks of the key held now.
    pub in_flight: usize,
    /// The cap it was last admitted under (absent for a key limited by rate only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
}

impl KeyInFlight {
    /// Whether the key has as many tasks in flight as its route lets it.
    pub fn at_limit(&self) -> bool {
        full(self.in_flight, self.max_in_flight)
    }
}

/// Whether `in_flight` tasks fill a gate whose cap is `max` (none: a gate limited by rate
/// only is never full).
fn full(in_flight: usize, max: Option<u32>) -> bool {
    max.is_some_and(|max| in_flight >= max as usize)
}

/// A gate's load, as `explain` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GateLoad {
    /// The route: its event type, or `@default`.
    pub route: String,
    /// The concurrency key, for a key's gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Tasks held in it now.
    pub in_flight: usize,
    /// The cap it was last admitted under (absent for a gate limited by rate only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Each slot's lead task (the first of the claim that made it) and the tasks it holds.
    pub slots: Vec<(String, usize)>,
    /// When its rate's bucket next holds a whole token, when it holds none now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_token_at_ms: Option<i64>,
}

impl GateLoad {
    /// Whether it lets no more tasks in until one of its own ends.
    pub fn at_cap(&self) -> bool {
        full(self.in_flight, self.max_in_flight)
    }
}

/// A key's gate as read.
pub(crate) struct KeyGate {
    pub(crate) route: String,
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) data: GateData,
    pub(crate) stat: zk::Stat,
    /// The tasks its slots stand for.
    pub(crate) in_flight: usize,
}

/// Gates read per multi-read.
const READ_BATCH: usize = 128;

impl Gates<'_> {
    /// The concurrency keys with tasks in flight, by route and key, at most `limit` gates
    /// looked at (the rest are not counted).
    pub async fn keys_in_flight(self, limit: usize) -> Result<Vec<KeyInFlight>> {
        let gates = self.read_key_gates(limit).await?;
        let mut keys: Vec<KeyInFlight> = gates
            .into_iter()
            .filter(|g| g.in_flight > 0)
            .map(|g| KeyInFlight {
                route: decode_segment(&g.route),
                key: decode_segment(&g.name),
                in_flight: g.in_flight,
                max_in_flight: g.data.max_in_flight,
            })
            .collect();
        keys.sort_by(|a, b| (&a.route, &a.key).cmp(&(&b.route, &b.key)));
        Ok(keys)
    }

    /// The gates a task of `event_type` with concurrency key `key` goes through, those that
    /// exist: its type's route's when that route has a gate of either kind, else the default
    /// route's (a gate exists only for a route that limits).
    pub async fn loads_for(
        self,
        event_type: &str,
        key: Option<&str>,
        now_ms: i64,
    ) -> Result<Vec<GateLoad>> {
        let routes = [encode_segment(event_type), "@default".to_string()];
        for route in routes {
            let mut paths = vec![(self.layout().limit_gate(&route), None)];
            if let Some(key) = key {
                paths.push((self.layout().key_gate(&route, key), Some(key.to_string())));
            }
            let just_paths: Vec<String> = paths.iter().map(|(p, _)| p.clone()).collect();
            let reads = self.read_with_children(&just_paths).await?;
            let loads: Vec<GateLoad> = (paths.into_iter().zip(reads))
                .filter_map(|((_, key), read)| {
                    let (data, _, slots) = read?;
                    let data = GateData::read(&data);
                    Some(GateLoad {
                        route: decode_segment(&route),
                        key,
                        in_flight: super::slots::tasks_in_all(&slots),
                        max_in_flight: data.max_in_flight,
                        slots: slots.iter().map(|s| slot_lead(s)).collect(),
                        next_token_at_ms: data.next_token_at(now_ms),
                    })
                })
                .collect();
            if !loads.is_empty() {
                return Ok(loads);
            }
        }
        Ok(Vec::new())
    }

    /// Every key's gate of every route, at most `limit`.
    pub(crate) async fn read_key_gates(self, limit: usize) -> Result<Vec<KeyGate>> {
        let mut gates = Vec::new();
        for route in self.children_of(&self.layout().concurrency()).await? {
            let route_path = self.layout().key_gates(&route);
            let mut names = self.children_of(&route_path).await?;
            names.truncate(limit.saturating_sub(gates.len()));
            for chunk in names.chunks(READ_BATCH) {
                let paths: Vec<String> =
                    chunk.iter().map(|n| format!("{route_path}/{n}")).collect();
                let reads = self.read_with_children(&paths).await?;
                for ((name, path), read) in chunk.iter().zip(paths).zip(reads) {
                    let Some((data, stat, slots)) = read else {
                        continue;
                    };
                    gates.push(KeyGate {
                        route: route.clone(),
                        name: name.clone(),
                        path,
                        data: GateData::read(&data),
                        stat,
                        in_flight: super::slots::tasks_in_all(&slots),
                    });
                }
            }
            if gates.len() >= limit {
                break;
            }
        }
        Ok(gates)
    }
}

/// A slot's lead task and the tasks it holds, from its name (`<count>.<tag>.<lead>`; an
/// earlier version's slot is named by its one task).
fn slot_lead(name: &str) -> (String, usize) {
    let lead = name.splitn(3, '.').nth(2).unwrap_or(name);
    (lead.to_string(), super::slots::tasks_in(name))
}
