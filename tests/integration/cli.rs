//! The `event-bridge` command, run as a user would.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::harness::{TestQueue, binary};

/// Runs `event-bridge args…` against the test's chroot, with `stdin` piped in.
fn eb(t: &TestQueue, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(binary("event-bridge", "event-bridge"))
        .args(args)
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn event-bridge");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

fn json_lines(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn publish_process_and_stats_from_the_command_line() {
    let t = TestQueue::new().await;
    let one = json_lines(&eb(
        &t,
        &[
            "publish",
            "--type",
            "user.signup",
            "--payload",
            r#"{"id":1}"#,
        ],
        "",
    ));
    assert_eq!(one.len(), 1);
    let lines =
        "{\"n\":1}\n\n{\"type\":\"x.y\",\"payload\":{\"n\":2},\"idempotency_key\":\"k2\"}\n";
    let many = json_lines(&eb(&t, &["publish", "-f", "-"], lines));
    assert_eq!(many.len(), 2);
    let second = t
        .read_json(&format!("tasks/{}", many[1]["task"].as_str().unwrap()))
        .await;
    assert_eq!(
        (second["type"].as_str(), second["idempotency_key"].as_str()),
        (Some("x.y"), Some("k2"))
    );

    let stats = ok_json(&eb(&t, &["stats", "--json"], ""));
    assert_eq!(stats["depth"], 3);
    let scheduled = ok_json(&eb(&t, &["process"], ""));
    assert_eq!(
        scheduled["completed"], 1,
        "a scheduled run takes MAX_TASKS_PER_RUN=1"
    );
    let drained = ok_json(&eb(&t, &["process", "--drain"], ""));
    assert_eq!(
        (
            drained["completed"].as_u64(),
            drained["remaining_depth"].as_u64()
        ),
        (Some(2), Some(0))
    );
    let reaped = ok_json(&eb(&t, &["reap"], ""));
    assert_eq!(
        (reaped["reaped"].as_u64(), reaped["depth"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn a_raw_body_that_is_not_json_ends_in_the_dead_letters_with_its_reason() {
    let t = TestQueue::new().await;
    json_lines(&eb(&t, &["publish", "--raw", "--payload", "a=1&b=2"], ""));
    assert_eq!(
        ok_json(&eb(&t, &["process", "--drain"], ""))["dead_lettered"],
        1
    );
    let dead = json_lines(&eb(&t, &["dead-list"], ""));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["record"]["body_text"], "a=1&b=2");
    assert!(
        dead[0]["record"]["reason"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

#[tokio::test]
async fn errors_are_one_line_on_stderr_with_a_failing_exit_code() {
    let t = TestQueue::new().await;
    let bad_line = eb(&t, &["publish", "-f", "-"], "{\"ok\":1}\nnot json\n");
    assert_eq!(bad_line.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad_line.stderr);
    assert!(stderr.contains("-:2: not JSON"), "{stderr}");
    assert!(
        t.children("tasks").await.is_empty(),
        "nothing is published from a bad file"
    );

    let mut cmd = Command::new(binary("event-bridge", "event-bridge"));
    let bad_var = cmd
        .arg("stats")
        .env("LEASE_TIMEOUT_MS", "5min")
        .output()
        .unwrap();
    assert_eq!(bad_var.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_var.stderr).contains("LEASE_TIMEOUT_MS"));

    let mut cmd = Command::new(binary("event-bridge", "event-bridge"));
    let down = cmd
        .arg("stats")
        .env("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:9")
        .env("ZOOKEEPER_CONNECT_TIMEOUT_MS", "1000")
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("cannot reach ZooKeeper at 127.0.0.1:9")
    );
}
