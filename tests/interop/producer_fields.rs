//! Fields the Python and Node producers check before they write: a concurrency key is
//! written as given, and one no gate can be named after is refused; a priority puts the task
//! in its lane, and a word that names none is refused; a debounce key makes publishes wait
//! under `debounce/<key>`, each replacing the last, and a period that is no duration is
//! refused. Each refusal names the field and publishes nothing.

use std::process::{Command, Stdio};

use harness::TestQueue;
use serde_json::Value;

use crate::interop::{
    installed, installed_gem, node_producer, python_producer, require_node, require_python,
    run_producer,
};

/// Each producer's command, pointed at the test's chroot, with `args` after.
fn producers(t: &TestQueue, args: &[&str]) -> [Command; 2] {
    producers_with(t, "{}", args)
}

/// As [`producers`], publishing `payload`.
fn producers_with(t: &TestQueue, payload: &str, args: &[&str]) -> [Command; 2] {
    [python_producer(), node_producer()].map(|mut c| {
        c.args(["--zookeeper", &t.config.zookeeper, "--root", &t.config.root])
            .args(["--type", "tenant.call", "--payload", payload])
            .args(args);
        c
    })
}

/// Runs a producer that publishes once and returns the JSON line it printed.
fn published(producer: &mut Command) -> Value {
    let output = producer.stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{producer:?}: {stderr}");
    let stdout = String::from_utf8(output.stdout).expect("producer output is UTF-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{producer:?}: {stdout}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{:?} is not JSON: {e}", lines[0]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_write_a_concurrency_key_and_refuse_one_that_names_no_gate() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    // Each in the key's lane, made by the first publish of the key.
    for mut producer in producers(&t, &["--concurrency-key", "tenant/9"]) {
        let published = run_producer(&mut producer);
        let (task, _) = &published[0];
        assert!(task.starts_with("key.tenant%2F9."), "{producer:?}: {task}");
        let body = t.read_json(&format!("lanes/keys/tenant%2F9/{task}")).await;
        assert_eq!(body["concurrency_key"], "tenant/9", "{producer:?}");
    }
    // With an idempotency key too, for a key whose lane is not made yet: the key and the task
    // go in one transaction, which fails at the lane until the producer makes it.
    for (i, mut producer) in producers(&t, &["--concurrency-key", "new"])
        .into_iter()
        .enumerate()
    {
        producer.args(["--idempotency-key", &format!("idem-{i}")]);
        let published = run_producer(&mut producer);
        let (task, _) = &published[0];
        assert!(task.starts_with("key.new."), "{producer:?}: {task}");
        assert!(t.read_json(&format!("keys/idem-{i}")).await["task"] == *task);
    }
    assert_eq!(t.children("lanes/keys/new").await.len(), 2);
    let too_long = "/".repeat(400); // 1 200 bytes as a znode name
    for key in ["", too_long.as_str()] {
        for mut producer in producers(&t, &["--concurrency-key", key]) {
            let output = producer.stdin(Stdio::null()).output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{producer:?}: {stderr}");
            assert!(stderr.contains("concurrency_key"), "{producer:?}: {stderr}");
        }
    }
    assert_eq!(
        t.children("lanes/keys/tenant%2F9").await.len(),
        2,
        "nothing more was published"
    );
    assert!(t.children("tasks").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_put_a_task_in_its_lane_and_refuse_a_priority_that_is_none() {
    require_python();
    require_node();
    // TestQueue::new creates the base paths, lanes/high and lanes/low among them.
    let t = TestQueue::new().await;
    for lane in ["high", "low"] {
        for mut producer in producers(&t, &["--priority", lane]) {
            let published = run_producer(&mut producer);
            let (task, _) = &published[0];
            assert!(
                task.starts_with(&format!("{lane}-")),
                "{producer:?}: {task}"
            );
            let body = t.read_json(&format!("lanes/{lane}/{task}")).await;
            assert_eq!(body["priority"], lane, "{producer:?}");
        }
    }
    for mut producer in producers(&t, &["--priority", "urgent"]) {
        let output = producer.stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{producer:?}: {stderr}");
        assert!(stderr.contains("priority"), "{producer:?}: {stderr}");
    }
    assert_eq!(
        t.children("lanes/high").await.len(),
        2,
        "one task from each producer"
    );
    assert_eq!(
        t.children("lanes/low").await.len(),
        2,
        "one task from each producer"
    );
    assert_eq!(
        t.children("tasks").await.len(),
        0,
        "nothing in the normal lane"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_debounce_by_key_and_refuse_a_bad_period() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    for (i, language) in ["python", "node"].into_iter().enumerate() {
        let key = format!("doc-{language}");
        let args = ["--debounce-key", key.as_str(), "--debounce", "30s"];
        let publish = |payload: &str| {
            let mut producer = producers_with(&t, payload, &args).into_iter().nth(i);
            published(producer.as_mut().unwrap())
        };
        let first = publish(r#"{"n":1}"#);
        let second = publish(r#"{"n":2}"#);
        for line in [&first, &second] {
            assert_eq!(line["published"], "debounced", "{language}: {line}");
            assert_eq!(line["key"], key.as_str(), "{language}: {line}");
        }
        assert!(first["replaced"].is_null(), "{language}: {first}");
        assert!(first["id"].is_string(), "{language}: {first}");
        assert_eq!(second["replaced"], first["id"], "{language}: {second}");
        assert_ne!(
            second["id"], first["id"],
            "{language}: each publish its own id"
        );
        let body = t.read_json(&format!("debounce/{key}")).await;
        assert_eq!(
            body["id"], second["id"],
            "{language}: the last publish waits"
        );
        assert_eq!(body["payload"]["n"], 2, "{language}: {body}");
        assert_eq!(body["debounce"]["key"], key.as_str(), "{language}: {body}");
        assert_eq!(body["debounce"]["period_ms"], 30_000, "{language}: {body}");
        assert!(
            body["debounce"].get("max_ms").is_none(),
            "{language}: no maximum was given: {body}"
        );
    }
    for mut producer in producers(&t, &["--debounce-key", "x", "--debounce", "soon"]) {
        let output = producer.stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{producer:?}: {stderr}");
        assert!(stderr.contains("debounce"), "{producer:?}: {stderr}");
    }
    assert_eq!(
        t.children("debounce").await,
        ["doc-node", "doc-python"],
        "one pending task a key, none for the refused one"
    );
    assert!(
        t.children("tasks").await.is_empty(),
        "a debounced publish creates no task"
    );
    // Each key is in the due index, so a run finds it once it is due (30 s after its last
    // publish, by ZooKeeper's clock).
    let (mut first, mut last) = (i64::MAX, 0);
    for key in ["doc-node", "doc-python"] {
        let path = format!("{}/debounce/{key}", t.config.root);
        let mtime = t.raw.get_data(&path).await.unwrap().1.mtime;
        (first, last) = (first.min(mtime), last.max(mtime));
    }
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, first + 29_999)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        event_bridge::features::debounce::fire_due(&t.queue, last + 30_000)
            .await
            .unwrap(),
        2
    );
    assert_eq!(t.children("tasks").await.len(), 2);
}

/// A grouped debounced publish keeps its turn in its group: the producers create its place in
/// its lane with it, and a grouped task published after it runs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_keep_a_debounced_grouped_tasks_turn() {
    require_python();
    require_node();
    for (i, language) in ["python", "node"].into_iter().enumerate() {
        let t = TestQueue::new().await;
        let debounced = ["--group", "g", "--debounce-key", "k", "--debounce", "1ms"];
        let mut first = producers_with(&t, r#"{"n":1}"#, &debounced)
            .into_iter()
            .nth(i);
        published(first.as_mut().unwrap());
        let mut second = producers_with(&t, r#"{"n":2}"#, &["--group", "g"])
            .into_iter()
            .nth(i);
        published(second.as_mut().unwrap());
        let lane = t.children("tasks").await;
        assert_eq!(lane.len(), 2, "{language}: the place and the second task");
        let place = t.read_json(&format!("tasks/{}", lane[0])).await;
        assert_eq!(
            place["place"]["debounce"]["key"], "k",
            "{language}: {place}"
        );
        // Due a millisecond after its publish: a run judging a few past it.
        let later = event_bridge::clock::ZkTime::at(t.now().await.now_ms() + 5);
        let recorder = harness::Recorder::default();
        let options = harness::options(10, 2);
        let run = event_bridge::process::run_at(&t.queue, &recorder, &options, &later);
        run.await.unwrap();
        let seen = recorder.seen.lock().unwrap().clone();
        let order: Vec<&Value> = seen
            .iter()
            .map(|task| &task.envelope.payload["n"])
            .collect();
        assert_eq!(order, [1, 2], "{language}");
    }
}

/// Fields whose publish must write more than the task (`after` registers the child with its
/// parents, `batch` counts the member in its batch) are not offered by the Python and Node
/// producers: their libraries refuse them by name, rather than write a task that would run at
/// once, or a member its batch never counted. The HTTP publish and our CLI offer them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_refuse_the_fields_only_our_publish_offers() {
    require_python();
    require_node();
    for field in ["after", "on_parent_dead", "batch"] {
        let python = format!(
            "import sys; from event_bridge import producer\n\
             try:\n    producer.envelope('t', {{}}, {field}='x')\n\
             except ValueError as e:\n    print(e)\n    sys.exit(2)"
        );
        let node = format!(
            "const p = require('event-bridge');\n\
             try {{ p.envelope('t', {{}}, {{ {field}: 'x' }}); }}\n\
             catch (e) {{ console.log(e.message); process.exit(2); }}"
        );
        // Each from the place its package is installed in, outside the source tree.
        let python_program = crate::interop::python();
        for (program, flag, code, dir) in [
            (python_program.as_str(), "-c", python, installed("")),
            ("node", "-e", node, installed("node")),
        ] {
            let output = Command::new(program)
                .args([flag, &code])
                .current_dir(dir)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&output.stdout);
            assert_eq!(output.status.code(), Some(2), "{program} {field}: {said}");
            assert!(
                said.contains(field) && said.contains("HTTP publish"),
                "{program} {field}: {said}"
            );
        }
    }
}

/// A control character in a field a delivery sends as a header (here the group, the
/// idempotency key and the type), and an empty group or type, are refused by every producer,
/// naming the field, and nothing is published; Ruby's check (the installed gem's, which the `zk`
/// producer and the Rails adapter call; Debian cannot run the first against ZooKeeper) is asked
/// directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_refuse_control_characters_and_empty_names() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    let cases: [(&[&str], &str); 4] = [
        (
            &["--group", "a\nb"],
            "'group' holds a control character (U+000A)",
        ),
        (
            &["--idempotency-key", "k\r\nX-Injected: 1"],
            "'idempotency_key' holds",
        ),
        (&["--group", ""], "'group' is empty"),
        (
            &["--concurrency-key", "tenant\u{7f}"],
            "holds a control character (U+007F)",
        ),
    ];
    for (args, problem) in cases {
        for mut producer in producers(&t, args) {
            let output = producer.stdin(Stdio::null()).output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{producer:?}: {stderr}");
            assert!(stderr.contains(problem), "{producer:?}: {stderr}");
        }
    }
    assert!(t.children("tasks").await.is_empty(), "nothing published");
    assert!(t.children("keys").await.is_empty());

    let script = r#"
        require "event_bridge/fields"
        [{ type: "a", group: "x\ny" }, { type: "" }, { "type" => "a", "id" => "i\0d" },
         { type: "a", idempotency_key: "p" * 100_000 + "\n" }].each do |task|
          EventBridge::Fields.check!(task)
          puts "accepted"
        rescue ArgumentError => e
          puts e.message
        end
    "#;
    let output = installed_gem(Command::new("ruby"))
        .args(["-e", script])
        .output()
        .expect("ruby (make tools installs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with("'group' holds a control character (U+000A)"),
        "{stdout}"
    );
    assert!(lines[1].starts_with("'type' is empty"), "{stdout}");
    assert!(
        lines[2].starts_with("'id' holds a control character (U+0000)"),
        "{stdout}"
    );
    assert!(
        lines[3].contains("(100001 bytes)") && lines[3].len() < 300,
        "{stdout}"
    );
}
