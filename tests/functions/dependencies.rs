//! Dependencies over HTTP: a publish's item with `after` waits for its parents, all or
//! nothing with the rest of the body. A child may name an earlier line's id (that parent is
//! made by the same multi-op), waits (`blocked`) until it completed, and then runs; a child
//! naming a parent that is nowhere, or a later line, refuses the whole body (`400`) and
//! nothing is written, as when its writes pass one request (`413`), a parent of the body has
//! children already (the body sent again) or a debounced line is named; a line whose key is
//! taken makes the task that has it the parent; a child of a dead parent goes straight to the
//! dead letters (`buried`). The replies match `docs/openapi.yaml`.

use std::io::Write;
use std::process::{Command, Stdio};

use process_events::App;
use serde_json::{Value, json};

use crate::requests::{VercelServer, url_request};
use harness::{Recorder, TestQueue, workspace_root};

const PATH: &str = "/api/process_events_vercel";

/// The Vercel binary on `tq`'s queue, with a publish secret (`pub`).
async fn server(tq: &TestQueue) -> VercelServer {
    let env = [("CRON_SECRET", "cron"), ("PUBLISH_SECRET", "pub")];
    VercelServer::start("process_events_vercel", &tq.config, &env).await
}

/// `lines` as a body of JSON lines.
fn body(lines: &[Value]) -> String {
    lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `GET` of a status URL a publish answered: the state it reports.
async fn state(server: &VercelServer, status_url: &Value) -> Value {
    let url = status_url.as_str().expect("a status URL");
    let (status, answer) = server.get(url, Some("Bearer pub")).await;
    assert_eq!(status, 200, "{answer}");
    answer["state"].clone()
}

/// Nothing of a refused publish is anywhere: no task, no waiting child, no marker.
async fn nothing_written(tq: &TestQueue) {
    assert!(tq.children("tasks").await.is_empty(), "no task");
    assert!(tq.children("after").await.is_empty(), "no waiting child");
    assert!(tq.children("dependents").await.is_empty(), "no marker");
    assert!(tq.children("dead").await.is_empty(), "no dead letter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_posted_with_its_parent_waits_until_the_parent_completed_then_runs() {
    let tq = TestQueue::new().await;
    let server = server(&tq).await;
    let id = |what: &str| format!("{what}-{}", harness::uuid_like());
    let (parent, child, grandchild) = (id("parent"), id("child"), id("grandchild"));
    // The grandchild names the parent too: its marker is made once in the multi-op.
    let lines = [
        json!({"type": "parent", "payload": 1, "id": parent}),
        json!({"type": "child", "payload": 2, "id": child, "after": parent}),
        json!({"type": "grandchild", "payload": 3, "id": grandchild,
            "after": [parent, child]}),
    ];
    let (status, answer) = server
        .post(PATH, Some("Bearer pub"), body(&lines).as_bytes())
        .await;
    assert_eq!(status, 202, "{answer}\n{}", server.log());
    let published = &answer["published"];
    assert_eq!(published[0]["id"], json!(parent), "{answer}");
    assert!(published[0]["task"].is_string(), "{answer}");
    assert_eq!(
        published[1],
        json!({"published": "blocked", "id": child, "waiting_on": [parent],
            "status_url": format!("{PATH}?status={child}")})
    );
    assert_eq!(published[2]["published"], "blocked", "{answer}");
    assert_eq!(published[2]["waiting_on"], json!([parent, child]));
    assert_eq!(tq.children("tasks").await.len(), 1, "only the parent runs");
    assert_eq!(tq.children("after").await.len(), 2);
    assert_eq!(state(&server, &published[1]["status_url"]).await, "blocked");

    // One task claimable: the parent. Its completion releases the child alone.
    let recorder = Recorder::default();
    let report = harness::run(&tq.queue, &recorder, 1).await;
    assert_eq!(report.completed, 1, "{report:?}");
    let types = |r: &Recorder| -> Vec<String> {
        let seen = r.seen.lock().unwrap();
        seen.iter().map(|t| t.envelope.event_type.clone()).collect()
    };
    assert_eq!(types(&recorder), ["parent"]);
    assert_eq!(state(&server, &published[1]["status_url"]).await, "pending");
    let (_, waiting) = server
        .get(
            published[2]["status_url"].as_str().unwrap(),
            Some("Bearer pub"),
        )
        .await;
    assert_eq!(waiting["state"], "blocked", "{waiting}");
    assert_eq!(waiting["task"]["envelope"]["waiting_on"], json!([child]));
    // And why: the parent it waits for (pending: its marker says nothing yet, and it waits for
    // no parent of its own, so the answer gives no state; no look pages through the queue).
    let parents = &waiting["why"]["reasons"][0];
    assert_eq!(parents["reason"], "parents", "{waiting}");
    assert_eq!(parents["waiting_on"], json!([{ "id": child }]));

    // The child runs, and after it the grandchild.
    harness::run(&tq.queue, &recorder, 10).await;
    assert_eq!(types(&recorder), ["parent", "child", "grandchild"]);
    let seen = recorder.seen.lock().unwrap().clone();
    assert_eq!(seen[1].envelope.id, child);
    assert_eq!(seen[1].envelope.after, std::slice::from_ref(&parent));
    assert_eq!(seen[2].envelope.after, [parent, child]);
    assert!(tq.children("after").await.is_empty());
    assert!(tq.children("dependents").await.is_empty());
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_naming_a_parent_that_is_nowhere_refuses_the_whole_body() {
    let tq = TestQueue::new().await;
    let server = server(&tq).await;
    let nowhere = format!("nowhere-{}", harness::uuid_like());
    let lines = [
        json!({"type": "parent", "payload": 1, "id": "p-1"}),
        json!({"type": "child", "payload": 2, "after": ["p-1", nowhere]}),
    ];
    let (status, answer) = server
        .post(PATH, Some("Bearer pub"), body(&lines).as_bytes())
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "BadRequest");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("parent {nowhere}: no such task")),
        "{message}"
    );
    // The parent line, fine on its own, was not published either: all or nothing.
    nothing_written(&tq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_naming_a_later_line_refuses_the_whole_body() {
    let tq = TestQueue::new().await;
    let server = server(&tq).await;
    let lines = [
        json!({"type": "plain", "payload": 0}),
        json!({"type": "child", "payload": 1, "after": "later"}),
        json!({"type": "parent", "payload": 2, "id": "later"}),
    ];
    let (status, answer) = server
        .post(PATH, Some("Bearer pub"), body(&lines).as_bytes())
        .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with("line 2: \"after\" names later, the id of item 3"),
        "{message}"
    );
    nothing_written(&tq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_whose_writes_pass_one_zookeeper_request_are_refused_before_anything_is_written() {
    let tq = TestQueue::new().await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    // Small lines, but each child writes an entry under each of its 16 parents' markers.
    let parents: Vec<String> = (0..16).map(|n| format!("p-{n}")).collect();
    let mut lines: Vec<Value> = (parents.iter())
        .map(|id| json!({"type": "p", "payload": 0, "id": id}))
        .collect();
    lines.extend((0..900).map(|n| json!({"type": "c", "payload": n, "after": parents})));
    let (status, _, answer) = url_request(&app, "POST", "", &body(&lines)).await;
    assert_eq!(status, 413, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("over the 1048575"), "{message}");
    nothing_written(&tq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_again_is_refused_and_a_taken_keys_task_is_the_parent() {
    let tq = TestQueue::new().await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let post = async |lines: &[Value]| {
        let (status, _, answer) = url_request(&app, "POST", "", &body(lines)).await;
        (status, answer)
    };
    // The child has no id of its own: each send makes a fresh one.
    let lines = [
        json!({"type": "p", "payload": 1, "id": "p-1"}),
        json!({"type": "c", "payload": 2, "after": "p-1"}),
    ];
    let (status, first) = post(&lines).await;
    assert_eq!(status, 202, "{first}");
    let child = first["published"][1]["id"].as_str().unwrap().to_string();

    // Sent again (after a 503, say): the parent's marker is there already, so nothing is
    // written, not even the parent line's task.
    let (status, again) = post(&lines).await;
    assert_eq!(status, 400, "{again}");
    let message = again["message"].as_str().unwrap();
    assert!(
        message.starts_with("parent p-1: another task with this id"),
        "{message}"
    );
    assert_eq!(tq.children("tasks").await.len(), 1);
    assert_eq!(tq.children("after").await, std::slice::from_ref(&child));

    // A line whose key is taken makes no task: its child waits for the task that has it.
    let keyed = |id: &str| json!({"type": "k", "payload": 3, "id": id, "idempotency_key": "k"});
    let (status, answer) = post(&[keyed("k-1")]).await;
    assert_eq!(status, 202, "{answer}");
    let lines = [
        keyed("k-2"),
        json!({"type": "c", "payload": 4, "id": "c-2", "after": "k-2"}),
    ];
    let (status, answer) = post(&lines).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["published"][0]["duplicate"], true, "{answer}");
    assert_eq!(
        answer["published"][1]["waiting_on"],
        json!(["k-1"]),
        "{answer}"
    );
    // A child's id that waits already refuses the body, naming its line.
    let lines = [
        keyed("k-3"),
        json!({"type": "c", "payload": 5, "id": child, "after": "k-3"}),
    ];
    let (status, answer) = post(&lines).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["message"].as_str().unwrap();
    let refused = format!("line 2: a task with id {child} already waits for its parents");
    assert_eq!(message, refused);

    // A debounced line is no task to wait for.
    let lines = [
        json!({"type": "p", "payload": 6, "id": "p-6", "debounce_key": "d", "debounce": "1m"}),
        json!({"type": "c", "payload": 7, "after": "p-6"}),
    ];
    let (status, refused) = post(&lines).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("a debounced publish is not a task"),
        "{message}"
    );
    assert!(tq.children("debounce").await.is_empty());
    assert_eq!(tq.children("tasks").await.len(), 2, "p-1 and k-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_url_replies_for_children_match_the_openapi_spec() {
    let tq = TestQueue::new().await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let mut samples = Vec::new();
    let mut post = async |label: &str, want: u16, lines: &[Value]| {
        let (status, headers, answer) = url_request(&app, "POST", "", &body(lines)).await;
        assert_eq!(status, want, "{label}: {answer}");
        samples.push(
            json!({"label": label, "path": "/", "method": "post", "status": status,
            "content_type": headers["content-type"], "body": answer}),
        );
        answer
    };

    // A parent that died: a child failing with it is buried, one that runs anyway is queued.
    let dead = tq.publish(1).await.remove(0);
    event_bridge::cancel::cancel(&tq.queue, &dead)
        .await
        .expect("cancel");
    // Its grandchild in the same body dies with it, the child named as its parent.
    let chain = [
        json!({"type": "c", "payload": 1, "id": "c-1", "after": dead}),
        json!({"type": "g", "payload": 1, "after": "c-1"}),
    ];
    let chain = post("buried", 202, &chain).await;
    let buried = &chain["published"][0];
    assert_eq!(buried["published"], "buried", "{buried}");
    assert_eq!(buried["dead_letter"], "after-c-1");
    assert!(
        buried["reason"].as_str().unwrap().contains(&dead),
        "{buried}"
    );
    let grandchild = &chain["published"][1];
    assert_eq!(grandchild["published"], "buried", "{grandchild}");
    let reason = grandchild["reason"].as_str().unwrap();
    assert!(reason.starts_with("parent after-c-1 (id c-1)"), "{reason}");
    let anyway = json!({"type": "c", "payload": 2, "after": dead, "on_parent_dead": "run"});
    let anyway = post("run anyway", 202, &[anyway]).await;
    assert!(anyway["published"][0]["task"].is_string(), "{anyway}");
    let blocked = [
        json!({"type": "p", "payload": 3, "id": "p-3"}),
        json!({"type": "c", "payload": 4, "after": "p-3"}),
    ];
    let blocked = post("blocked", 202, &blocked).await;
    assert_eq!(blocked["published"][1]["published"], "blocked");
    post(
        "unknown parent",
        400,
        &[json!({"type": "c", "payload": 5, "after": "nope"})],
    )
    .await;

    // Their status URLs: blocked, and dead.
    for (label, answer, want) in [("status: blocked", &blocked["published"][1], "blocked")]
        .into_iter()
        .chain([("status: buried", buried, "dead")])
    {
        let url = answer["status_url"].as_str().unwrap();
        let query = url.strip_prefix("/?").expect("a URL of this path");
        let (status, headers, answer) = url_request(&app, "GET", query, "").await;
        assert_eq!((status, &answer["state"]), (200, &json!(want)), "{answer}");
        samples.push(
            json!({"label": label, "path": "/", "method": "get", "status": status,
            "content_type": headers["content-type"], "body": answer}),
        );
    }
    for (label, problems) in spec_problems(&samples) {
        assert!(problems.is_empty(), "{label}: {problems:#?}");
    }
}

/// Each sample's problems against `docs/openapi.yaml`, as `openapi_check.py` finds them.
fn spec_problems(samples: &[Value]) -> Vec<(String, Vec<Value>)> {
    let root = workspace_root();
    let mut child = Command::new("python3")
        .arg(root.join("tests/functions/openapi_check.py"))
        .arg(root.join("docs/openapi.yaml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with openapi-schema-validator (`make tools`)");
    let input = serde_json::to_vec(samples).expect("samples");
    child.stdin.take().unwrap().write_all(&input).expect("send");
    let output = child.wait_with_output().expect("the check's answer");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let results: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(results.len(), samples.len());
    (results.iter())
        .map(|r| {
            let problems = r["problems"].as_array().cloned().unwrap_or_default();
            (r["label"].to_string(), problems)
        })
        .collect()
}
