//! `docs/openapi.yaml` against the code: the document is valid OpenAPI 3.1 (PyPI's
//! openapi-spec-validator), and real replies of both HTTP entries (the Lambda handler given
//! Function URL events, the Vercel binary as a local HTTP server) match the schema it names for
//! their path, method and status, and the headers it documents (`openapi_check.py`:
//! openapi-schema-validator's OAS 3.1 validator). The replies of each entry are every answer
//! the spec documents for it: each status of each operation (the Function URL's 403, which AWS
//! answers, aside), each kind of publish result, each state a status reports; an answer
//! documented and met by no test fails. Wrong replies made from the real ones must fail the
//! same check.
//! Needs: python3 with openapi-spec-validator (`make tools`), ZooKeeper, the binaries.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use event_bridge::config::RouteSource;
use event_bridge::handler::FnHandler;
use event_bridge::queue::TaskOutcome;
use event_bridge::{Config, Task};
use harness::{Proxy, TestQueue, workspace_root};
use lambda_runtime::{Context, LambdaEvent};
use process_events::App;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The Lambda Function URL's path in the spec, and the Vercel function's.
const LAMBDA: &str = "/";
const VERCEL: &str = "/api/process_events_vercel";

#[test]
fn the_openapi_spec_is_valid_and_a_broken_copy_is_not() {
    let checked = spec_validator(&spec());
    assert!(checked.status.success(), "{}", output_text(&checked));

    // The same document without a response's required description, beside the schema it
    // refers to: the validator must refuse it, naming what is missing.
    let dir = std::env::temp_dir().join(format!("openapi-{}", harness::uuid_like()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let schema = workspace_root().join("docs/envelope.schema.json");
    std::fs::copy(&schema, dir.join("envelope.schema.json")).expect("copy the schema");
    let text = std::fs::read_to_string(spec()).expect("read the spec");
    let described = "    Ran:\n      description: The run's report.\n";
    assert!(text.contains(described), "the spec's Ran response moved");
    let broken = dir.join("openapi.yaml");
    std::fs::write(&broken, text.replace(described, "    Ran:\n")).expect("write");
    let refused = spec_validator(&broken);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!refused.status.success(), "{}", output_text(&refused));
    assert!(
        output_text(&refused).contains("'description' is a required property"),
        "{}",
        output_text(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_url_replies_match_the_openapi_spec() {
    let hook = answering(RECEIPT).await;
    let tq = TestQueue::with(|c| {
        c.publish_max_bytes = PUBLISH_MAX_BYTES;
        c.keep_done = Some(Duration::from_secs(3_600));
        c.routes = Some(RouteSource {
            variable: "ROUTES",
            origin: "<inline JSON>".into(),
            text: json!({"default": {"sink": "http", "url": hook}}).to_string(),
        });
    })
    .await;
    // Through a link the test cuts at the end, for the 503s.
    let proxy = Proxy::start().await;
    let app = App::open(through(&proxy, &tq.config), "test")
        .await
        .expect("app");
    let mut s = Scenario::new(Entry::Url(&app));

    common(&mut s, &tq).await;
    // A body the Function URL sent in base64 that does not decode.
    let reply = url_send(&app, "POST", "", json!("not base64!"), true).await;
    let refused = s.record("POST", 400, "400: base64 that does not decode", reply);
    assert!(
        refused["message"].as_str().unwrap().contains("base64"),
        "{refused}"
    );
    failures(&mut s, &tq, &proxy).await;

    let replies = s.replies;
    let wrong = wrong_replies(&replies);
    replies.check(LAMBDA);
    wrong.check_refused();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vercel_replies_match_the_openapi_spec() {
    let tq = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let routes = json!({"default": {"sink": "http", "url": answering(RECEIPT).await}});
    let routes = routes.to_string();
    let limit = PUBLISH_MAX_BYTES.to_string();
    let env = [
        ("CRON_SECRET", "cron"),
        ("PUBLISH_SECRET", "pub"),
        ("PUBLISH_MAX_BYTES", limit.as_str()),
        ("KEEP_DONE", "1h"),
        ("ROUTES", routes.as_str()),
        ("ZOOKEEPER_CONNECT_TIMEOUT_MS", "1000"),
        ("ZOOKEEPER_SESSION_TIMEOUT_MS", "4000"),
    ];
    let server = Vercel::start(&through(&proxy, &tq.config), &env).await;
    let mut s = Scenario::new(Entry::Vercel(&server));

    // The secret comes before the body: without the right one, 401 whatever was sent.
    let task = r#"{"type": "order.paid", "payload": {"n": 1}}"#;
    let large = json!({"type": "a", "payload": "x".repeat(PUBLISH_MAX_BYTES)}).to_string();
    let wrong = Some("Bearer wrong");
    let refused = [
        ("POST", "", None, task, "a publish without a bearer"),
        ("POST", "", None, &large, "a large body without a bearer"),
        ("POST", "", CRON, task, "a publish with the cron secret"),
        ("POST", "drain=1", PUBLISHER, "", "a run, publish secret"),
        ("GET", "drain=1", wrong, "", "a run with a wrong bearer"),
        ("GET", "status=task-0", CRON, "", "a status, cron secret"),
        ("GET", "batch=b", None, "", "a batch without a bearer"),
    ];
    for (method, query, authorization, body, what) in refused {
        let label = format!("401: {what}");
        let refused = s.ask(method, query, authorization, body, 401, &label).await;
        assert_eq!(refused["error"], "Unauthorized", "{label}: {refused}");
    }
    // Secrets not set: every request is refused, saying which.
    let unset = Vercel::start(&tq.config, &[]).await;
    let mut bare = Scenario::new(Entry::Vercel(&unset));
    let not_set = [
        ("GET", CRON, "", "CRON_SECRET"),
        ("POST", PUBLISHER, task, "PUBLISH_SECRET"),
    ];
    for (method, authorization, body, secret) in not_set {
        let label = format!("401: {secret} not set");
        let refused = bare.ask(method, "", authorization, body, 401, &label).await;
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{secret} is not set")),
            "{refused}"
        );
    }
    s.replies.0.extend(bare.replies.0);

    common(&mut s, &tq).await;
    failures(&mut s, &tq, &proxy).await;

    let replies = s.replies;
    replies.check(VERCEL);
    replies.without_head_fails(VERCEL);
}

/// What both entries answer alike: every kind of publish result, every state a status reports,
/// a batch's counts and its absence, 400s and 413s of each kind (which write nothing), the
/// 405s of every other method, runs. The link to ZooKeeper stays up.
async fn common(s: &mut Scenario<'_>, tq: &TestQueue) {
    open_batch(tq, "import-7").await;
    open_batch(tq, "sealed-7").await;
    event_bridge::batch::seal(&tq.queue, "sealed-7")
        .await
        .expect("seal");

    // Published: created (one a batch's member), a duplicate, debounced (and replacing), a
    // child blocked on its parent, a child buried with its dead parent, delayed.
    let lines = [
        json!({"type": "order.paid", "payload": {"order": 7}, "idempotency_key": "order-7"}),
        json!({"type": "alert.page", "payload": {}, "priority": "high", "id": "page-1",
            "group": "g", "on_dead": "pause", "concurrency_key": "tenant-1",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        json!({"type": "report.export", "payload": null, "priority": "low"}),
        json!({"type": "import.row", "payload": {"row": 1}, "batch": "import-7"}),
    ];
    let created = s.publish(jsonl(&lines), 202, "tasks created").await;
    let task = created["published"][0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    let first = lines[0].to_string();
    let duplicate = s.publish(&first, 202, "a duplicate key").await;
    assert_eq!(duplicate["published"][0]["duplicate"], true, "{duplicate}");
    let debounced = json!({"type": "a", "payload": 1, "debounce_key": "doc-1", "debounce": "30s",
        "debounce_max": "5m"});
    let debounced = debounced.to_string();
    let first_debounced = s.publish(&debounced, 202, "debounced").await;
    let replacing = s.publish(&debounced, 202, "debounced, replacing").await;
    assert_eq!(
        replacing["published"][0]["replaced"],
        first_debounced["published"][0]["id"]
    );
    let family = [
        json!({"type": "p", "payload": 1, "id": "p-1"}),
        json!({"type": "c", "payload": 1, "id": "c-1", "after": "p-1"}),
    ];
    let family = s
        .publish(jsonl(&family), 202, "a parent and its child")
        .await;
    assert_eq!(family["published"][1]["published"], "blocked", "{family}");
    let dead = tq.publish(1).await.remove(0);
    event_bridge::cancel::cancel(&tq.queue, &dead)
        .await
        .expect("cancel");
    let orphan = json!({"type": "c", "payload": 2, "after": dead}).to_string();
    let buried = s.publish(&orphan, 202, "buried with its parent").await;
    assert_eq!(buried["published"][0]["published"], "buried", "{buried}");
    let later = r#"{"type": "a", "payload": 3, "delay": "1h"}"#;
    let later = s.publish(later, 202, "delayed").await;

    // Where each is.
    s.status(&format!("status={task}"), "pending").await;
    let by_id = s.ask("GET", "status=page-1", PUBLISHER, "", 200, "status by id");
    assert_eq!(by_id.await["state"], "pending");
    s.status(&s.status_query(&replacing["published"][0]), "debounced")
        .await;
    s.status(&s.status_query(&family["published"][1]), "blocked")
        .await;
    s.status(&s.status_query(&buried["published"][0]), "dead")
        .await;
    // A task held by another consumer whose handler reported progress, carried by an
    // extension: its status shows it.
    let held = tq.publish(1).await.remove(0);
    let now = tq.now().await;
    let TaskOutcome::Claimed(lease) = tq.queue.claim(&held, &now).await.unwrap() else {
        panic!("not claimed")
    };
    let mut lease = *lease;
    let report = lease.task.progress.report(40, "copied 4 of 10 files");
    report.unwrap();
    tq.queue.extend(&mut lease).await.unwrap();
    let leased = s.status(&format!("status={held}"), "leased").await;
    assert_eq!(
        leased["task"]["lease"]["progress"],
        json!({"percent": 40, "message": "copied 4 of 10 files"}),
        "{leased}"
    );
    tq.queue.complete(lease).await.unwrap();
    let not_found = json!({"state": "not_found"});
    let missing = "status=task-0999999999";
    let missing = s.ask("GET", missing, PUBLISHER, "", 404, "status: not found");
    let missing = missing.await;
    assert_eq!(missing["state"], not_found["state"]);
    assert_eq!(
        missing["why"]["reasons"],
        json!([{ "reason": "not_found" }])
    );
    let counts = s.ask("GET", "batch=import-7", PUBLISHER, "", 200, "batch counts");
    let counts = counts.await;
    assert_eq!(
        (&counts["name"], &counts["total"]),
        (&json!("import-7"), &json!(1))
    );
    // An unknown batch: 404 with the body of a task that is nowhere.
    let no_batch = s.ask("GET", "batch=nope", PUBLISHER, "", 404, "batch: not found");
    assert_eq!(no_batch.await, not_found);

    // Refused, before any secret is looked at: a query that says nothing clear.
    for (query, label) in [
        ("status=", "400: status= empty"),
        ("batch=", "400: batch= empty"),
        ("drain=1&max_tasks=0", "400: max_tasks=0"),
        ("max_tasks=many", "400: max_tasks not a number"),
    ] {
        s.ask("GET", query, None, "", 400, label).await;
    }
    let label = "400: max_tasks=0 with a body";
    s.ask("POST", "max_tasks=0", None, &first, 400, label).await;

    // Refused bodies, each kind of 400 and 413: nothing is written.
    let before = nodes(tq).await;
    let item = |extra: Value| {
        let mut item = json!({"type": "a", "payload": 1});
        let fields = extra.as_object().unwrap().clone();
        item.as_object_mut().unwrap().extend(fields);
        item
    };
    let one = |extra: Value| item(extra).to_string();
    let two = |a: Value, b: Value| jsonl(&[item(a), item(b)]);
    let parents: Vec<String> = (0..17).map(|i| format!("p-{i}")).collect();
    let debounced = json!({"debounce_key": "k", "debounce": "1s"});
    let keyed_too = json!({"debounce_key": "k", "debounce": "1s", "idempotency_key": "i"});
    let not_utf8 = b"{\"type\": \"a\", \"payload\": \"\xff\"}";
    let refused = s.publish(not_utf8, 400, "400: not UTF-8").await;
    assert_eq!(
        refused["message"], "the body is not UTF-8: send JSON in UTF-8",
        "{refused}"
    );
    let bad = [
        ("not an object or JSON lines", "[1, 2]".to_string()),
        ("a line not JSON", format!("{first}\nnot json")),
        ("no type", r#"{"payload": 1}"#.to_string()),
        (
            "a field of the wrong kind",
            one(json!({"priority": "urgent"})),
        ),
        ("a bad delay", one(json!({"delay": "soon"}))),
        ("an empty id", one(json!({"id": ""}))),
        ("an id twice", two(json!({"id": "x"}), json!({"id": "x"}))),
        ("a debounce key twice", two(debounced.clone(), debounced)),
        (
            "a key too long",
            one(json!({"idempotency_key": "k".repeat(5_000)})),
        ),
        ("debounce_key with idempotency_key", one(keyed_too)),
        ("after its own id", one(json!({"id": "x", "after": "x"}))),
        (
            "after a later line",
            two(json!({"after": "y"}), json!({"id": "y"})),
        ),
        ("more than 16 parents", one(json!({"after": parents}))),
        (
            "after with batch",
            one(json!({"after": "p-1", "batch": "import-7"})),
        ),
        (
            "on_parent_dead without after",
            one(json!({"on_parent_dead": "run"})),
        ),
        ("an unknown parent", one(json!({"after": "nope"}))),
        ("an unknown batch", one(json!({"batch": "nope"}))),
        ("a sealed batch", one(json!({"batch": "sealed-7"}))),
    ];
    for (kind, body) in bad {
        let label = format!("400: {kind}");
        let refused = s.publish(body, 400, &label).await;
        assert_eq!(refused["error"], "BadRequest", "{label}: {refused}");
    }
    let many = vec![r#"{"type": "a", "payload": 1}"#; 1_001].join("\n");
    // Bodies within PUBLISH_MAX_BYTES whose tasks are not: a number written short is written
    // long in the envelope (`1e15` is `1000000000000000.0` once read), 4.5 times as long.
    let long = |numbers: usize| {
        let payload = vec!["1e15"; numbers].join(",");
        format!(r#"{{"type": "a", "payload": [{payload}]}}"#)
    };
    let too_large = [
        (
            "over PUBLISH_MAX_BYTES",
            one(json!({"payload": "x".repeat(PUBLISH_MAX_BYTES)})),
        ),
        ("over 1000 tasks", many),
        ("a task over the znode limit", long(60_000)),
        (
            "over one ZooKeeper request",
            [long(30_000), long(30_000)].join("\n"),
        ),
    ];
    for (kind, body) in too_large {
        let label = format!("413: {kind}");
        let refused = s.publish(body, 413, &label).await;
        assert_eq!(refused["error"], "PayloadTooLarge", "{label}: {refused}");
    }
    assert_eq!(nodes(tq).await, before, "a refused publish wrote something");

    // Every method but GET and POST, before any secret: 405, and nothing runs.
    for method in ["HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let label = format!("405: {method}");
        s.ask(method, "drain=1", CRON, "", 405, &label).await;
    }
    assert_eq!(nodes(tq).await, before, "a refused method ran something");

    // Runs, then what they did.
    let drained = s
        .ask("POST", "drain=1", CRON, "", 200, "a drain's report")
        .await;
    assert!(drained["completed"].as_u64() > Some(0), "{drained}");
    let completed = s.status(&format!("status={task}"), "completed").await;
    assert_eq!(
        completed["record"]["result"],
        serde_json::from_str::<Value>(RECEIPT).unwrap(),
        "the webhook's answer, as the result: {completed}"
    );
    let again = s
        .publish(&first, 202, "a duplicate of a completed task")
        .await;
    assert_eq!(again["published"][0]["state"], "completed", "{again}");
    // The delayed task, met by the drain before its time, waits under `delayed/`.
    s.status(&s.status_query(&later["published"][0]), "waiting")
        .await;
    s.ask("GET", "", CRON, "", 200, "a GET's run").await;
    s.ask("POST", "", CRON, "", 200, "a POST's run without a body")
        .await;
    resumable(s, tq).await;
}

/// Resumable tasks: one asleep, one waiting for a signal (run by a handler of our own); then
/// signals over HTTP: one a task takes, one kept, one malformed.
async fn resumable(s: &mut Scenario<'_>, tq: &TestQueue) {
    let (nap, approval) = (
        event_bridge::Envelope::new("nap", json!({})),
        event_bridge::Envelope::new("approval", json!({})),
    );
    let ids = (nap.id.clone(), approval.id.clone());
    tq.queue.publish_many(&[nap, approval]).await.unwrap();
    let hour = Duration::from_secs(3600);
    let handler = FnHandler(|task: Task| async move {
        match task.envelope.event_type.as_str() {
            "nap" => task.steps.sleep(hour).await,
            "approval" => task.steps.wait_for(&["order-9"], hour).await.map(|_| ()),
            _ => Ok(()),
        }
    });
    let options = harness::options(10, 1);
    let ran = event_bridge::process::run(&tq.queue, &handler, &options).await;
    assert_eq!(ran.unwrap().suspended, 2);
    s.status(&format!("status={}", ids.0), "sleeping").await;
    s.status(&format!("status={}", ids.1), "awaiting_signal")
        .await;
    let signal = json!({"signal": "order-9", "payload": {"ok": true}}).to_string();
    let delivered = s.publish(&signal, 202, "a signal a task takes").await;
    assert!(delivered["delivered"]["task"].is_string(), "{delivered}");
    let signal = json!({"signal": "order-9"}).to_string();
    let kept = s.publish(&signal, 202, "a signal kept").await;
    assert_eq!(kept["kept"], true, "{kept}");
    let malformed = json!({"signal": 9}).to_string();
    let refused = s.publish(&malformed, 400, "400: a malformed signal").await;
    assert_eq!(refused["error"], "BadRequest", "{refused}");
}

/// The failures: a batch whose znode is not a batch (500), then ZooKeeper cut off (503).
async fn failures(s: &mut Scenario<'_>, tq: &TestQueue, proxy: &Proxy) {
    open_batch(tq, "broken").await;
    let path = format!("{}/batches/broken", tq.config.root);
    tq.raw.set_data(&path, b"not a batch", None).await.unwrap();
    let label = "500: an unreadable batch";
    let failed = s
        .ask("GET", "batch=broken", PUBLISHER, "", 500, label)
        .await;
    assert_eq!(failed["error"], "EventBridgeError", "{failed}");
    let member = json!({"type": "a", "payload": 1, "batch": "broken"}).to_string();
    let failed = s.publish(&member, 500, "500: a member of an unreadable batch");
    let failed = failed.await;
    assert_eq!(failed["error"], "EventBridgeError", "{failed}");

    // Cut off at once: the next bytes the entry sends ZooKeeper drop its link instead, and no
    // new link is let through.
    proxy.lose_next_request();
    proxy.set_cut(true);
    let label = "503: a status, ZooKeeper cut off";
    s.ask("GET", "status=task-0", PUBLISHER, "", 503, label)
        .await;
    let label = "503: a publish, ZooKeeper cut off";
    s.publish(&member, 503, label).await;
}

/// Replies a wrong spec or a wrong body must not pass: made from the real ones, each broken
/// in one way the spec forbids.
fn wrong_replies(real: &Replies) -> Replies {
    let mut wrong = Replies::default();
    let mut break_one = |label: &str, method: &str, change: &dyn Fn(&mut Reply)| {
        let mut reply = real.find(label).clone();
        change(&mut reply);
        let label = format!("wrong {}: {label}", wrong.0.len() + 1);
        wrong.expect(LAMBDA, method, reply.status, &label, &reply);
    };
    break_one("tasks created", "post", &|r| {
        let item = r.body["published"][0].as_object_mut().unwrap();
        item.remove("status_url");
    });
    break_one("a duplicate key", "post", &|r| {
        r.body["published"][0]["state"] = json!("frozen")
    });
    break_one("debounced", "post", &|r| {
        let item = r.body["published"][0].as_object_mut().unwrap();
        item.remove("replaced");
    });
    break_one("a parent and its child", "post", &|r| {
        r.body["published"][1]["waiting_on"] = json!([])
    });
    break_one("buried with its parent", "post", &|r| {
        r.body["published"][0]["published"] = json!("interred")
    });
    break_one("a drain's report", "post", &|r| {
        r.body["claimed"] = json!(-1)
    });
    break_one("a drain's report", "post", &|r| {
        r.body["surprise"] = json!(1)
    });
    break_one("status: pending", "get", &|r| {
        r.body["state"] = json!("lost")
    });
    break_one("status: pending", "get", &|r| {
        r.body["task"]["envelope"]["time"] = json!("yesterday")
    });
    break_one("status: debounced", "get", &|r| {
        r.body.as_object_mut().unwrap().remove("due_at_ms");
    });
    break_one("status: leased", "get", &|r| {
        r.body["task"]["lease"]["progress"]["percent"] = json!(101)
    });
    break_one("status: completed", "get", &|r| {
        r.body["record"]["result_omitted"] = json!({"bytes": 70000})
    });
    break_one("status: not found", "get", &|r| {
        r.body["state"] = json!("pending")
    });
    // The answer an unknown batch had before: not what the spec says a 404 is.
    break_one("batch: not found", "get", &|r| {
        r.body = json!({"batch": "nope", "error": "batch nope: no such batch"})
    });
    break_one("batch counts", "get", &|r| {
        r.body.as_object_mut().unwrap().remove("sealed");
    });
    break_one("400: a line not JSON", "post", &|r| {
        r.body.as_object_mut().unwrap().remove("message");
    });
    break_one("413: over 1000 tasks", "post", &|r| {
        r.body["error"] = json!("BadRequest")
    });
    break_one("500: an unreadable batch", "get", &|r| {
        r.body["error"] = json!("Oops")
    });
    break_one("503: a status, ZooKeeper cut off", "get", &|r| {
        r.body["error"] = json!("EventBridgeError")
    });
    // A 405 without its Allow header, or with another.
    break_one("405: HEAD", "head", &|r| {
        r.headers.as_object_mut().unwrap().remove("allow");
    });
    break_one("405: DELETE", "delete", &|r| {
        r.headers["allow"] = json!("GET")
    });
    // A GET without a body; statuses and methods the spec does not give the function.
    break_one("status: pending", "get", &|r| r.body = Value::Null);
    break_one("a drain's report", "post", &|r| r.status = 403);
    break_one("400: a line not JSON", "post", &|r| r.status = 503);
    break_one("400: a line not JSON", "post", &|r| r.status = 418);
    break_one("tasks created", "post", &|r| r.status = 200);
    break_one("405: PUT", "trace", &|_| {});
    wrong
}

// ---- The scenario's requests ----

/// Vercel's bearers (the Function URL reads none: AWS checked the signature before).
const PUBLISHER: Option<&str> = Some("Bearer pub");
const CRON: Option<&str> = Some("Bearer cron");

/// The largest body either entry takes here.
const PUBLISH_MAX_BYTES: usize = 400_000;

/// Requests to one entry, and the replies kept for the check.
struct Scenario<'a> {
    entry: Entry<'a>,
    replies: Replies,
}

impl<'a> Scenario<'a> {
    fn new(entry: Entry<'a>) -> Self {
        Scenario {
            entry,
            replies: Replies::default(),
        }
    }

    /// `method ?query` with `body` (and on Vercel `authorization`): it must answer `status`.
    /// The reply is kept for the check under `label`; its body.
    async fn ask(
        &mut self,
        method: &str,
        query: &str,
        authorization: Option<&str>,
        body: impl AsRef<[u8]>,
        status: u16,
        label: &str,
    ) -> Value {
        let reply = (self.entry)
            .send(method, query, authorization, body.as_ref())
            .await;
        self.record(method, status, label, reply)
    }

    /// Keeps `reply` to a `method` request, which must have `status`; its body.
    fn record(&mut self, method: &str, status: u16, label: &str, reply: Reply) -> Value {
        let method = method.to_ascii_lowercase();
        (self.replies).expect(self.entry.path(), &method, status, label, &reply);
        reply.body
    }

    /// A publish of `body`, with the publish secret.
    async fn publish(&mut self, body: impl AsRef<[u8]>, status: u16, label: &str) -> Value {
        self.ask("POST", "", PUBLISHER, body, status, label).await
    }

    /// `GET ?query` answered 200 with `state`, kept as "status: <state>".
    async fn status(&mut self, query: &str, state: &str) -> Value {
        let label = format!("status: {state}");
        let answer = self.ask("GET", query, PUBLISHER, "", 200, &label).await;
        assert_eq!(answer["state"], state, "{answer}");
        answer
    }

    /// The query of a published item's `status_url`, which must name this entry's path.
    fn status_query(&self, published: &Value) -> String {
        let url = published["status_url"].as_str().expect("a status URL");
        let prefix = format!("{}?", self.entry.path());
        let query = url.strip_prefix(&prefix);
        query
            .unwrap_or_else(|| panic!("{url}: not a URL of this path"))
            .to_string()
    }
}

/// Opens batch `name` on the test's queue.
async fn open_batch(tq: &TestQueue, name: &str) {
    let open = event_bridge::batch::Open {
        on_complete: "import.done".into(),
        ..Default::default()
    };
    (event_bridge::batch::open(&tq.queue, name, open).await).expect("open the batch");
}

/// JSON lines of `items`.
fn jsonl(items: &[Value]) -> String {
    let lines: Vec<String> = items.iter().map(Value::to_string).collect();
    lines.join("\n")
}

/// Every znode under the test's root, by path (their data aside).
async fn nodes(tq: &TestQueue) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut next = vec![tq.config.root.clone()];
    while let Some(path) = next.pop() {
        for child in tq.raw.list_children(&path).await.expect("list") {
            let child = format!("{path}/{child}");
            next.push(child.clone());
            found.insert(child);
        }
    }
    found
}

/// `config` with its ZooKeeper reached through `proxy` (the same chroot).
fn through(proxy: &Proxy, config: &Config) -> Config {
    let (_, chroot) = config.zookeeper.split_once('/').expect("a chroot");
    let mut config = config.clone();
    config.zookeeper = format!("{}/{chroot}", proxy.address);
    // A cut link is told soon.
    config.connect_timeout = Duration::from_millis(1_000);
    config.session_timeout = Duration::from_millis(4_000);
    config
}

// ---- Replies and the check ----

/// One HTTP reply: its status, content type, headers (names in lower case) and JSON body
/// (null when it has none: a reply to `HEAD` over HTTP).
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    content_type: String,
    headers: Value,
    body: Value,
}

/// Replies collected for the check: each one's label, and the sample `openapi_check.py`
/// reads (path, method, status, content type, headers, body).
#[derive(Default)]
struct Replies(Vec<(String, Value, Reply)>);

/// One reply as `openapi_check.py` judged it.
struct Checked {
    label: String,
    problems: Vec<Value>,
    /// The oneOf branches its body met, as `<site>:<branch>`.
    variants: Vec<String>,
}

impl Replies {
    /// Keeps `reply`, after checking it has the status the scenario expects.
    fn expect(&mut self, path: &str, method: &str, status: u16, label: &str, reply: &Reply) {
        assert_eq!(reply.status, status, "{label}: {}", reply.body);
        assert!(
            self.0.iter().all(|(l, _, _)| l != label),
            "two replies labelled {label:?}"
        );
        let sample = json!({
            "label": label, "path": path, "method": method, "status": reply.status,
            "content_type": reply.content_type, "headers": reply.headers, "body": reply.body,
        });
        self.0.push((label.to_string(), sample, reply.clone()));
    }

    fn find(&self, label: &str) -> &Reply {
        let found = self.0.iter().find(|(l, _, _)| l == label);
        &found.unwrap_or_else(|| panic!("no reply {label:?}")).2
    }

    /// Every reply matches the spec, and together they are every answer the spec documents
    /// for `path`: each status of each operation (but those AWS answers, which no reply may
    /// be), and each branch of the oneOfs in [`VARIANTS`].
    fn check(&self, path: &str) {
        let checked = self.checked();
        for c in &checked {
            assert!(c.problems.is_empty(), "{}: {:#?}", c.label, c.problems);
        }
        let documented = documented();
        let missing = self.missing(path, &documented);
        assert!(
            missing.is_empty(),
            "{path}: the spec documents these (method, status), and no test met them: \
             {missing:?}"
        );
        // The responses not the function's are the Function URL's 403: AWS's refusal of an
        // unsigned or unauthorized request, which the URL's IAM authorization makes.
        let aws: Vec<&Value> = documented["responses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["answered_by"].is_null())
            .collect();
        let forbidden = |r: &&Value| r["path"] == LAMBDA && r["status"] == 403;
        assert!(
            aws.iter()
                .all(|r| forbidden(r) && r["answered_by"] == "aws"),
            "only AWS's 403 on the Function URL is not the function's to answer: {aws:?}"
        );
        let template = std::fs::read_to_string(workspace_root().join("template.yaml"));
        let template = template.expect("template.yaml");
        assert!(
            aws.is_empty() || template.contains("AuthType: AWS_IAM"),
            "the spec says AWS refuses unsigned requests (403), but the Function URL's \
             AuthType is not AWS_IAM"
        );
        let met: BTreeSet<&str> = checked
            .iter()
            .flat_map(|c| c.variants.iter().map(String::as_str))
            .collect();
        for site in VARIANTS {
            let branches = documented["variants"][site].as_array();
            let branches = branches.unwrap_or_else(|| panic!("the spec has no oneOf in {site}"));
            let unmet: Vec<&str> = branches
                .iter()
                .filter_map(Value::as_str)
                .filter(|branch| !met.contains(format!("{site}:{branch}").as_str()))
                .collect();
            assert!(
                unmet.is_empty(),
                "{path}: no reply was a {site} of {unmet:?}"
            );
        }
    }

    /// The (method, status) the spec documents for `path` and the function answers, that no
    /// reply kept here has.
    fn missing(&self, path: &str, documented: &Value) -> Vec<(String, u16)> {
        let met: BTreeSet<(&str, u16)> = (self.0.iter())
            .filter(|(_, sample, _)| sample["path"] == path)
            .map(|(_, sample, reply)| (sample["method"].as_str().unwrap(), reply.status))
            .collect();
        let responses = documented["responses"].as_array().expect("responses");
        responses
            .iter()
            .filter(|r| r["path"] == path && r["answered_by"].is_null())
            .map(|r| {
                let method = r["method"].as_str().unwrap();
                (method.to_string(), r["status"].as_u64().unwrap() as u16)
            })
            .filter(|(method, status)| !met.contains(&(method.as_str(), *status)))
            .collect()
    }

    /// The coverage check can fail: without the replies to `HEAD`, exactly that answer is
    /// missing.
    fn without_head_fails(&self, path: &str) {
        let fewer = Replies(
            (self.0.iter())
                .filter(|(_, sample, _)| sample["method"] != "head")
                .cloned()
                .collect(),
        );
        let missing = fewer.missing(path, &documented());
        assert_eq!(missing, [("head".to_string(), 405)]);
    }

    /// Every reply is refused by the spec.
    fn check_refused(&self) {
        for c in self.checked() {
            assert!(!c.problems.is_empty(), "{} passed the check", c.label);
        }
    }

    /// Each reply as `openapi_check.py` judges it.
    fn checked(&self) -> Vec<Checked> {
        let samples: Vec<&Value> = self.0.iter().map(|(_, sample, _)| sample).collect();
        let input = serde_json::to_vec(&samples).expect("samples");
        let results: Vec<Value> =
            serde_json::from_slice(&run_check(&[], &input)).expect("JSON results");
        assert_eq!(results.len(), samples.len());
        let strings = |v: &Value| -> Vec<Value> { v.as_array().cloned().unwrap_or_default() };
        results
            .into_iter()
            .map(|r| Checked {
                label: r["label"].as_str().unwrap_or_default().to_string(),
                problems: strings(&r["problems"]),
                variants: (strings(&r["variants"]).iter())
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            })
            .collect()
    }
}

/// The oneOfs whose every branch a real reply of each entry must meet: the kinds of answer
/// to a `GET` (a run's report, a task's status, a batch's counts), the states a task's status
/// reports, and the kinds of publish result.
const VARIANTS: [&str; 3] = ["RunOrStatus", "TaskStatus", "PublishAnswer"];

/// What the spec documents (`openapi_check.py --documented`): every response of every
/// operation, and the branches of its oneOfs.
fn documented() -> Value {
    serde_json::from_slice(&run_check(&["--documented"], b"[]")).expect("JSON")
}

/// `openapi_check.py spec args` fed `input`: what it printed.
fn run_check(args: &[&str], input: &[u8]) -> Vec<u8> {
    let script = workspace_root().join("tests/functions/openapi_check.py");
    let mut child = python()
        .arg(script)
        .arg(spec())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child.stdin.take().unwrap().write_all(input).expect("send");
    let output = child.wait_with_output().expect("the check's answer");
    assert!(output.status.success(), "{}", output_text(&output));
    output.stdout
}

fn spec() -> PathBuf {
    workspace_root().join("docs/openapi.yaml")
}

/// `python3`, refusing to start when the validators are missing, saying how to get them.
fn python() -> StdCommand {
    let probe = StdCommand::new("python3")
        .args([
            "-c",
            "import openapi_spec_validator, openapi_schema_validator",
        ])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "these tests need python3 with openapi-spec-validator: run `make tools`"
    );
    StdCommand::new("python3")
}

/// `python3 -m openapi_spec_validator spec`: its exit status and what it printed.
fn spec_validator(spec: &Path) -> std::process::Output {
    python()
        .args(["-m", "openapi_spec_validator"])
        .arg(spec)
        .output()
        .expect("run openapi_spec_validator")
}

fn output_text(output: &std::process::Output) -> String {
    let (out, err) = (&output.stdout, &output.stderr);
    format!(
        "{}{}",
        String::from_utf8_lossy(out),
        String::from_utf8_lossy(err)
    )
}

// ---- A webhook receiver ----

/// What the receiver answers every delivery: the tasks' result.
const RECEIPT: &str = r#"{"receipt": "r-1", "lines": [1, 2]}"#;

/// A webhook receiver on loopback answering every request 200 with `body` as JSON; its URL.
async fn answering(body: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, body));
        }
    });
    url
}

/// Answers the requests of one connection until the client closes it.
async fn answer(stream: TcpStream, body: &str) {
    let mut reader = tokio::io::BufReader::new(stream);
    loop {
        let mut length = 0;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) if line.trim_end().is_empty() => break,
                Ok(_) => {}
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut request = vec![0; length];
        if reader.read_exact(&mut request).await.is_err() {
            return;
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if reader.get_mut().write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

// ---- The two entries ----

/// Where requests go: the Lambda handler given Function URL events, or the Vercel binary.
enum Entry<'a> {
    Url(&'a App),
    Vercel(&'a Vercel),
}

impl Entry<'_> {
    /// The entry's path in the spec.
    fn path(&self) -> &'static str {
        match self {
            Entry::Url(_) => LAMBDA,
            Entry::Vercel(_) => VERCEL,
        }
    }

    /// `method path?query` with `body`; on Vercel with an `Authorization` header, on the
    /// Function URL with none (AWS checked the signature). A body that is not UTF-8 reaches
    /// the Function URL in base64, as AWS sends it.
    async fn send(
        &self,
        method: &str,
        query: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> Reply {
        match self {
            Entry::Url(app) => match std::str::from_utf8(body) {
                Ok("") => url_send(app, method, query, Value::Null, false).await,
                Ok(text) => url_send(app, method, query, json!(text), false).await,
                Err(_) => {
                    use base64::Engine;
                    let encoded = base64::engine::general_purpose::STANDARD.encode(body);
                    url_send(app, method, query, json!(encoded), true).await
                }
            },
            Entry::Vercel(server) => server.send(method, query, authorization, body).await,
        }
    }
}

/// `method /?query` with `body` (in base64 when `base64`), as `events/publish.json` with
/// those changed, given to the Lambda handler.
async fn url_send(app: &App, method: &str, query: &str, body: Value, base64: bool) -> Reply {
    let path = workspace_root().join("events/publish.json");
    let mut event: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("event")).expect("JSON");
    event["requestContext"]["http"]["method"] = json!(method);
    event["rawQueryString"] = json!(query);
    event["body"] = body;
    event["isBase64Encoded"] = json!(base64);
    let event = LambdaEvent::new(event, Context::default());
    let reply = process_events::lambda::handle(app, event)
        .await
        .expect("an HTTP reply");
    let headers: serde_json::Map<String, Value> = (reply["headers"].as_object())
        .expect("headers")
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
        .collect();
    Reply {
        status: reply["statusCode"].as_u64().expect("a status") as u16,
        content_type: headers["content-type"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        headers: Value::Object(headers),
        body: serde_json::from_str(reply["body"].as_str().expect("a body")).expect("JSON"),
    }
}

/// The Vercel binary as a local HTTP server (`VERCEL_DEV_PORT`), killed when dropped.
struct Vercel {
    server: harness::vercel::VercelBinary,
}

impl Vercel {
    async fn start(config: &Config, env: &[(&str, &str)]) -> Self {
        let server =
            harness::vercel::VercelBinary::start("process_events_vercel", config, env).await;
        Vercel { server }
    }

    /// `method VERCEL?query` with an optional `Authorization` header and `body`.
    async fn send(&self, method: &str, query: &str, auth: Option<&str>, body: &[u8]) -> Reply {
        let mut stream = TcpStream::connect(("127.0.0.1", self.server.port))
            .await
            .expect("connect");
        let auth = auth.map(|a| format!("Authorization: {a}\r\n"));
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let head = format!(
            "{method} {VERCEL}{query} HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: {}\r\n\
             Connection: close\r\n\r\n",
            auth.unwrap_or_default(),
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("send");
        stream.write_all(body).await.expect("send");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.expect("read");
        let response = String::from_utf8(response).expect("a UTF-8 response");
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
        let headers: serde_json::Map<String, Value> = (head.lines().skip(1))
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name.trim().to_ascii_lowercase(), json!(value.trim())))
            })
            .collect();
        let content_type = headers.get("content-type").and_then(Value::as_str);
        Reply {
            status: status.unwrap_or_else(|| panic!("{head}")),
            content_type: content_type.unwrap_or_default().to_string(),
            body: match (method, body) {
                ("HEAD", "") => Value::Null,
                _ => serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}")),
            },
            headers: Value::Object(headers),
        }
    }
}
