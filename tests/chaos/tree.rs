//! The test's own look at the queue in ZooKeeper: a chroot of its own on the ensemble, the
//! settings every process of the run shares, and reads of `tasks/`, `leases/` and `dead/`
//! that ride out leader changes (they try again, on a new session when the old one is over).

use std::sync::Mutex;
use std::time::Duration;

use event_bridge::{Config, Queue};
use zookeeper_client as zk;

/// The lease timeout of the run: the minimum the bridge allows.
pub const LEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// The session timeout every process of the run asks for.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// How long a read is tried again while the ensemble does not answer (it may be electing a
/// leader): a hang guard.
const ANSWER_GUARD: Duration = Duration::from_secs(60);

/// A lease as read: the task it holds and who holds it.
pub struct Lease {
    pub task: String,
    pub consumer: String,
}

/// A dead letter as read: its name, reason, and the envelope id and type of its body.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub name: String,
    pub reason: String,
    pub id: String,
    pub event_type: String,
}

/// What is left in ZooKeeper once the consumers stopped.
#[derive(Debug, Default)]
pub struct Left {
    pub tasks: usize,
    /// The tasks left in the lanes (at most [`EXPLAINED`]), each with what `explain` says of
    /// it, so that a red run names what stayed.
    pub lane_tasks: Vec<String>,
    pub leases: usize,
    /// Tasks waiting under `delayed/`'s buckets.
    pub delayed: usize,
    /// Group locks, and of them those that say `paused`.
    pub groups: usize,
    pub paused_groups: usize,
    /// Slots held under the limited routes' gates.
    pub limit_slots: usize,
    /// Debounced publishes never fired (`debounce/`), the backdrop's keys apart.
    pub debounced: usize,
    /// Each of those keys described: its node's times, its envelope's id and where its entry in
    /// the due index is (or that it has none), so that a red run names what stayed.
    pub debounced_keys: Vec<String>,
    /// The backdrop's keys still pending: all of them, none due during the run (see
    /// `debounce::backdrop`).
    pub backdrop: usize,
    /// Cancel marks (`cancelled/`).
    pub cancel_marks: usize,
    /// Tasks still waiting for their parents (`after/`), and parents' markers
    /// (`dependents/`).
    pub blocked: usize,
    pub markers: usize,
    pub dead: Vec<DeadLetter>,
    /// The lines of what the audit that nothing is stuck found once the queue settled (none
    /// expected); `None` when it could not run.
    pub audit: Option<Vec<String>>,
    /// Where `explain` disagreed with what is left (none expected): `None` when it could not
    /// run; with how many tasks it explained.
    pub explained: Option<(usize, Vec<String>)>,
}

impl Left {
    /// What should be gone once the queue settled: tasks, leases, waiting tasks, unpaused
    /// group locks, slots, unfired debounced publishes, tasks waiting for parents and the
    /// parents' markers (every parent is settled by then).
    pub fn stuck(&self) -> usize {
        self.tasks
            + self.leases
            + self.delayed
            + (self.groups - self.paused_groups)
            + self.limit_slots
            + self.debounced
            + self.blocked
            + self.markers
    }
}

pub struct Tree {
    pub config: Config,
    chroot: String,
    client: Mutex<zk::Client>,
}

impl Tree {
    /// Creates a fresh chroot on the ensemble at `hosts` and the queue's base paths in it.
    pub async fn create(hosts: &str) -> Self {
        let chroot = format!("/chaos-{}", harness::uuid_like());
        let top = zk::Client::connect(hosts)
            .await
            .expect("connect to the ensemble");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        top.mkdir(&chroot, &open).await.expect("create the chroot");
        let mut config = Config::default();
        config.zookeeper = format!("{hosts}{chroot}");
        config.lease_timeout = LEASE_TIMEOUT;
        config.session_timeout = SESSION_TIMEOUT;
        let client = event_bridge::session::connect(&config)
            .await
            .expect("connect inside the chroot");
        let queue = Queue::new(client.clone(), &config, "chaos-tree");
        queue.ensure_paths().await.expect("base paths");
        Tree {
            config,
            chroot,
            client: Mutex::new(client),
        }
    }

    /// Every lease now, with its holder (leases that vanish while being read are left out).
    pub async fn leases(&self) -> Vec<Lease> {
        let dir = self.path("leases");
        // A follower answers reads from what it has applied: `sync` first, so that writes the
        // leader committed before now (a completion just sent) are seen.
        let _ = self.client().await.sync(&dir).await;
        let names = self.children(&dir).await;
        let client = self.client().await;
        let reads = names.iter().map(|name| {
            let client = client.clone();
            let path = format!("{dir}/{name}");
            async move { client.get_data(&path).await }
        });
        let mut leases = Vec::new();
        for (name, read) in names.iter().zip(futures::future::join_all(reads).await) {
            let Ok((data, _)) = read else { continue };
            let data: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
            let consumer = data["consumerId"].as_str().unwrap_or("?").to_string();
            let task = name.clone();
            leases.push(Lease { task, consumer });
        }
        leases
    }

    /// The envelope id of each of the tasks `names` (the name itself when the task is gone or
    /// not an envelope).
    pub async fn task_ids(&self, names: &[String]) -> Vec<(String, String)> {
        let client = self.client().await;
        let mut ids = Vec::new();
        for name in names {
            use event_bridge::lane::{Lane, Priority};
            let lane = match Lane::of_name(name) {
                Lane::Priority(Priority::High) => "lanes/high".to_string(),
                Lane::Priority(Priority::Low) => "lanes/low".to_string(),
                Lane::Priority(Priority::Normal) => "tasks".to_string(),
                Lane::Key(key) => format!("lanes/keys/{key}"),
            };
            let path = format!("{}/{name}", self.path(&lane));
            let id = match client.get_data(&path).await {
                Ok((data, _)) => serde_json::from_slice::<serde_json::Value>(&data)
                    .ok()
                    .and_then(|v| Some(v.get("id")?.as_str()?.to_string())),
                Err(_) => None,
            };
            ids.push((name.clone(), id.unwrap_or_else(|| name.clone())));
        }
        ids
    }

    /// What is left: the counts of every place a task or its traces can stay, and the dead
    /// letters read.
    pub async fn left(&self) -> Left {
        let groups = self.datas("groups").await;
        let paused_groups = (groups.iter())
            .filter(|(_, data)| String::from_utf8_lossy(data).contains("paused"))
            .count();
        let mut limit_slots = 0;
        for gate in self.children_if_any(&self.path("limits")).await {
            let path = format!("{}/{gate}", self.path("limits"));
            limit_slots += self.children_if_any(&path).await.len();
        }
        // The slots of concurrency keys, under each route's keys.
        for route in self.children_if_any(&self.path("concurrency")).await {
            let route = format!("{}/{route}", self.path("concurrency"));
            for key in self.children_if_any(&route).await {
                limit_slots += self.children_if_any(&format!("{route}/{key}")).await.len();
            }
        }
        let debounce = self.children_if_any(&self.path("debounce")).await;
        let dead: Vec<DeadLetter> = (self.datas("dead").await.into_iter())
            .map(|(name, data)| {
                let record: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
                let text = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
                DeadLetter {
                    name,
                    reason: text(&record["reason"]),
                    id: text(&record["body"]["id"]),
                    event_type: text(&record["body"]["type"]),
                }
            })
            .collect();
        Left {
            tasks: self.tasks().await,
            lane_tasks: self.explain_lane_tasks().await,
            leases: self.count("leases").await,
            delayed: self.delayed().await,
            groups: groups.len(),
            paused_groups,
            limit_slots,
            debounced: (debounce.iter())
                .filter(|k| !k.starts_with(crate::debounce::BACKDROP_PREFIX))
                .count(),
            debounced_keys: self.describe_debounced(&debounce).await,
            backdrop: (debounce.iter())
                .filter(|k| k.starts_with(crate::debounce::BACKDROP_PREFIX))
                .count(),
            cancel_marks: self.children_if_any(&self.path("cancelled")).await.len(),
            blocked: self.children_if_any(&self.path("after")).await.len(),
            markers: self.children_if_any(&self.path("dependents")).await.len(),
            explained: explained(
                &self.config,
                &dead,
                &backdrop_ids(&self.datas("debounce").await),
            )
            .await,
            dead,
            audit: audit(&self.config).await,
        }
    }

    /// The tasks in the lanes, at most [`EXPLAINED`], each with its lane and what `explain`
    /// says of it (or why it could not).
    async fn explain_lane_tasks(&self) -> Vec<String> {
        let mut lanes = vec!["tasks".to_string(), "lanes/high".into(), "lanes/low".into()];
        let keys = self.path("lanes/keys");
        for key in self.children_if_any(&keys).await {
            lanes.push(format!("lanes/keys/{key}"));
        }
        let mut left = Vec::new();
        for lane in lanes {
            for name in self.children_if_any(&self.path(&lane)).await {
                left.push((lane.clone(), name));
            }
        }
        if left.is_empty() {
            return Vec::new();
        }
        let Ok(queue) = crate::producer::new_queue(&self.config, "chaos-explainer").await else {
            return vec!["could not connect to explain them".into()];
        };
        let Ok(now) = queue.server_time().await else {
            return vec!["could not read the time to explain them".into()];
        };
        let mut said = Vec::new();
        for (lane, name) in left.into_iter().take(EXPLAINED) {
            let why = match event_bridge::inspect::explain(&queue, &now, &name).await {
                Ok(why) => format!("{:?}: {}", why.state, why.lines.join(" / ")),
                Err(e) => format!("explain failed: {e}"),
            };
            said.push(format!("{lane}/{name}: {why}"));
        }
        said
    }

    /// The pending debounced keys of `keys` (the backdrop's apart), each with its node's
    /// `ctime` and `mtime`, its envelope's id and the bucket of `debounce-due/` that holds its
    /// entry ("no entry" when none does).
    async fn describe_debounced(&self, keys: &[String]) -> Vec<String> {
        let keys: Vec<&String> = (keys.iter())
            .filter(|k| !k.starts_with(crate::debounce::BACKDROP_PREFIX))
            .collect();
        if keys.is_empty() {
            return Vec::new();
        }
        let due = self.path("debounce-due");
        let mut entries: Vec<(String, String)> = Vec::new();
        for bucket in self.children_if_any(&due).await {
            for key in self.children_if_any(&format!("{due}/{bucket}")).await {
                entries.push((key, bucket.clone()));
            }
        }
        let client = self.client().await;
        let mut described = Vec::new();
        for key in keys {
            let path = format!("{}/{key}", self.path("debounce"));
            let node = match client.get_data(&path).await {
                Ok((data, stat)) => {
                    let envelope: serde_json::Value =
                        serde_json::from_slice(&data).unwrap_or_default();
                    let id = envelope["id"].as_str().unwrap_or("?").to_string();
                    let (debounce, group) = (&envelope["debounce"], &envelope["group"]);
                    let placed = &envelope["placed"];
                    format!(
                        "id {id}, debounce {debounce}, group {group}, placed {placed}, ctime {}, mtime {}",
                        stat.ctime, stat.mtime
                    )
                }
                Err(e) => format!("unread: {e}"),
            };
            let buckets: Vec<&str> = (entries.iter())
                .filter(|(k, _)| k == key)
                .map(|(_, b)| b.as_str())
                .collect();
            let entry = match buckets.as_slice() {
                [] => "no entry in debounce-due/".to_string(),
                found => format!("entry in debounce-due/{}", found.join(", ")),
            };
            described.push(format!("{key} ({node}; {entry})"));
        }
        described
    }

    /// Debounced publishes pending, the backdrop's keys apart.
    pub async fn debouncing(&self) -> usize {
        let keys = self.children_if_any(&self.path("debounce")).await;
        let backdrop = |k: &&String| k.starts_with(crate::debounce::BACKDROP_PREFIX);
        keys.iter().filter(|k| !backdrop(k)).count()
    }

    /// Schedule `name`'s stored form (`schedules/<name>`), if it exists.
    pub async fn schedule(&self, name: &str) -> Option<serde_json::Value> {
        let path = format!("{}/{name}", self.path("schedules"));
        let mut tries = harness::Tries::within(ANSWER_GUARD);
        while tries.again().await {
            match self.client().await.get_data(&path).await {
                Ok((data, _)) => return serde_json::from_slice(&data).ok(),
                Err(zk::Error::NoNode) => return None,
                Err(_) => {}
            }
        }
        None
    }

    /// The children of `ROOT/<dir>` with their data (those that vanish meanwhile left out).
    async fn datas(&self, dir: &str) -> Vec<(String, Vec<u8>)> {
        let dir = self.path(dir);
        let names = self.children_if_any(&dir).await;
        let client = self.client().await;
        let mut all = Vec::new();
        for chunk in names.chunks(64) {
            let reads = chunk.iter().map(|name| {
                let client = client.clone();
                let path = format!("{dir}/{name}");
                async move { client.get_data(&path).await }
            });
            for (name, read) in chunk.iter().zip(futures::future::join_all(reads).await) {
                if let Ok((data, _)) = read {
                    all.push((name.clone(), data));
                }
            }
        }
        all
    }

    /// The children of `path`, none when it does not exist.
    async fn children_if_any(&self, path: &str) -> Vec<String> {
        let mut tries = harness::Tries::within(ANSWER_GUARD);
        while tries.again().await {
            match self.client().await.list_children(path).await {
                Ok(names) => return names,
                Err(zk::Error::NoNode) => return Vec::new(),
                Err(_) => {}
            }
        }
        panic!("listing {path} kept failing");
    }

    /// How many children `ROOT/<dir>` has.
    pub async fn count(&self, dir: &str) -> usize {
        let path = self.path(dir);
        self.children(&path).await.len()
    }

    /// Tasks in every lane: `tasks/`, `lanes/high`, `lanes/low` and each key's lane.
    pub async fn tasks(&self) -> usize {
        let mut tasks = 0;
        for lane in ["tasks", "lanes/high", "lanes/low"] {
            tasks += self.children_if_any(&self.path(lane)).await.len();
        }
        let keys = self.path("lanes/keys");
        for key in self.children_if_any(&keys).await {
            tasks += self.children_if_any(&format!("{keys}/{key}")).await.len();
        }
        tasks
    }

    /// Tasks waiting under `delayed/` (in its buckets); none when there is no `delayed/`.
    pub async fn delayed(&self) -> usize {
        let dir = self.path("delayed");
        let client = self.client().await;
        let Ok(buckets) = client.list_children(&dir).await else {
            return 0;
        };
        let mut waiting = 0;
        // A bucket listed may be promoted away and deleted before it is listed itself: it
        // holds nothing then.
        for bucket in buckets {
            waiting += self.children_if_any(&format!("{dir}/{bucket}")).await.len();
        }
        waiting
    }

    /// The payload ids of the signals still kept under their keys (`signals/<key>/s-…`).
    pub async fn kept_signals(&self) -> Vec<String> {
        let dir = self.path("signals");
        let mut kept = Vec::new();
        for key in self.children_if_any(&dir).await {
            let key = format!("{dir}/{key}");
            for child in self.children_if_any(&key).await {
                if !child.starts_with("s-") {
                    continue;
                }
                let read = self
                    .client()
                    .await
                    .get_data(&format!("{key}/{child}"))
                    .await;
                let Ok((data, _)) = read else { continue };
                let value: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
                if let Some(id) = value.pointer("/payload/id").and_then(|v| v.as_str()) {
                    kept.push(id.to_string());
                }
            }
        }
        kept
    }

    /// `ROOT/<dir>` as the servers name it, chroot included.
    pub fn server_path(&self, dir: &str) -> String {
        format!("{}{}", self.chroot, self.path(dir))
    }

    fn path(&self, dir: &str) -> String {
        format!("{}/{dir}", self.config.root)
    }

    /// The children of `path`, trying again until ZooKeeper answers (it may be electing a
    /// leader); gives up after a minute (a hang guard).
    async fn children(&self, path: &str) -> Vec<String> {
        let mut last = None;
        let mut tries = harness::Tries::within(ANSWER_GUARD);
        while tries.again().await {
            match self.client().await.list_children(path).await {
                Ok(names) => return names,
                Err(e) => last = Some(e),
            }
        }
        panic!("listing {path} kept failing: {last:?}");
    }

    /// The client, replaced first when its session is over.
    async fn client(&self) -> zk::Client {
        let current = self.client.lock().expect("client lock").clone();
        if !current.state().is_terminated() {
            return current;
        }
        let Ok(fresh) = event_bridge::session::connect(&self.config).await else {
            return current; // not yet: the next try connects again
        };
        *self.client.lock().expect("client lock") = fresh.clone();
        fresh
    }
}

/// The audit that nothing is stuck (`inspect::audit`, repairing nothing), on a session of
/// the checker's own: the lines of what it found; `None` when it could not run.
async fn audit(config: &Config) -> Option<Vec<String>> {
    let queue = crate::producer::new_queue(config, "chaos-auditor")
        .await
        .ok()?;
    let now = queue.server_time().await.ok()?;
    let found = event_bridge::inspect::audit(&queue, &now, false)
        .await
        .ok()?;
    Some(found.stuck.iter().map(|s| s.line()).collect())
}

/// Explained at the end, of each kind, at most.
const EXPLAINED: usize = 50;

/// The ids of the backdrop's debounced publishes, from `debounce/`'s children and data.
fn backdrop_ids(debounce: &[(String, Vec<u8>)]) -> Vec<String> {
    (debounce.iter())
        .filter(|(key, _)| key.starts_with(crate::debounce::BACKDROP_PREFIX))
        .filter_map(|(_, data)| {
            let envelope: serde_json::Value = serde_json::from_slice(data).ok()?;
            Some(envelope["id"].as_str()?.to_string())
        })
        .collect()
}

/// What `explain` says of what is left once the queue settled, on a session of the checker's
/// own: each dead letter (of [`EXPLAINED`]) is dead with its record's reason, each backdrop
/// key's publish (of as many) debounced and due later. The disagreements, and how many were
/// explained; `None` when it could not run.
async fn explained(
    config: &Config,
    dead: &[DeadLetter],
    backdrop: &[String],
) -> Option<(usize, Vec<String>)> {
    use event_bridge::inspect::{Reason, explain};
    use event_bridge::state::State;
    let queue = crate::producer::new_queue(config, "chaos-explainer")
        .await
        .ok()?;
    let now = queue.server_time().await.ok()?;
    let mut wrong = Vec::new();
    let mut explained = 0;
    for letter in dead.iter().take(EXPLAINED) {
        let why = explain(&queue, &now, &letter.name).await.ok()?;
        explained += 1;
        let right = why.state == Some(State::Dead)
            && matches!(&why.reasons[..], [Reason::Dead { why, .. }] if *why == letter.reason);
        if !right {
            wrong.push(format!("{}: {:?}", letter.name, why.lines));
        }
    }
    for id in backdrop.iter().take(EXPLAINED) {
        let why = explain(&queue, &now, id).await.ok()?;
        explained += 1;
        let later = |at: &i64| *at > now.now_ms();
        let right = why.state == Some(State::Debounced)
            && matches!(&why.reasons[..], [Reason::Debounced { due_at_ms, .. }] if later(due_at_ms));
        if !right {
            wrong.push(format!("{id}: {:?}", why.lines));
        }
    }
    Some((explained, wrong))
}
