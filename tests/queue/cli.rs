//! The `event-bridge` command, run as a user would. The tests wait on the command with
//! blocking calls, so they run on two threads: the ZooKeeper session's pings go on meanwhile.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use harness::{TestQueue, binary};

/// Runs `event-bridge args…` against the test's chroot, with `stdin` piped in.
pub(crate) fn eb(t: &TestQueue, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(binary("event-bridge"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    assert_eq!(
        stats["by_type"],
        serde_json::json!({"event": 1, "user.signup": 1, "x.y": 1})
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_body_that_is_not_json_ends_in_the_dead_letters_with_its_reason() {
    let t = TestQueue::new().await;
    json_lines(&eb(&t, &["publish", "--raw", "--payload", "a=1&b=2"], ""));
    assert_eq!(
        ok_json(&eb(&t, &["process", "--drain"], ""))["dead_lettered"],
        1
    );
    let dead = ok_json(&eb(&t, &["dead", "list", "--json"], ""));
    assert_eq!(dead.as_array().unwrap().len(), 1);
    assert_eq!(dead[0]["record"]["body_text"], "a=1&b=2");
    assert!(
        dead[0]["record"]["reason"]
            .as_str()
            .unwrap()
            .contains("not JSON")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

    let mut cmd = Command::new(binary("event-bridge"));
    let bad_var = cmd
        .arg("stats")
        .env("LEASE_TIMEOUT_MS", "5min")
        .output()
        .unwrap();
    assert_eq!(bad_var.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_var.stderr).contains("LEASE_TIMEOUT_MS"));

    let mut cmd = Command::new(binary("event-bridge"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_base_paths() {
    let t = TestQueue::new().await;
    let init = ok_json(&eb(&t, &["init"], ""));
    assert_eq!(init["acl"], "open");
    assert_eq!(
        t.children("").await,
        [
            "after",
            "cancelled",
            "clock",
            "dead",
            "debounce",
            "debounce-due",
            "delayed",
            "dependents",
            "groups",
            "heads",
            "keys",
            "keys-expiry",
            "lanes",
            "leases",
            "paused",
            "schedules",
            "signals",
            "steps",
            "tasks"
        ]
    );
    let paused = format!("{}/paused", t.config.root);
    let (data, _) = t.raw.get_data(&paused).await.unwrap();
    assert_eq!(
        data, b"{}",
        "made as JSON: a consumer of an earlier version parses it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_peek_show_pending_tasks_oldest_first_with_their_leases() {
    let t = TestQueue::new().await;
    let names = t.publish(3).await;
    let now = t.now().await;
    let event_bridge::queue::TaskOutcome::Claimed(_held) =
        t.queue.claim(&names[1], &now).await.unwrap()
    else {
        panic!("claim")
    };
    let list = ok_json(&eb(&t, &["list", "--json"], ""));
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(list[1]["lease"]["consumer_id"], t.queue.consumer_id());
    assert!(list[1]["lease"]["expires_in_ms"].as_i64().unwrap() > 0);
    assert_eq!(
        (list[0]["lease"].clone(), list[1]["attempts"].clone()),
        (Value::Null, 1.into())
    );
    let text = eb(&t, &["list"], "");
    assert!(String::from_utf8_lossy(&text.stdout).contains(t.queue.consumer_id()));

    let peek = ok_json(&eb(&t, &["peek", "2"], ""));
    assert_eq!(peek.as_array().unwrap().len(), 2);
    assert_eq!(peek[0]["envelope"]["payload"], serde_json::json!({"n": 0}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tells_pending_leased_delayed_dead_and_not_found_apart() {
    let t = TestQueue::new().await;
    let names = t.publish(2).await;
    let now = t.now().await;
    let event_bridge::queue::TaskOutcome::Claimed(held) =
        t.queue.claim(&names[1], &now).await.unwrap()
    else {
        panic!("claim")
    };
    let held = *held;
    let state = |out: Output| ok_json(&out)["state"].as_str().unwrap().to_string();
    assert_eq!(
        state(eb(&t, &["status", &names[0], "--json"], "")),
        "pending"
    );
    assert_eq!(
        state(eb(&t, &["status", &names[1], "--json"], "")),
        "leased"
    );
    t.queue
        .bury(held, "permanent failure", Some("boom".into()))
        .await
        .unwrap();
    let dead = ok_json(&eb(&t, &["status", &names[1], "--json"], ""));
    assert_eq!(
        (
            dead["state"].as_str(),
            dead["record"]["last_error"].as_str()
        ),
        (Some("dead"), Some("boom"))
    );

    let delayed = json_lines(&eb(
        &t,
        &["publish", "--delay", "1h", "--payload", "{}"],
        "",
    ));
    let id = delayed[0]["id"].as_str().unwrap();
    let by_id = ok_json(&eb(&t, &["status", id, "--json"], ""));
    assert_eq!(by_id["state"], "pending");
    assert!(
        by_id["task"]["backoff_left_ms"].as_i64().unwrap() > 3_000_000,
        "{by_id}"
    );
    let run = ok_json(&eb(&t, &["process", "--drain"], ""));
    assert_eq!(
        (run["completed"].as_u64(), run["in_backoff"].as_u64()),
        (Some(1), Some(1)),
        "{run}"
    );

    let missing = eb(&t, &["status", "task-0000009999"], "");
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no task task-0000009999"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_dead_letter_runs_again_with_its_id_and_fresh_attempts() {
    let t = TestQueue::with(|c| c.max_attempts = 1).await;
    let name = t.publish(1).await.remove(0);
    let now = t.now().await;
    let event_bridge::queue::TaskOutcome::Claimed(held) = t.queue.claim(&name, &now).await.unwrap()
    else {
        panic!("claim")
    };
    let held = *held;
    let id = held.task.envelope.id.clone();
    t.queue
        .bury(held, "gave up after 1 attempts", Some("503".into()))
        .await
        .unwrap();

    let shown = ok_json(&eb(&t, &["dead", "show", &name], ""));
    assert_eq!(shown["body"]["id"].as_str(), Some(id.as_str()));
    let refused = eb(&t, &["dead", "redrive", "--all"], "");
    assert_eq!(
        refused.status.code(),
        Some(1),
        "no --yes and no terminal: refuse"
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("without --yes"));
    assert_eq!(t.children("dead").await, std::slice::from_ref(&name));

    let redriven = ok_json(&eb(&t, &["dead", "redrive", "--yes", &name], ""));
    let new_name = redriven["redriven"][0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(t.children("dead").await.is_empty());
    let task = t.read_json(&format!("tasks/{new_name}")).await;
    assert_eq!(
        (task["id"].as_str(), task["attempts"].as_u64()),
        (Some(id.as_str()), Some(0))
    );
    let run = ok_json(&eb(&t, &["process", "--drain"], ""));
    assert_eq!(run["completed"], 1, "the redriven task completes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_dead_letters_for_good() {
    let t = TestQueue::new().await;
    for body in ["x", "y"] {
        json_lines(&eb(&t, &["publish", "--raw", "--payload", body], ""));
    }
    assert_eq!(
        ok_json(&eb(&t, &["process", "--drain"], ""))["dead_lettered"],
        2
    );
    let dead = t.children("dead").await;
    assert_eq!(
        ok_json(&eb(&t, &["dead", "purge", "--yes", &dead[0]], ""))["purged"],
        1
    );
    assert_eq!(
        ok_json(&eb(&t, &["dead", "purge", "--yes", "--all"], ""))["purged"],
        1
    );
    assert!(t.children("dead").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_has_help_and_none_shows_credentials() {
    let t = TestQueue::new().await;
    for verb in [
        "init", "doctor", "publish", "list", "peek", "status", "dead", "stats", "process", "reap",
        "cancel", "pause", "resume", "worker",
    ] {
        let mut cmd = Command::new(binary("event-bridge"));
        let out = cmd
            .args([verb, "--help"])
            .env("ZOOKEEPER_AUTH", "bridge:hunter2")
            .output()
            .unwrap();
        assert!(out.status.success(), "{verb} --help");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2"));
    }
    let _ = t;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_type_from_the_command_line() {
    let t = TestQueue::new().await;
    let paused = ok_json(&eb(&t, &["pause", "--type", "email"], ""));
    assert_eq!(paused["paused"]["type"], "email");
    assert_eq!(paused["changed"], true);
    assert!(paused["state"]["types"]["email"]["since"].is_i64());
    let published = json_lines(&eb(
        &t,
        &["publish", "--type", "email", "--payload", "{}"],
        "",
    ));
    let name = published[0]["task"].as_str().unwrap().to_string();
    let stats = ok_json(&eb(&t, &["stats", "--json"], ""));
    assert!(stats["paused"]["types"]["email"].is_object(), "{stats}");
    let status = eb(&t, &["status", &name], "");
    assert!(String::from_utf8_lossy(&status.stdout).contains("(paused)"));
    let report = ok_json(&eb(&t, &["process"], ""));
    assert_eq!(
        (report["claimed"].as_u64(), report["paused"].as_u64()),
        (Some(0), Some(1))
    );
    let resumed = ok_json(&eb(&t, &["resume", "--type", "email"], ""));
    assert_eq!(resumed["changed"], true);
    assert_eq!(resumed["state"], serde_json::json!({}));
    let report = ok_json(&eb(&t, &["process"], ""));
    assert_eq!(report["completed"].as_u64(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_from_the_command_line_and_its_exit_codes() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let done = ok_json(&eb(&t, &["cancel", &name], ""));
    assert_eq!(
        done,
        serde_json::json!({"state": "cancelled", "name": name})
    );
    let status = ok_json(&eb(&t, &["status", &name, "--json"], ""));
    assert_eq!(status["state"], "dead");
    assert_eq!(status["record"]["reason"], "cancelled");
    let unknown = eb(&t, &["cancel", "task-0000009999"], "");
    assert_eq!(unknown.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no task task-0000009999"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_a_taken_idempotency_key_prints_the_task_that_has_it() {
    let t = TestQueue::new().await;
    let args = [
        "publish",
        "--type",
        "order.paid",
        "--idempotency-key",
        "o-1",
    ];
    let first = json_lines(&eb(&t, &args, ""));
    let again = json_lines(&eb(&t, &args, ""));
    assert_eq!(again[0]["task"], first[0]["task"]);
    assert_eq!(again[0]["duplicate"], true);
    assert_eq!(again[0]["state"], "pending");
    // In a file, a key repeated creates one task.
    let lines = "{\"payload\": {}, \"idempotency_key\": \"o-2\"}\n".repeat(3);
    let out = json_lines(&eb(&t, &["publish", "-f", "-"], &lines));
    let duplicates = out.iter().filter(|l| l["duplicate"] == true).count();
    assert_eq!((out.len(), duplicates), (3, 2));
    assert_eq!(t.children("tasks").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_group_shows_in_stats_and_resumes_from_the_command_line() {
    let t = TestQueue::new().await;
    let args = [
        "publish",
        "--type",
        "order",
        "--group",
        "customer 9",
        "--on-dead",
        "pause",
        "--payload",
        "{}",
    ];
    json_lines(&eb(&t, &args, ""));
    json_lines(&eb(&t, &args, ""));
    let failing = event_bridge::handler::FnHandler(|_t: event_bridge::Task| async {
        Err(event_bridge::HandlerError::Permanent("no".into()))
    });
    let report = harness::run(&t.queue, &failing, 10).await;
    assert_eq!((report.dead_lettered, report.completed), (1, 0));
    let stats = ok_json(&eb(&t, &["stats", "--json"], ""));
    assert_eq!(stats["paused_groups"][0][0], "customer 9", "{stats}");
    let resumed = ok_json(&eb(&t, &["resume", "--group", "customer 9"], ""));
    assert_eq!(resumed["changed"], true);
    let recorder = harness::Recorder::default();
    assert_eq!(harness::run(&t.queue, &recorder, 10).await.completed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reads_piped_stdin_without_payload_or_file() {
    let t = TestQueue::new().await;
    let piped = json_lines(&eb(
        &t,
        &["publish", "--type", "piped"],
        "{\"a\":1}\n{\"a\":2}\n",
    ));
    assert_eq!(piped.len(), 2, "one task per piped line");
    let keyed = eb(&t, &["publish", "--idempotency-key", "k"], "{\"a\":3}\n");
    assert_eq!(keyed.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&keyed.stderr);
    assert!(stderr.contains("each JSON line"), "{stderr}");
    // An empty pipe, as a CI step without input has, and /dev/null, as under cron: the one
    // task from the arguments, as before.
    assert_eq!(
        json_lines(&eb(&t, &["publish", "--type", "empty"], "")).len(),
        1
    );
    let from_args = Command::new(binary("event-bridge"))
        .args(["publish", "--type", "args"])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(json_lines(&from_args).len(), 1);
    let peek = ok_json(&eb(&t, &["peek", "4"], ""));
    let seen: Vec<(String, Value)> = peek
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let envelope = &t["envelope"];
            (
                envelope["type"].as_str().unwrap().to_string(),
                envelope["payload"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("piped".into(), serde_json::json!({"a": 1})),
            ("piped".into(), serde_json::json!({"a": 2})),
            ("empty".into(), serde_json::json!({})),
            ("args".into(), serde_json::json!({})),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_from_the_command_line() {
    let t = TestQueue::new().await;
    let add = |name: &str, cron: &str, tz: &str| {
        eb(
            &t,
            &[
                "schedule",
                "add",
                name,
                "--cron",
                cron,
                "--tz",
                tz,
                "--type",
                "report",
                "--payload",
                r#"{"k":1}"#,
            ],
            "",
        )
    };
    let added = ok_json(&add("nightly", "0 3 * * *", "Europe/Berlin"));
    assert_eq!(
        (added["cron"].clone(), added["paused"].clone()),
        (json!("0 3 * * *"), json!(false))
    );
    let bad = add("bad", "0 3 * *", "UTC");
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("schedule bad: cron pattern"));
    let zone = add("zone", "0 3 * * *", "Berlin");
    assert!(String::from_utf8_lossy(&zone.stderr).contains("unknown time zone \"Berlin\""));

    let list = ok_json(&eb(&t, &["schedule", "list", "--json"], ""));
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(
        list[0]["next_slot"]
            .as_str()
            .unwrap()
            .ends_with(":00:00+00:00")
    );
    assert_eq!(
        ok_json(&eb(&t, &["schedule", "pause", "nightly"], ""))["paused"],
        true
    );
    assert_eq!(
        ok_json(&eb(&t, &["schedule", "resume", "nightly"], ""))["paused"],
        false
    );
    let now = ok_json(&eb(&t, &["schedule", "run-now", "nightly"], ""));
    assert_eq!(now["published"], "created");
    let peek = ok_json(&eb(&t, &["peek"], ""));
    assert_eq!(peek[0]["envelope"]["payload"], json!({"k": 1}));
    assert_eq!(peek[0]["envelope"]["scheduled"]["schedule"], "nightly");
    assert_eq!(
        ok_json(&eb(&t, &["schedule", "remove", "nightly"], ""))["removed"],
        "nightly"
    );
    for verb in ["remove", "pause", "resume", "run-now"] {
        let missing = eb(&t, &["schedule", verb, "nightly"], "");
        assert_eq!(missing.status.code(), Some(3), "{verb}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_a_completed_task_while_its_record_is_kept() {
    let t = TestQueue::new().await;
    let published = json_lines(&eb(&t, &["publish", "--payload", "{}"], ""));
    let name = published[0]["task"].as_str().unwrap().to_string();
    let id = published[0]["id"].as_str().unwrap().to_string();
    let processed = Command::new(binary("event-bridge"))
        .args(["process"])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .env("KEEP_DONE", "1h")
        .env("EVENT_BRIDGE_HANDLER", "noop")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(ok_json(&processed)["completed"], 1);
    let by_id = ok_json(&eb(&t, &["status", &id, "--json"], ""));
    assert_eq!(
        (by_id["state"].clone(), by_id["record"]["task"].clone()),
        (json!("completed"), json!(name))
    );
    let text = eb(&t, &["status", &name], "");
    assert_eq!(text.status.code(), Some(0));
    let line = String::from_utf8_lossy(&text.stdout);
    assert!(
        line.contains(&format!("{name}: completed at ")) && line.contains("after 1 attempts"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_carries_a_checked_traceparent() {
    let t = TestQueue::new().await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let args = ["publish", "--payload", "{}", "--traceparent", traceparent];
    json_lines(&eb(&t, &args, ""));
    let peek = ok_json(&eb(&t, &["peek"], ""));
    assert_eq!(peek[0]["envelope"]["traceparent"], traceparent);
    let bad = eb(
        &t,
        &["publish", "--payload", "{}", "--traceparent", "abc"],
        "",
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("W3C traceparent"));
    assert_eq!(
        t.children("tasks").await.len(),
        1,
        "the bad one published nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_after_waits_names_a_missing_parent_and_refuses_a_forward_line() {
    let t = TestQueue::new().await;
    let parent = ok_json(&eb(&t, &["publish", "--type", "report.build"], ""));
    let parent_task = parent["task"].as_str().unwrap();
    let child = ok_json(&eb(
        &t,
        &["publish", "--type", "report.mail", "--after", parent_task],
        "",
    ));
    assert_eq!(child["published"], "blocked", "{child}");
    assert_eq!(child["waiting_on"], json!([parent["id"]]));
    let status = eb(&t, &["status", child["id"].as_str().unwrap()], "");
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("waiting for 1 parent(s)"), "{said}");

    // A parent that is nowhere: exit 1, one line naming it, nothing written.
    let missing = eb(
        &t,
        &[
            "publish",
            "--type",
            "report.mail",
            "--after",
            "task-0000009999",
        ],
        "",
    );
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("parent task-0000009999: no such task"),
        "{err}"
    );
    // A line waiting for a later line's id: refused before anything is published.
    let file = std::env::temp_dir().join(format!("after-{}.jsonl", harness::uuid_like()));
    std::fs::write(
        &file,
        "{\"type\":\"a\",\"payload\":{},\"after\":\"later\"}\n{\"type\":\"a\",\"payload\":{},\"id\":\"later\"}\n",
    )
    .unwrap();
    let forward = eb(&t, &["publish", "-f", file.to_str().unwrap()], "");
    std::fs::remove_file(&file).unwrap();
    assert_eq!(forward.status.code(), Some(1));
    let err = String::from_utf8_lossy(&forward.stderr);
    assert!(err.contains("cycle"), "{err}");
    assert_eq!(t.children("tasks").await.len(), 1, "only the parent");
    assert_eq!(t.children("after").await.len(), 1, "only the first child");
}

/// The command's own errors, and the library's as it prints them, each name their fix: the
/// list of what a user of the command can hit beyond the library's (whose list is the crate's
/// `fixes.rs`), each run as a user would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commands_errors_name_their_fix() {
    let t = TestQueue::new().await;
    let with_env = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(binary("event-bridge"));
        cmd.args(args)
            .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper);
        cmd.envs(env.iter().copied())
            .stdin(Stdio::piped())
            .output()
            .unwrap()
    };
    for (args, env, code, fix) in [
        (
            &["dead", "show", "task-0000000999"][..],
            &[][..],
            1,
            "run `event-bridge dead list`",
        ),
        (&["dead", "purge", "--all"], &[], 1, "pass --yes"),
        (
            &["dead", "redrive"],
            &[],
            1,
            "name the dead letters, or pass --all",
        ),
        (
            &["publish", "--traceparent", "abc", "--payload", "{}"],
            &[],
            2,
            "give a W3C traceparent",
        ),
        (
            &["serve", "--sample-every", "0s"],
            &[],
            2,
            "give a period of more than zero",
        ),
        (
            &["doctor", "--reaper-every", "0s"],
            &[],
            2,
            "give a period of more than zero",
        ),
        (
            &["stats"],
            &[("LEASE_TIMEOUT_MS", "5min")],
            1,
            "set it to a whole number",
        ),
        (
            &["stats"],
            &[
                ("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:9"),
                ("ZOOKEEPER_CONNECT_TIMEOUT_MS", "1000"),
            ],
            1,
            "check that it runs and that ZOOKEEPER_CONNECTION_STRING names it",
        ),
    ] {
        let out = with_env(args, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(fix),
            "{args:?}: {stderr:?} does not say {fix:?}"
        );
    }
}
