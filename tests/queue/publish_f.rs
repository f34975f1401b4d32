//! `publish -f` accounts for every line: a line it cannot publish is named (its number and
//! why) with exit code 1, every task that landed is printed, and a publish cut short by a lost
//! connection counts every line it did not publish, not only those of the window it was in.

use std::collections::BTreeSet;
use std::io::Read;
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

/// The numbers a give-up message tells: tasks whose fate is unknown, and tasks not published.
fn give_up_counts(stderr: &str) -> (usize, usize) {
    let number_before = |words: &str| -> usize {
        let end = stderr
            .find(words)
            .unwrap_or_else(|| panic!("{words:?}: {stderr}"));
        let digits: String = stderr[..end]
            .trim_end()
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .chars()
            .rev()
            .collect::<String>()
            .parse()
            .expect(stderr)
    };
    (
        number_before("task(s) sent may or may not exist"),
        number_before("were not published"),
    )
}

/// A connection lost for good under the first window of a 5 000-line file: once `--retry-for`
/// has passed, the publish gives up, and its message counts every line not published (those of
/// the windows after, which were never sent, too): with the lines printed, every line is
/// accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giving_up_counts_every_line_not_published() {
    let t = TestQueue::new().await;
    // Long ids make the answers of one window more than a pipe holds: unread, the command
    // stops in its first window's answers, before the link is cut.
    let lines: Vec<String> = (0..5_000)
        .map(|i| json!({"id": format!("line-{i:05}-{}", "i".repeat(100)), "payload": {}}))
        .map(|line| line.to_string())
        .collect();
    let path = file(&lines);
    let proxy = harness::Proxy::start().await;
    let chroot = &t.config.zookeeper[t.config.zookeeper.find('/').unwrap()..];
    let through_proxy = format!("{}{chroot}", proxy.address);
    let args = ["publish", "--retry-for", "1s", "-f", path.to_str().unwrap()];
    let mut child = command(&t, &through_proxy, &args)
        .stdin(Stdio::null())
        .spawn()
        .expect("run event-bridge");
    harness::eventually("the first window to land", || async {
        !t.children("tasks").await.is_empty()
    })
    .await;
    proxy.set_cut(true);
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let read = tokio::task::spawn_blocking(move || {
        let (mut out, mut err) = (Vec::new(), String::new());
        stdout.read_to_end(&mut out).unwrap();
        stderr.read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        (out, err, status)
    });
    let (out, err, status) = read.await.unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let answers = answers(&out);
    let landed = printed_tasks(&answers).len();
    let unknown_printed = (answers.iter())
        .filter(|a| a["published"] == "unknown")
        .count();
    let (unknown, unsent) = give_up_counts(&err);
    assert_eq!(unknown, unknown_printed, "{err}");
    assert_eq!(
        landed + unknown + unsent,
        5_000,
        "{landed} printed, {unknown} unknown, {unsent} not published: {err}"
    );
}
