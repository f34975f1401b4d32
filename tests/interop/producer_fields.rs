//! Fields the Python and Node producers check before they write: a concurrency key is
//! written as given, and one no gate can be named after is refused; a priority puts the task
//! in its lane, and a word that names none is refused. Either refusal names the field and
//! publishes nothing.

use std::process::{Command, Stdio};

use harness::TestQueue;

use crate::interop::{node_producer, python_producer, require_node, require_python, run_producer};

/// Each producer's command, pointed at the test's chroot, with `args` after.
fn producers(t: &TestQueue, args: &[&str]) -> [Command; 2] {
    [python_producer(), node_producer()].map(|mut c| {
        c.args(["--zookeeper", &t.config.zookeeper, "--root", &t.config.root])
            .args(["--type", "tenant.call", "--payload", "{}"])
            .args(args);
        c
    })
}

#[tokio::test]
async fn producers_write_a_concurrency_key_and_refuse_one_that_names_no_gate() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    for mut producer in producers(&t, &["--concurrency-key", "tenant-9"]) {
        let published = run_producer(&mut producer);
        let (task, _) = &published[0];
        let body = t.read_json(&format!("tasks/{task}")).await;
        assert_eq!(body["concurrency_key"], "tenant-9", "{producer:?}");
    }
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
        t.children("tasks").await.len(),
        2,
        "nothing more was published"
    );
}

#[tokio::test]
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
