//! Names of znodes: how a text becomes one segment, and how sequential task names and dead
//! letters' names carry their numbers.

use crate::lane::Lane;

pub use crate::segment::{decode_segment, encode_segment};

/// The sequence number of a task name (`task-0000000042` → 42, `high-0000000042` → 42 in its
/// lane), or `None` for a name that no sequential create made. ZooKeeper prints the parent's counter as a signed 32-bit
/// `%010d`, so after 2^31 − 1 creates the suffix turns negative (`task--2147483648`); read as
/// unsigned it keeps counting up, to 2^32 − 1. Sorting by this, not by `getChildren` order,
/// gives the oldest.
pub fn sequence(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(Lane::of_name(name).prefix().as_str())?;
    let (negative, magnitude) = match digits.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, digits),
    };
    // `%010d` pads to ten characters, the sign included.
    let width = if negative { 9..=10 } else { 10..=10 };
    if !width.contains(&magnitude.len()) || !magnitude.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let signed: i32 = digits.parse().ok()?;
    Some(signed as u32 as i64)
}

/// The name ZooKeeper gives the task of sequence number `n` (the inverse of [`sequence`]).
pub fn task_name(n: i64) -> String {
    lane_task_name(&Lane::NORMAL, n)
}

/// The name ZooKeeper gives the task of sequence number `n` in `lane`.
pub fn lane_task_name(lane: &Lane, n: i64) -> String {
    format!("{}{:010}", lane.prefix(), n as u32 as i32)
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

/// Tasks waiting out a delay are grouped by the 10 s in which they are due.
pub const DELAY_BUCKET_MS: i64 = 10_000;

/// The bucket of a task due at `due_ms`: the start of its 10 s, so a bucket may hold due tasks
/// once its name has passed.
pub fn delay_bucket_of(due_ms: i64) -> i64 {
    due_ms.div_euclid(DELAY_BUCKET_MS) * DELAY_BUCKET_MS
}

/// The due index's bucket of debounce keys that no run has filed yet: a publish that starts a
/// key (or may make it due sooner) files it there, since only a run knows ZooKeeper's time of
/// its write; every run looks at it, and files each key in the bucket its due time falls in.
pub const UNFILED_BUCKET: i64 = 0;

/// What the dead-letter name of a task that died waiting for its parents starts with.
pub const BLOCKED_PREFIX: &str = "after-";

/// Separates a dead letter's task name from the suffix it gets when that name was taken
/// (`dead/task-0000000007~0000000003`).
pub const DEAD_NAME_SUFFIX: char = '~';

/// Dead-letter names sorted by their task's sequence number, then by suffix; the letters of
/// tasks that died waiting for their parents (`after-<id>`) follow, by name; other names are
/// dropped.
pub fn dead_oldest_first(names: Vec<String>) -> Vec<String> {
    let mut dead: Vec<((i64, String), String)> = names
        .into_iter()
        .filter_map(|n| {
            if n.starts_with(BLOCKED_PREFIX) {
                return Some(((i64::MAX, n.clone()), n));
            }
            let (task, suffix) = n.split_once(DEAD_NAME_SUFFIX).unwrap_or((&n, ""));
            Some(((sequence(task)?, suffix.to_string()), n))
        })
        .collect();
    dead.sort_unstable();
    dead.into_iter().map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::Priority;
    use crate::layout::{Layout, TASK_PREFIX};

    #[test]
    fn any_text_is_one_znode_name() {
        assert_eq!(encode_segment("order-42_a"), "order-42_a");
        assert_eq!(encode_segment("a/b"), "a%2Fb");
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_eq!(encode_segment("é"), "%C3%A9");
        assert_eq!(encode_segment(""), "%");
        for text in ["order-42_a", "a/b", "..", "é", "", "100%"] {
            assert_eq!(decode_segment(&encode_segment(text)), text);
        }
    }

    #[test]
    fn sequence_parses_only_sequential_names() {
        assert_eq!(sequence("task-0000000042"), Some(42));
        assert_eq!(sequence("task-2147483647"), Some(2_147_483_647));
        assert_eq!(sequence("task--2147483648"), Some(2_147_483_648));
        assert_eq!(sequence("task--000000001"), Some(4_294_967_295));
        // Not names ZooKeeper makes: past i32, or padded wrongly.
        assert_eq!(sequence("task-2147483648"), None);
        assert_eq!(sequence("task--00000001"), None);
        assert_eq!(sequence("task-12"), None);
        assert_eq!(sequence("lock-0000000001"), None);
        assert_eq!(sequence("high-0000000007"), Some(7));
        assert_eq!(sequence("low--000000001"), Some(4_294_967_295));
        assert_eq!(lane_task_name(&Priority::High.into(), 7), "high-0000000007");
        assert_eq!(Priority::Normal.prefix(), TASK_PREFIX);
        assert_eq!(sequence("task-00000000x1"), None);
    }

    #[test]
    fn a_delay_bucket_starts_the_10_s_its_tasks_are_due_in() {
        assert_eq!(delay_bucket_of(1_000), 0);
        assert_eq!(delay_bucket_of(9_999), 0);
        assert_eq!(delay_bucket_of(10_000), 10_000);
        for due in [0, 1, 12_345, 1_763_805_612_345] {
            let bucket = delay_bucket_of(due);
            assert!(
                bucket <= due && due - bucket < DELAY_BUCKET_MS,
                "{due} {bucket}"
            );
        }
        let l = Layout::new("/eb");
        assert_eq!(l.delay_bucket(20_000), "/eb/delayed/0000000020000");
    }

    #[test]
    fn task_names_round_trip_through_their_numbers() {
        for n in [
            0,
            42,
            2_147_483_647,
            2_147_483_648,
            2_147_483_649,
            4_294_967_295,
        ] {
            assert_eq!(sequence(&task_name(n)), Some(n), "{n}: {}", task_name(n));
        }
        assert_eq!(task_name(2_147_483_648), "task--2147483648");
        assert_eq!(task_name(4_294_967_291), "task--000000005");
    }

    #[test]
    fn dead_letters_sort_by_task_then_suffix() {
        let names = vec![
            "task-0000000010".to_string(),
            "task-0000000002~0000000001".to_string(),
            "task-0000000002".to_string(),
            "junk".to_string(),
            "after-b".to_string(),
            "after-a".to_string(),
        ];
        assert_eq!(
            dead_oldest_first(names),
            [
                "task-0000000002",
                "task-0000000002~0000000001",
                "task-0000000010",
                "after-a",
                "after-b"
            ]
        );
    }

    #[test]
    fn oldest_first_sorts_by_number_not_text() {
        let names = vec![
            "task-0000000010".to_string(),
            "junk".to_string(),
            "task-0000000002".to_string(),
            "task--2147483648".to_string(),
            "task-2147483647".to_string(),
        ];
        assert_eq!(
            oldest_first(names),
            [
                "task-0000000002",
                "task-0000000010",
                "task-2147483647",
                "task--2147483648"
            ]
        );
    }
}
