//! The two functions as their platforms run them: the Lambda handlers called directly, the
//! Lambda binary under `cargo lambda watch`, the Vercel binaries as local HTTP servers, and the
//! session they keep across invocations.

use std::time::Duration;

use event_bridge::Config;
use event_bridge::Session;
use lambda_runtime::{Context, LambdaEvent};
use process_events::App;
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::time::timeout;
use zookeeper_client as zk;

use crate::requests::{VercelServer, event_file, url_request};
use harness::{Proxy, TestQueue, binary};

// ---- Lambda handlers, called directly ----

#[tokio::test]
async fn scheduled_event_claims_max_tasks_per_run() {
    let tq = TestQueue::with(|c| c.max_tasks_per_run = 1).await;
    tq.publish(3).await;
    let app = open_app(&tq).await;

    let event = LambdaEvent::new(event_file("schedule.json"), Context::default());
    let report = process_events::lambda::handle(&app, event)
        .await
        .expect("scheduled run");

    assert_eq!(
        (report["claimed"].as_u64(), report["completed"].as_u64()),
        (Some(1), Some(1)),
        "{report}"
    );
    assert_eq!(report["remaining_depth"], 2, "{report}");
    assert_eq!(tq.children("tasks").await.len(), 2);
}

#[tokio::test]
async fn function_url_event_drains_and_answers_in_http_shape() {
    let tq = TestQueue::new().await;
    tq.publish(3).await;
    let app = open_app(&tq).await;

    let event = LambdaEvent::new(event_file("function-url.json"), Context::default());
    let response = process_events::lambda::handle(&app, event)
        .await
        .expect("drain");

    assert_eq!(response["statusCode"], 200, "{response}");
    assert_eq!(
        response["headers"]["content-type"], "application/json",
        "{response}"
    );
    let body = response["body"]
        .as_str()
        .expect("the body is a JSON string");
    let report: Value = serde_json::from_str(body).expect("body is JSON");
    assert_eq!(report["completed"], 3, "{report}");
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test]
async fn a_bad_event_is_a_bad_event_error_and_claims_nothing() {
    let tq = TestQueue::new().await;
    tq.publish(1).await;
    let app = open_app(&tq).await;

    let event = LambdaEvent::new(json!({ "mode": "flush" }), Context::default());
    let err = process_events::lambda::handle(&app, event)
        .await
        .unwrap_err();

    assert_eq!(err.error_type, "BadEvent");
    assert!(err.error_message.contains("flush"), "{}", err.error_message);
    assert_eq!(tq.children("tasks").await.len(), 1);
}

#[tokio::test]
async fn reap_handler_removes_an_orphan_lease_and_reports() {
    let tq = TestQueue::new().await;
    let orphan = orphan_lease(&tq).await;
    let session = open_session(&tq).await;

    let event = LambdaEvent::new(event_file("schedule.json"), Context::default());
    let report = reap_leases::lambda::handle(&session, event)
        .await
        .expect("reap");

    assert_eq!(report["orphans_removed"], 1, "{report}");
    assert_eq!(
        (report["depth"].as_u64(), report["leased"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
    assert!(!tq.children("leases").await.contains(&orphan));
}

// ---- The session across invocations ----

#[tokio::test]
async fn an_expired_session_is_replaced_before_the_next_run() {
    let tq = TestQueue::new().await;
    // As a sandbox frozen for longer than its session timeout: no link while the session ends.
    let proxy = Proxy::start().await;
    let chroot = tq.config.zookeeper.split_once('/').map(|(_, c)| c).unwrap();
    let mut config = tq.config.clone();
    config.zookeeper = format!("{}/{chroot}", proxy.address);
    // The shortest session the server grants (two ticks).
    config.session_timeout = Duration::from_millis(4_000);
    config.connect_timeout = Duration::from_millis(1_000);
    let app = App::open(config, "test").await.expect("app");
    let old = app.session.queue();
    proxy.set_cut(true);
    expired(&old).await;
    proxy.set_cut(false);
    tq.publish(2).await;

    let event = LambdaEvent::new(event_file("drain.json"), Context::default());
    let report = process_events::lambda::handle(&app, event)
        .await
        .expect("run on a new session");

    assert_eq!(report["completed"], 2, "{report}");
    assert_ne!(app.session.queue().session().id(), old.session().id());
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test]
async fn a_session_error_reconnects_once_and_runs_again() {
    let tq = TestQueue::new().await;
    let session = open_session(&tq).await;
    let first = session.queue().session().id();
    let attempts = std::sync::atomic::AtomicU32::new(0);

    let ran_on = session
        .run(|queue| {
            let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                match attempt {
                    0 => Err(zk_error(zk::Error::SessionExpired)),
                    _ => Ok(queue.session().id()),
                }
            }
        })
        .await
        .expect("second attempt");

    assert_eq!(attempts.into_inner(), 2);
    assert_ne!(ran_on, first);
    assert_eq!(session.queue().session().id(), ran_on);
}

#[tokio::test]
async fn other_errors_are_not_retried() {
    let tq = TestQueue::new().await;
    let session = open_session(&tq).await;
    let first = session.queue().session().id();
    let attempts = std::sync::atomic::AtomicU32::new(0);

    let result: Result<(), _> = session
        .run(|_| {
            attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Err(zk_error(zk::Error::NoAuth)) }
        })
        .await;

    assert_eq!(platform::error_type(&result.unwrap_err()), "ZooKeeperError");
    assert_eq!(attempts.into_inner(), 1);
    assert_eq!(session.queue().session().id(), first);
}

#[tokio::test]
async fn cold_start_names_an_unreachable_address() {
    let address = format!("127.0.0.1:{}", harness::vercel::free_port());
    let mut config = Config::default();
    config.zookeeper = address.clone();
    config.connect_timeout = Duration::from_secs(2);

    let err = App::open(config, "test")
        .await
        .err()
        .expect("no ZooKeeper there");

    assert_eq!(
        platform::lambda::diagnostic(&err).error_type,
        "ZooKeeperUnreachable"
    );
    assert!(err.to_string().contains(&address), "{err}");
}

// ---- The binaries ----

#[tokio::test]
async fn lambda_binary_fails_at_cold_start_naming_the_variable() {
    let bin = binary("process_events");
    let output = Command::new(bin)
        .env("MAX_ATTEMPTS", "0")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .output()
        .await
        .expect("run process_events");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("ConfigError") && stderr.contains("MAX_ATTEMPTS"),
        "{stderr}"
    );
}

#[tokio::test]
async fn vercel_process_events_needs_the_cron_secret_and_drains() {
    let tq = TestQueue::new().await;
    tq.publish(4).await;
    let server = VercelServer::start(
        "process_events_vercel",
        &tq.config,
        &[("CRON_SECRET", "s3cret")],
    )
    .await;
    let path = "/api/process_events_vercel?drain=1";

    let (status, body) = server.get(path, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "Unauthorized");
    let (status, _) = server.get(path, Some("Bearer wrong")).await;
    assert_eq!(status, 401);
    assert_eq!(
        tq.children("tasks").await.len(),
        4,
        "a refused request changed nothing"
    );

    let (status, report) = server.get(path, Some("Bearer s3cret")).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["completed"], 4, "{report}");
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test]
async fn vercel_functions_without_a_secret_refuse_everyone_unless_opened_explicitly() {
    let tq = TestQueue::new().await;
    tq.publish(2).await;
    let path = "/api/process_events_vercel?drain=1";
    let closed = VercelServer::start("process_events_vercel", &tq.config, &[]).await;
    for authorization in [None, Some("Bearer anything")] {
        let (status, body) = closed.get(path, authorization).await;
        assert_eq!(status, 401, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("CRON_SECRET is not set"),
            "{body}"
        );
    }
    assert!(
        closed.log().contains(r#""access":"closed""#),
        "{}",
        closed.log()
    );
    let reaper = VercelServer::start("reap_leases_vercel", &tq.config, &[]).await;
    assert_eq!(reaper.get("/api/reap_leases_vercel", None).await.0, 401);
    assert_eq!(tq.children("tasks").await.len(), 2, "nothing ran");

    let open = [("ALLOW_UNAUTHENTICATED", "1")];
    let open = VercelServer::start("process_events_vercel", &tq.config, &open).await;
    assert!(open.log().contains(r#""access":"open""#), "{}", open.log());
    let (status, report) = open.get(path, None).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["completed"], 2, "{report}");
}

#[tokio::test]
async fn vercel_publishes_over_http_all_or_nothing_and_answers_status() {
    let tq = TestQueue::new().await;
    let env = [
        ("CRON_SECRET", "cron"),
        ("PUBLISH_SECRET", "pub"),
        ("PUBLISH_MAX_BYTES", "2000"),
        ("KEEP_DONE", "1h"),
        ("EVENT_BRIDGE_HANDLER", "noop"),
    ];
    let server = VercelServer::start("process_events_vercel", &tq.config, &env).await;
    let path = "/api/process_events_vercel";
    let two = b"{\"type\": \"order.paid\", \"payload\": {\"n\": 1}, \"idempotency_key\": \"o-1\"}\n{\"type\": \"order.paid\", \"payload\": {\"n\": 2}}\n";
    for refused in [None, Some("Bearer cron")] {
        assert_eq!(server.post(path, refused, two).await.0, 401);
    }
    let (status, body) = server
        .post(
            path,
            Some("Bearer pub"),
            b"{\"type\": \"a\", \"payload\": 1}\nnot json",
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("line 2"),
        "{body}"
    );
    let big = format!("{{\"type\": \"a\", \"payload\": \"{}\"}}", "x".repeat(3000));
    assert_eq!(
        server
            .post(path, Some("Bearer pub"), big.as_bytes())
            .await
            .0,
        413
    );
    assert!(
        tq.children("tasks").await.is_empty(),
        "refused bodies publish nothing"
    );

    let (status, body) = server.post(path, Some("Bearer pub"), two).await;
    assert_eq!(status, 202, "{body}");
    let published = body["published"].as_array().unwrap().clone();
    assert_eq!(published.len(), 2);
    assert_eq!(tq.children("tasks").await.len(), 2);
    let url = published[0]["status_url"].as_str().unwrap().to_string();
    assert_eq!(
        url,
        format!("{path}?status={}", published[0]["task"].as_str().unwrap())
    );
    assert_eq!(
        server.get(&url, None).await.0,
        401,
        "status needs the publish secret"
    );
    let (status, pending) = server.get(&url, Some("Bearer pub")).await;
    assert_eq!(
        (status, pending["state"].clone()),
        (200, json!("pending")),
        "{pending}"
    );
    // And why: nothing holds it back.
    assert_eq!(
        pending["why"]["reasons"],
        json!([{ "reason": "ready" }]),
        "{pending}"
    );

    let (status, report) = server
        .get(&format!("{path}?drain=1"), Some("Bearer cron"))
        .await;
    assert_eq!(
        (status, report["completed"].clone()),
        (200, json!(2)),
        "{report}"
    );
    let (status, done) = server.get(&url, Some("Bearer pub")).await;
    assert_eq!(
        (status, done["state"].clone()),
        (200, json!("completed")),
        "{done}"
    );

    let again =
        b"{\"type\": \"order.paid\", \"payload\": {\"n\": 1}, \"idempotency_key\": \"o-1\"}";
    let (status, body) = server.post(path, Some("Bearer pub"), again).await;
    assert_eq!(status, 202, "{body}");
    let existing = &body["published"][0];
    assert_eq!(
        (
            existing["duplicate"].clone(),
            existing["task"].clone(),
            existing["state"].clone()
        ),
        (
            json!(true),
            published[0]["task"].clone(),
            json!("completed")
        )
    );
    assert!(
        tq.children("tasks").await.is_empty(),
        "the duplicate created nothing"
    );
    let (status, _) = server
        .get(
            &format!("{path}?status=task-0999999999"),
            Some("Bearer pub"),
        )
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_function_url_post_publishes_and_a_status_request_answers() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let mut post = event_file("publish.json");
    let event = LambdaEvent::new(post.clone(), Context::default());
    let reply = process_events::lambda::handle(&app, event)
        .await
        .expect("a reply");
    assert_eq!(reply["statusCode"], 202, "{reply}");
    let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    let task = body["published"][0]["task"].as_str().unwrap().to_string();
    assert_eq!(tq.children("tasks").await, vec![task.clone()]);

    // The same body sent in base64, as a Function URL does for some content types.
    use base64::Engine;
    let raw = post["body"].as_str().unwrap().to_string();
    post["body"] = json!(base64::engine::general_purpose::STANDARD.encode(raw));
    post["isBase64Encoded"] = json!(true);
    let event = LambdaEvent::new(post, Context::default());
    let reply = process_events::lambda::handle(&app, event)
        .await
        .expect("a reply");
    assert_eq!(reply["statusCode"], 202, "{reply}");

    let mut status = event_file("status.json");
    status["rawQueryString"] = json!(format!("status={task}"));
    let event = LambdaEvent::new(status, Context::default());
    let reply = process_events::lambda::handle(&app, event)
        .await
        .expect("a reply");
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body: Value = serde_json::from_str(reply["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["state"], "pending");
}

/// Sends `body` as a Function URL publish: the reply's status and JSON body.
async fn url_publish(app: &App, body: &str) -> (u16, Value) {
    let (status, _, json) = url_request(app, "POST", "", body).await;
    (status, json)
}

/// A control character in a field a delivery sends as a header (a group with a line break, a
/// key with CR LF, a type with NUL), or an empty group, refuses the HTTP publish with 400
/// naming the line and the field, and nothing of it is published.
#[tokio::test]
async fn a_url_publish_refuses_control_characters_and_empty_names() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let cases = [
        (
            r#"{"type": "a", "payload": 1, "group": "g\nh"}"#,
            "\"group\" holds a control",
        ),
        (
            r#"{"type": "a", "payload": 1, "idempotency_key": "k\r\nX-Injected: 1"}"#,
            "\"idempotency_key\" holds a control",
        ),
        (
            r#"{"type": "a\u0000b", "payload": 1}"#,
            "\"type\" holds a control",
        ),
        (
            r#"{"type": "a", "payload": 1, "group": ""}"#,
            "\"group\" is empty",
        ),
    ];
    for (bad, problem) in cases {
        let body = format!("{{\"type\": \"a\", \"payload\": 0}}\n{bad}");
        let (status, answer) = url_publish(&app, &body).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("line 2") && message.contains(problem),
            "{answer}"
        );
    }
    assert!(tq.children("tasks").await.is_empty(), "nothing published");
}

/// A name over its limit (a 300 000-byte group, a 300-byte type, an empty idempotency key)
/// refuses the HTTP publish with 400 naming the line, the field and the limit, quoting none of
/// it; nothing is published.
#[tokio::test]
async fn a_url_publish_refuses_a_name_over_its_limit() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let cases = [
        (
            json!({"type": "a", "payload": 1, "group": "g".repeat(300_000)}),
            "\"group\" is 300000 bytes, 300000 as a znode name",
        ),
        (
            json!({"type": "t".repeat(300), "payload": 1}),
            "\"type\" is 300 bytes",
        ),
        (
            json!({"type": "a", "payload": 1, "idempotency_key": ""}),
            "\"idempotency_key\" is empty",
        ),
    ];
    for (bad, problem) in cases {
        let body = format!("{{\"type\": \"a\", \"payload\": 0}}\n{bad}");
        let (status, answer) = url_publish(&app, &body).await;
        assert_eq!(status, 400, "{answer:.300}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("line 2") && message.contains(problem),
            "{answer:.300}"
        );
        assert!(
            message.len() < 600,
            "{} bytes: {message:.300}",
            message.len()
        );
    }
    assert!(tq.children("tasks").await.is_empty(), "nothing published");
}

#[tokio::test]
async fn a_url_publish_refuses_an_empty_or_repeated_id_naming_the_line() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let empty =
        "{\"type\": \"a\", \"payload\": 1}\n{\"type\": \"a\", \"payload\": 2, \"id\": \"\"}";
    let (status, body) = url_publish(&app, empty).await;
    assert_eq!(status, 400, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("line 2") && message.contains("\"id\""),
        "{body}"
    );
    let twice = [
        r#"{"type": "a", "payload": 1, "id": "order-7"}"#,
        r#"{"type": "a", "payload": 2}"#,
        r#"{"type": "a", "payload": 3, "id": "order-7"}"#,
    ]
    .join("\n");
    let (status, body) = url_publish(&app, &twice).await;
    assert_eq!(status, 400, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("line 3") && message.contains("line 1") && message.contains("order-7"),
        "{body}"
    );
    assert!(
        tq.children("tasks").await.is_empty(),
        "refused bodies publish nothing"
    );
}

#[tokio::test]
async fn a_url_publish_refuses_a_concurrency_key_that_names_no_gate() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let lines = [
        r#"{"type": "a", "payload": 1, "concurrency_key": "tenant-1"}"#,
        r#"{"type": "a", "payload": 2, "concurrency_key": ""}"#,
    ]
    .join("\n");
    let (status, body) = url_publish(&app, &lines).await;
    assert_eq!(status, 400, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("line 2") && message.contains("\"concurrency_key\" is empty"),
        "{body}"
    );
    assert!(
        tq.children("lanes/keys").await.is_empty(),
        "nothing is published, not even the key's lane"
    );
    let (status, body) = url_publish(&app, &lines[..lines.find('\n').unwrap()]).await;
    assert_eq!(status, 202, "{body}");
    // In the key's lane.
    assert!(tq.children("tasks").await.is_empty());
    let task = tq.children("lanes/keys/tenant-1").await.remove(0);
    assert_eq!(
        tq.read_json(&format!("lanes/keys/tenant-1/{task}")).await["concurrency_key"],
        "tenant-1"
    );
}

#[tokio::test]
async fn a_url_publish_debounces_by_key_and_refuses_two_of_one_key() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    let line = |n: u32| {
        format!(r#"{{"type": "a", "payload": {n}, "debounce_key": "doc-1", "debounce": "30s"}}"#)
    };
    let (status, body) = url_publish(&app, &line(1)).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = url_publish(&app, &line(2)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(tq.read_json("debounce/doc-1").await["payload"], 2);
    let (status, body) = url_publish(&app, &[line(3), line(4)].join("\n")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("debounce_key \"doc-1\""),
        "{body}"
    );
    assert_eq!(
        tq.read_json("debounce/doc-1").await["payload"],
        2,
        "nothing written"
    );
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test]
async fn a_url_publish_over_one_zookeeper_request_is_refused_before_anything_is_written() {
    let tq = TestQueue::new().await;
    let app = open_app(&tq).await;
    // Each key is 1 360 bytes of UTF-8 in the body but 4 080 as a znode name: 200 such lines
    // are 282 kB, well under PUBLISH_MAX_BYTES, and over a megabyte in the multi-op.
    let key = "é".repeat(680);
    let lines: Vec<String> = (0..200)
        .map(|i| {
            json!({"type": "a", "payload": {"n": i}, "idempotency_key": format!("{key}{i}")})
                .to_string()
        })
        .collect();
    let body = lines.join("\n");
    assert!(body.len() < app.session.config().publish_max_bytes);
    let (status, reply) = url_publish(&app, &body).await;
    assert_eq!(status, 413, "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(
        message.contains("line ") && message.contains("request"),
        "{reply}"
    );
    // One key that could never be written: its znode name alone is most of a megabyte.
    let huge = json!({"type": "a", "payload": {}, "idempotency_key": "é".repeat(150_000)});
    let (status, reply) = url_publish(&app, &huge.to_string()).await;
    assert_eq!(status, 400, "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(
        message.contains("line 1") && message.contains("idempotency_key"),
        "{reply}"
    );
    assert!(tq.children("tasks").await.is_empty(), "nothing was written");
    assert!(tq.children("keys").await.is_empty(), "no key either");
    // The session went on: the first 100 lines fit in one request and are published.
    let (status, reply) = url_publish(&app, &lines[..100].join("\n")).await;
    assert_eq!(status, 202, "{reply}");
    assert_eq!(tq.children("tasks").await.len(), 100);
}

#[tokio::test]
async fn vercel_reap_leases_answers_with_the_reap_report() {
    let tq = TestQueue::new().await;
    let orphan = orphan_lease(&tq).await;
    let server = VercelServer::start(
        "reap_leases_vercel",
        &tq.config,
        &[("CRON_SECRET", "s3cret")],
    )
    .await;
    let path = "/api/reap_leases_vercel";

    let (status, _) = server.get(path, None).await;
    assert_eq!(status, 401);
    assert!(
        tq.children("leases").await.contains(&orphan),
        "a refused request changed nothing"
    );

    let (status, report) = server.get(path, Some("Bearer s3cret")).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["orphans_removed"], 1, "{report}");
    assert_eq!(report["leased"], 0, "{report}");
    assert!(tq.children("leases").await.is_empty());
}

// ---- Helpers ----

/// `process_events`' state on the test's chroot, as a cold start would open it.
async fn open_app(tq: &TestQueue) -> App {
    App::open(tq.config.clone(), "test").await.expect("app")
}

/// The reaper's session on the test's chroot, as a cold start would open it.
async fn open_session(tq: &TestQueue) -> Session {
    reap_leases::open(tq.config.clone(), "test")
        .await
        .expect("session")
}

fn zk_error(source: zk::Error) -> event_bridge::Error {
    event_bridge::Error::Zk {
        op: "get",
        path: "/test".into(),
        source,
    }
}

/// A lease whose task does not exist, as a consumer that died between two deletes leaves.
async fn orphan_lease(tq: &TestQueue) -> String {
    let name = "task-0000000042".to_string();
    let path = format!("{}/leases/{name}", tq.config.root);
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    tq.raw
        .create(&path, b"{}", &options)
        .await
        .expect("create orphan lease");
    name
}

/// Waits until `queue`'s client knows its session has ended.
async fn expired(queue: &event_bridge::Queue) {
    let mut state = queue.state_watcher();
    let ended = async { while !state.changed().await.is_terminated() {} };
    timeout(Duration::from_secs(60), ended)
        .await
        .expect("client learns its session ended");
}

#[tokio::test]
async fn a_function_url_request_with_a_bad_query_gets_a_400_reply() {
    let tq = TestQueue::new().await;
    tq.publish(1).await;
    let app = open_app(&tq).await;
    let mut payload = event_file("function-url.json");
    payload["rawQueryString"] = json!("drain=1&max_tasks=0");
    let event = LambdaEvent::new(payload, Context::default());
    let response = process_events::lambda::handle(&app, event)
        .await
        .expect("an HTTP reply");
    assert_eq!(response["statusCode"], 400, "{response}");
    assert!(
        response["body"].as_str().unwrap().contains("max_tasks"),
        "{response}"
    );
    assert_eq!(tq.children("tasks").await.len(), 1, "nothing claimed");
}
