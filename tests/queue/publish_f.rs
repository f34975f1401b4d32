//! `publish -f` accounts for every line: a line it cannot publish is named (its number and
//! why) with exit code 1, and every task that landed is printed.

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use harness::{TestQueue, binary};

/// A file of `lines` in the temporary directory.
fn file(lines: &[String]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("publish-f-{}.jsonl", harness::uuid_like()));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the file");
    path
}

/// `event-bridge` against `zookeeper` (a connection string with the chroot) and `t`'s root.
fn command(t: &TestQueue, zookeeper: &str, args: &[&str]) -> Command {
    let mut command = Command::new(binary("event-bridge"));
    command
        .args(args)
        .env("ZOOKEEPER_CONNECTION_STRING", zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `publish -f <path>`, or `publish -f -` with the file as standard input.
fn publish_file(t: &TestQueue, path: &std::path::Path, as_stdin: bool) -> Output {
    let mut command = match as_stdin {
        true => command(t, &t.config.zookeeper, &["publish", "-f", "-"]),
        false => command(
            t,
            &t.config.zookeeper,
            &["publish", "-f", path.to_str().unwrap()],
        ),
    };
    let stdin = match as_stdin {
        true => Stdio::from(std::fs::File::open(path).unwrap()),
        false => Stdio::null(),
    };
    command.stdin(stdin).output().expect("run event-bridge")
}

/// The JSON lines of `stdout`.
fn answers(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The task names the answers give.
fn printed_tasks(answers: &[Value]) -> BTreeSet<String> {
    (answers.iter())
        .filter_map(|a| a["task"].as_str().map(str::to_string))
        .collect()
}

/// 3 000 good lines, one too big for a znode, 5 more: the big one is named with its line
/// number and why, the exit code is 1, and what landed is exactly what was printed. From a
/// file, whose every line is checked before any is published, nothing lands; from standard
/// input, read once, the windows before the bad line's land and are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_size_line_is_named_and_every_task_that_landed_is_printed() {
    let mut lines: Vec<String> = (0..3_000).map(|i| json!({"n": i}).to_string()).collect();
    lines.push(json!({"blob": "x".repeat(1_100_000)}).to_string());
    lines.extend((0..5).map(|i| json!({"after": i}).to_string()));
    let path = file(&lines);
    for (as_stdin, landing) in [(false, 0), (true, 3_000)] {
        let t = TestQueue::new().await;
        let out = publish_file(&t, &path, as_stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.chars().take(600).collect();
        assert_eq!(out.status.code(), Some(1), "stdin {as_stdin}: {stderr}");
        assert!(
            stderr.contains(":3001: ") && stderr.contains("over the 1000000"),
            "stdin {as_stdin}: {stderr}"
        );
        let printed = printed_tasks(&answers(&out.stdout));
        let landed: BTreeSet<String> = t.children("tasks").await.into_iter().collect();
        assert_eq!(
            printed, landed,
            "stdin {as_stdin}: every task that landed is printed"
        );
        assert_eq!(landed.len(), landing, "stdin {as_stdin}");
    }
    std::fs::remove_file(&path).unwrap();
}
