//! Where things live in the znode tree.
//!
//! ```text
//! ROOT                                  persistent, default /event-bridge
//! ├── tasks/task-0000000042             persistent sequential, the task body (JSON): the
//! │                                     normal lane
//! ├── lanes/high/high-0000000007        the high lane's tasks (and `lanes/low/low-…`)
//! ├── lanes/keys/<key>/key.<key>.0000000003
//! │                                     a concurrency key's lane (`<key>` encoded); the
//! │                                     parent's data is the lane's head
//! ├── heads/high                        the high (or low) lane's head, as `head` is normal's
//! ├── debounce/<key>                    a debounced publish's pending task (`<key>` encoded)
//! ├── leases/task-0000000042            persistent, present while a consumer holds the task
//! ├── delayed/1763805610000/1763805612345~task-0000000042
//! │                                     (`<bucket>/<due>~<task>`) a task waiting out a backoff or
//! │                                     a delay, in the bucket of the 10 s in which it is due
//! ├── dead/task-0000000042              persistent, a dead-letter record (JSON)
//! ├── head                              the lowest sequence number a task may still have
//! ├── paused                            what is paused: the queue, event types (JSON; the
//! │                                     pause feature's, made with the base paths)
//! ├── cancelled/<id>                    a task cancelled while held (`<id>` encoded)
//! ├── groups/<group>                    an ordered group's lock (`<group>` encoded)
//! ├── keys/<key>                        an idempotency key and its task (`<key>` encoded)
//! ├── keys-expiry/<bucket>/<key>        a completed key, in the 10 min in which it expires
//! ├── done/<bucket>/<task>, @<id>       a completion record and its id's entry (`KEEP_DONE`)
//! ├── limits/<route>/<task>             a limited route's gate (its rate's bucket) and the
//! │                                     ephemeral slots of its running tasks
//! ├── after/<id>                         a task waiting for its parents (`<id>` encoded)
//! ├── dependents/<parent id>            a parent's marker: empty, then how it was settled
//! │   └── <child id>                    a child waiting for it (both ids encoded)
//! ├── steps/<id>/0000000042             a resumable task's recorded entries from position 42
//! │                                     on (JSON array; `<id>` encoded): the record's part
//! │                                     its envelope no longer keeps
//! ├── schedules/<name>                  a recurring schedule (JSON; `<name>` encoded)
//! │   └── <slot>                        the latest slot that made its task (ms, 13 digits)
//! └── clock                             persistent, written to read ZooKeeper's own time
//! ```
//!
//! The `tasks` and `leases` names, and a lease named after its task, are the 000 design's,
//! so its producers and consumers can share a queue with ours.

use crate::lane::{Lane, Priority};

mod names;
pub use names::*;

/// Completed idempotency keys expire in buckets of this many ms.
pub const KEY_BUCKET_MS: i64 = 600_000;

/// Completion records expire in buckets of this many ms.
pub const DONE_BUCKET_MS: i64 = 600_000;

/// The prefix ZooKeeper's sequence number is appended to in `tasks/` (the normal lane's).
pub const TASK_PREFIX: &str = "task-";

/// The folder of cancel marks under the root.
pub const CANCELLED: &str = "cancelled";

/// The folder of recurring schedules under the root.
pub const SCHEDULES: &str = "schedules";

/// Paths of one queue, derived from its root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: String,
}

impl Layout {
    /// A layout under `root`, which must be an absolute path without a trailing slash.
    pub fn new(root: &str) -> Self {
        Layout {
            root: root.trim_end_matches('/').to_string(),
        }
    }

    /// The root path (`/` for an empty root).
    pub fn root(&self) -> &str {
        if self.root.is_empty() {
            "/"
        } else {
            &self.root
        }
    }

    /// The normal lane: the 000 design's parent of task znodes.
    pub fn tasks(&self) -> String {
        format!("{}/tasks", self.root)
    }

    /// The parent of lease znodes, one per held task, named after it.
    pub fn leases(&self) -> String {
        format!("{}/leases", self.root)
    }

    /// The parent of dead-letter records.
    pub fn dead(&self) -> String {
        format!("{}/dead", self.root)
    }

    /// The znode written to read ZooKeeper's time from its `mtime` (see [`crate::clock`]).
    pub fn clock(&self) -> String {
        format!("{}/clock", self.root)
    }

    /// The kick node: while it stands, a drain was kicked since the last one began, and
    /// publishers do not kick again (see [`crate::kick`]).
    pub fn kick(&self) -> String {
        format!("{}/kick", self.root)
    }

    /// The normal lane's head: the lowest sequence number a task may still have.
    pub fn head(&self) -> String {
        format!("{}/head", self.root)
    }

    /// Locks of ordered groups.
    pub fn groups(&self) -> String {
        format!("{}/groups", self.root)
    }

    /// The lock of group `group`: present while a task of the group runs, waits for a retry,
    /// or the group is paused.
    pub fn group(&self, group: &str) -> String {
        format!("{}/groups/{}", self.root, encode_segment(group))
    }

    /// Idempotency keys of tasks published with one.
    pub fn keys(&self) -> String {
        format!("{}/keys", self.root)
    }

    /// The znode of idempotency key `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}/keys/{}", self.root, encode_segment(key))
    }

    /// Completed keys by when they expire.
    pub fn key_expiry(&self) -> String {
        format!("{}/keys-expiry", self.root)
    }

    /// The bucket of keys expiring in the [`KEY_BUCKET_MS`] that start at `bucket`.
    pub fn key_expiry_bucket(&self, bucket: i64) -> String {
        format!("{}/keys-expiry/{bucket:013}", self.root)
    }

    /// Key `key`'s entry in `bucket`.
    pub fn key_expiry_entry(&self, bucket: i64, key: &str) -> String {
        format!("{}/{}", self.key_expiry_bucket(bucket), encode_segment(key))
    }

    /// Completion records (`KEEP_DONE`), in buckets by when they expire.
    pub fn done(&self) -> String {
        format!("{}/done", self.root)
    }

    /// The bucket of records expiring in the [`DONE_BUCKET_MS`] that start at `bucket`.
    pub fn done_bucket(&self, bucket: i64) -> String {
        format!("{}/done/{bucket:013}", self.root)
    }

    /// The completion record of task `name`, in `bucket`.
    pub fn done_record(&self, bucket: i64, name: &str) -> String {
        format!("{}/{name}", self.done_bucket(bucket))
    }

    /// The entry that finds the completion record of the task whose envelope id is `id`
    /// (`@` and the id encoded; no task name starts with `@`).
    pub fn done_id(&self, bucket: i64, id: &str) -> String {
        format!("{}/@{}", self.done_bucket(bucket), encode_segment(id))
    }

    /// The gates of limited routes.
    pub fn limits(&self) -> String {
        format!("{}/limits", self.root)
    }

    /// The gate of a limited route (`gate`: a znode name, see `limit::RouteLimits`): its data
    /// the rate's token bucket, its children the slots of tasks running.
    pub fn limit_gate(&self, gate: &str) -> String {
        format!("{}/limits/{gate}", self.root)
    }

    /// The gates of concurrency keys, by route.
    pub fn concurrency(&self) -> String {
        format!("{}/concurrency", self.root)
    }

    /// The gates of the concurrency keys of route `gate` (a znode name, as for
    /// [`Layout::limit_gate`]).
    pub fn key_gates(&self, gate: &str) -> String {
        format!("{}/concurrency/{gate}", self.root)
    }

    /// The gate of concurrency key `key` within route `gate`: its data the key's token bucket,
    /// its children the slots of the key's tasks running.
    pub fn key_gate(&self, gate: &str, key: &str) -> String {
        format!("{}/concurrency/{gate}/{}", self.root, encode_segment(key))
    }

    /// Recurring schedules.
    pub fn schedules(&self) -> String {
        format!("{}/{SCHEDULES}", self.root)
    }

    /// Schedule `name` (its definition and the latest slot it took).
    pub fn schedule(&self, name: &str) -> String {
        format!("{}/schedules/{}", self.root, encode_segment(name))
    }

    /// The mark of schedule `name`'s slot at `slot_ms` (ms since the epoch), created with the
    /// slot's task: one znode per slot, so a slot can make its task once.
    pub fn schedule_slot(&self, name: &str, slot_ms: i64) -> String {
        format!("{}/{slot_ms:013}", self.schedule(name))
    }

    /// Where tasks wait for their parents.
    pub fn after(&self) -> String {
        format!("{}/after", self.root)
    }

    /// The task with envelope id `id`, waiting for its parents.
    pub fn blocked(&self, id: &str) -> String {
        format!("{}/after/{}", self.root, encode_segment(id))
    }

    /// The name a task that dies while it waits for its parents has among the dead letters
    /// (it never had a task name): `after-` and its id, encoded.
    pub fn blocked_name(id: &str) -> String {
        format!("{BLOCKED_PREFIX}{}", encode_segment(id))
    }

    /// The markers of parents that have children waiting.
    pub fn dependents(&self) -> String {
        format!("{}/dependents", self.root)
    }

    /// The marker of the task with envelope id `id`: present while children wait for it.
    pub fn dependents_of(&self, id: &str) -> String {
        format!("{}/dependents/{}", self.root, encode_segment(id))
    }

    /// Child `child`'s entry under its parent `parent`'s marker (both envelope ids).
    pub fn dependent(&self, parent: &str, child: &str) -> String {
        format!("{}/{}", self.dependents_of(parent), encode_segment(child))
    }

    /// Where batches are kept.
    pub fn batches(&self) -> String {
        format!("{}/batches", self.root)
    }

    /// Batch `name`'s counters (see [`crate::batch`]).
    pub fn batch(&self, name: &str) -> String {
        format!("{}/batches/{}", self.root, encode_segment(name))
    }

    /// Marks of tasks cancelled while a consumer held them.
    pub fn cancelled(&self) -> String {
        format!("{}/{CANCELLED}", self.root)
    }

    /// The mark of the task whose envelope id is `id`.
    pub fn cancel_mark(&self, id: &str) -> String {
        format!("{}/cancelled/{}", self.root, encode_segment(id))
    }

    /// Resumable tasks' stored record entries, a folder per task.
    pub fn steps(&self) -> String {
        format!("{}/steps", self.root)
    }

    /// The folder of the task whose envelope id is `id`'s stored record entries.
    pub fn steps_of(&self, id: &str) -> String {
        format!("{}/steps/{}", self.root, encode_segment(id))
    }

    /// The znode of `id`'s record entries from position `first` on.
    pub fn step_chunk(&self, id: &str, first: usize) -> String {
        format!("{}/{first:010}", self.steps_of(id))
    }

    /// What the last audit found stuck (absent when it found nothing).
    pub fn audit(&self) -> String {
        format!("{}/audit", self.root)
    }

    /// Tasks waiting out a retry's backoff, a producer's delay, a sleep or a wait for a signal.
    pub fn delayed(&self) -> String {
        format!("{}/delayed", self.root)
    }

    /// The bucket of tasks due in the [`DELAY_BUCKET_MS`] that start at `bucket` (ZooKeeper ms).
    pub fn delay_bucket(&self, bucket: i64) -> String {
        format!("{}/delayed/{bucket:013}", self.root)
    }

    /// Task `name`, waiting in `bucket`.
    pub fn delayed_task(&self, bucket: i64, name: &str) -> String {
        format!("{}/delayed/{bucket:013}/{name}", self.root)
    }

    /// The path a producer creates sequential tasks under (`…/tasks/task-`).
    pub fn task_prefix(&self) -> String {
        format!("{}/tasks/{TASK_PREFIX}", self.root)
    }

    /// Debounced publishes waiting for their period to end (`debounce/<key>`).
    pub fn debounce(&self) -> String {
        format!("{}/debounce", self.root)
    }

    /// The pending task of debounce key `key` (encoded as one znode name).
    pub fn debounced(&self, key: &str) -> String {
        format!("{}/debounce/{}", self.root, encode_segment(key))
    }

    /// The due index of debounced keys: one bucket per 10 s in which keys fall due, and the
    /// bucket of keys no run has filed yet ([`UNFILED_BUCKET`]).
    pub fn debounce_due(&self) -> String {
        format!("{}/debounce-due", self.root)
    }

    /// The index bucket `bucket` (ZooKeeper ms; [`UNFILED_BUCKET`] for keys not filed yet).
    pub fn debounce_due_bucket(&self, bucket: i64) -> String {
        format!("{}/debounce-due/{bucket:013}", self.root)
    }

    /// Debounce key `key`'s entry in index bucket `bucket`.
    pub fn debounce_due_entry(&self, bucket: i64, key: &str) -> String {
        format!(
            "{}/debounce-due/{bucket:013}/{}",
            self.root,
            encode_segment(key)
        )
    }

    /// The parent of the lanes other than normal's (`tasks/`).
    pub fn lanes(&self) -> String {
        format!("{}/lanes", self.root)
    }

    /// The parent of the heads of the lanes other than normal's (`head`).
    pub fn heads(&self) -> String {
        format!("{}/heads", self.root)
    }

    /// The parent of the key lanes (`lanes/keys`).
    pub fn key_lanes(&self) -> String {
        format!("{}/lanes/keys", self.root)
    }

    /// Where tasks of `lane` are: `tasks/` for normal, `lanes/<lane>/` for high and low,
    /// `lanes/keys/<key>/` for a key's.
    pub fn lane_tasks(&self, lane: &Lane) -> String {
        match lane {
            Lane::Priority(Priority::Normal) => self.tasks(),
            Lane::Priority(other) => format!("{}/lanes/{other}", self.root),
            Lane::Key(key) => format!("{}/lanes/keys/{key}", self.root),
        }
    }

    /// The head of `lane`: `head` for normal, `heads/<lane>` for high and low, the lane's
    /// parent itself for a key's (its data).
    pub fn lane_head(&self, lane: &Lane) -> String {
        match lane {
            Lane::Priority(Priority::Normal) => self.head(),
            Lane::Priority(other) => format!("{}/heads/{other}", self.root),
            Lane::Key(_) => self.lane_tasks(lane),
        }
    }

    /// The path sequential tasks of `lane` are created under (`…/lanes/high/high-`).
    pub fn lane_prefix(&self, lane: &Lane) -> String {
        format!("{}/{}", self.lane_tasks(lane), lane.prefix())
    }

    /// Task `name`, in the lane its name says.
    pub fn task(&self, name: &str) -> String {
        format!("{}/{name}", self.lane_tasks(&Lane::of_name(name)))
    }

    /// The lease of task `name`.
    pub fn lease(&self, name: &str) -> String {
        format!("{}/leases/{name}", self.root)
    }

    /// The dead-letter record of task `name`.
    pub fn dead_letter(&self, name: &str) -> String {
        format!("{}/dead/{name}", self.root)
    }

    /// Where signals are kept until consumed, and tasks that wait for them registered.
    pub fn signals(&self) -> String {
        format!("{}/signals", self.root)
    }

    /// Signal key `key` (encoded as one znode name).
    pub fn signal_key(&self, key: &str) -> String {
        format!("{}/signals/{}", self.root, encode_segment(key))
    }

    /// Every persistent node the bridge needs, parents first.
    pub fn base_paths(&self) -> Vec<String> {
        let mut paths = Vec::new();
        let mut prefix = String::new();
        for part in self.root.split('/').filter(|p| !p.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            paths.push(prefix.clone());
        }
        paths.extend([
            self.tasks(),
            self.lanes(),
            self.lane_tasks(&Priority::High.into()),
            self.lane_tasks(&Priority::Low.into()),
            self.key_lanes(),
            self.heads(),
            self.debounce(),
            self.debounce_due(),
            self.debounce_due_bucket(UNFILED_BUCKET),
            self.leases(),
            self.delayed(),
            self.dead(),
            self.cancelled(),
            self.groups(),
            self.keys(),
            self.key_expiry(),
            self.schedules(),
            self.after(),
            self.dependents(),
            self.signals(),
            self.steps(),
            self.clock(),
        ]);
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_000_layout() {
        let l = Layout::new("/event-bridge");
        assert_eq!(
            l.task("task-0000000001"),
            "/event-bridge/tasks/task-0000000001"
        );
        assert_eq!(
            l.lease("task-0000000001"),
            "/event-bridge/leases/task-0000000001"
        );
        assert_eq!(l.task_prefix(), "/event-bridge/tasks/task-");
        assert_eq!(
            l.task("high-0000000001"),
            "/event-bridge/lanes/high/high-0000000001"
        );
        assert_eq!(
            l.lane_prefix(&Priority::Low.into()),
            "/event-bridge/lanes/low/low-"
        );
        assert_eq!(
            l.lane_head(&Priority::High.into()),
            "/event-bridge/heads/high"
        );
        assert_eq!(l.lane_head(&Lane::NORMAL), "/event-bridge/head");
        let key = Lane::of_key("a/b");
        assert_eq!(
            l.task("key.a%2Fb.0000000002"),
            "/event-bridge/lanes/keys/a%2Fb/key.a%2Fb.0000000002"
        );
        assert_eq!(l.lane_head(&key), "/event-bridge/lanes/keys/a%2Fb");
        assert_eq!(sequence("key.a%2Fb.0000000002"), Some(2));
    }

    #[test]
    fn base_paths_start_with_every_ancestor() {
        let l = Layout::new("/a/b/");
        assert_eq!(
            l.base_paths(),
            [
                "/a",
                "/a/b",
                "/a/b/tasks",
                "/a/b/lanes",
                "/a/b/lanes/high",
                "/a/b/lanes/low",
                "/a/b/lanes/keys",
                "/a/b/heads",
                "/a/b/debounce",
                "/a/b/debounce-due",
                "/a/b/debounce-due/0000000000000",
                "/a/b/leases",
                "/a/b/delayed",
                "/a/b/dead",
                "/a/b/cancelled",
                "/a/b/groups",
                "/a/b/keys",
                "/a/b/keys-expiry",
                "/a/b/schedules",
                "/a/b/after",
                "/a/b/dependents",
                "/a/b/signals",
                "/a/b/steps",
                "/a/b/clock"
            ]
        );
    }
}
