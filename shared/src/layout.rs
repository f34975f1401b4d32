//! Where things live in the znode tree.
//!
//! ```text
//! ROOT                      persistent, default /event-bridge
//! ├── tasks/task-0000000001 persistent sequential, the task body (JSON)
//! ├── leases/task-0000000001 persistent, present while a consumer holds the task
//! ├── dead/task-0000000001  persistent, a dead-letter record (JSON)
//! └── clock                 persistent, written to read ZooKeeper's own time
//! ```
//!
//! The `tasks` and `leases` names, and a lease named after its task, are the 000 design's,
//! so its producers and consumers can share a queue with ours.

/// The prefix ZooKeeper's sequence number is appended to.
pub const TASK_PREFIX: &str = "task-";

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

    pub fn root(&self) -> &str {
        if self.root.is_empty() {
            "/"
        } else {
            &self.root
        }
    }

    pub fn tasks(&self) -> String {
        format!("{}/tasks", self.root)
    }

    pub fn leases(&self) -> String {
        format!("{}/leases", self.root)
    }

    pub fn dead(&self) -> String {
        format!("{}/dead", self.root)
    }

    pub fn clock(&self) -> String {
        format!("{}/clock", self.root)
    }

    /// The path a producer creates sequential tasks under (`…/tasks/task-`).
    pub fn task_prefix(&self) -> String {
        format!("{}/tasks/{TASK_PREFIX}", self.root)
    }

    pub fn task(&self, name: &str) -> String {
        format!("{}/tasks/{name}", self.root)
    }

    pub fn lease(&self, name: &str) -> String {
        format!("{}/leases/{name}", self.root)
    }

    pub fn dead_letter(&self, name: &str) -> String {
        format!("{}/dead/{name}", self.root)
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
        paths.extend([self.tasks(), self.leases(), self.dead(), self.clock()]);
        paths
    }
}

/// The sequence number of a task name (`task-0000000042` → 42), or `None` for a name that
/// no sequential create made. Sorting by this, not by `getChildren` order, gives the oldest.
pub fn sequence(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(TASK_PREFIX)?;
    if digits.len() < 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Task names sorted oldest first; names that are not sequential tasks are dropped.
pub fn oldest_first(names: Vec<String>) -> Vec<String> {
    let mut tasks: Vec<(i64, String)> = names
        .into_iter()
        .filter_map(|n| sequence(&n).map(|s| (s, n)))
        .collect();
    tasks.sort_unstable();
    tasks.into_iter().map(|(_, n)| n).collect()
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
                "/a/b/leases",
                "/a/b/dead",
                "/a/b/clock"
            ]
        );
    }

    #[test]
    fn sequence_parses_only_sequential_names() {
        assert_eq!(sequence("task-0000000042"), Some(42));
        assert_eq!(sequence("task-2147483648"), Some(2_147_483_648));
        assert_eq!(sequence("task-12"), None);
        assert_eq!(sequence("lock-0000000001"), None);
        assert_eq!(sequence("task-00000000x1"), None);
    }

    #[test]
    fn oldest_first_sorts_by_number_not_text() {
        let names = vec![
            "task-0000000010".to_string(),
            "junk".to_string(),
            "task-0000000002".to_string(),
            "task-2147483647".to_string(),
        ];
        assert_eq!(
            oldest_first(names),
            ["task-0000000002", "task-0000000010", "task-2147483647"]
        );
    }
}
