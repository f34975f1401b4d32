//! OpenTelemetry traces, end to end: the `event-bridge` command publishes and drains with an
//! OTLP endpoint in its environment, and a receiver that decodes with the official
//! `opentelemetry-proto` definitions (PyPI; `tests/support/otlp_receiver.py`) records every
//! span. A task that fails twice and then succeeds: its publish, three attempts (the first a
//! child of the publish, the others new traces linked to it), and each webhook request a
//! CLIENT span whose `traceparent` the webhook received. Failed attempts and requests have
//! status ERROR and an `error.type`.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::sink_http::{Receiver, Reply};
use harness::TestQueue;
use harness::otlp::Otlp;

/// Runs `event-bridge args…` against `t`'s queue, exporting to `otlp` as `service`.
async fn event_bridge(
    t: &TestQueue,
    otlp: &Otlp,
    service: &str,
    routes: &str,
    args: &[&str],
) -> String {
    event_bridge_with(t, otlp, (service, routes), args, &[]).await
}

/// As [`event_bridge`], with more variables in its environment.
async fn event_bridge_with(
    t: &TestQueue,
    otlp: &Otlp,
    (service, routes): (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let out = Command::new(harness::binary("event-bridge"))
        .args(args)
        .envs(env.iter().copied())
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .env("ROUTES", routes)
        .env("BACKOFF_BASE_MS", "0")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint())
        .env("OTEL_SERVICE_NAME", service)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// `span` failed: status ERROR, and `error.type` as given.
fn assert_failed(span: &Value, error_type: &str) {
    assert_eq!(span["status"]["code"], "ERROR", "{span:#}");
    assert_eq!(span["attributes"]["error.type"], error_type, "{span:#}");
}

/// `span` did not fail: status UNSET (as the conventions ask of a success), no `error.type`.
fn assert_unset(span: &Value) {
    assert_eq!(span["status"]["code"], "UNSET", "{span:#}");
    assert_eq!(span["attributes"].get("error.type"), None, "{span:#}");
}

/// A port that accepts connections and never answers on them, held open until the task is
/// aborted.
async fn silent_listener() -> (u16, tokio::task::JoinHandle<()>) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    (port, held)
}

fn of_kind<'a>(spans: &'a [Value], kind: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["kind"] == kind).collect()
}

fn ids(span: &Value) -> (String, String) {
    let id = |k: &str| span[k].as_str().unwrap().to_string();
    (id("trace_id"), id("span_id"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_failed_twice_traces_its_publish_three_attempts_and_their_requests() {
    let t = TestQueue::new().await;
    let otlp = Otlp::start().await;
    let webhook =
        Receiver::start([Reply::status(500), Reply::status(500), Reply::status(200)]).await;
    let routes = json!({"routes": {"order.paid": {"sink": "http", "url": webhook.url("/hook")}}});
    let routes = routes.to_string();
    let publish = [
        "publish",
        "--type",
        "order.paid",
        "--payload",
        r#"{"order": 7}"#,
    ];
    event_bridge(&t, &otlp, "shop", &routes, &publish).await;
    event_bridge(&t, &otlp, "worker", &routes, &["process", "--drain"]).await;
    let spans = otlp.spans(7).await;
    assert_eq!(
        spans.len(),
        7,
        "a publish, three attempts, three requests: {spans:#?}"
    );

    let producer = of_kind(&spans, "PRODUCER");
    assert_eq!(producer.len(), 1, "{spans:#?}");
    let publish = producer[0];
    let root = &t.config.root;
    assert_eq!(publish["name"], format!("publish {root}"));
    assert_eq!(publish["service"], "shop");
    assert_eq!(publish["attributes"]["messaging.system"], "zookeeper");
    let (publish_trace, publish_span) = ids(publish);

    let mut attempts = of_kind(&spans, "CONSUMER");
    attempts.sort_by_key(|s| s["attributes"]["event_bridge.attempt"].as_i64());
    assert_eq!(attempts.len(), 3);
    let requests = webhook.requests();
    assert_eq!(requests.len(), 3);
    let clients = of_kind(&spans, "CLIENT");
    for (i, attempt) in attempts.iter().enumerate() {
        let a = &attempt["attributes"];
        assert_eq!(attempt["name"], format!("process {root}"));
        assert_eq!(attempt["service"], "worker");
        assert_eq!(a["event_bridge.attempt"], i as i64 + 1);
        assert_eq!(a["messaging.system"], "zookeeper");
        assert_eq!(a["messaging.destination.name"], root.as_str());
        assert_eq!(a["messaging.operation.type"], "process");
        let body: Value = serde_json::from_slice(&requests[i].body).unwrap();
        assert_eq!(a["messaging.message.id"], body["id"]);
        let token = requests[i].header("X-Event-Bridge-Fencing-Token");
        assert_eq!(
            a["event_bridge.fencing_token"]
                .as_i64()
                .unwrap()
                .to_string(),
            token
        );
        let (trace, span) = ids(attempt);
        match i {
            0 => {
                assert_eq!(
                    trace, publish_trace,
                    "the first attempt is in the publish's trace"
                );
                assert_eq!(attempt["parent_span_id"], publish_span.as_str());
                assert_eq!(attempt["links"], json!([]));
            }
            _ => {
                assert_ne!(trace, publish_trace, "a retry starts a trace of its own");
                assert_eq!(attempt["parent_span_id"], Value::Null);
                let link = json!([{"trace_id": publish_trace, "span_id": publish_span}]);
                assert_eq!(attempt["links"], link);
            }
        }
        // Its request: a CLIENT child, whose context the webhook received.
        let client = (clients.iter())
            .find(|c| c["parent_span_id"] == span.as_str())
            .unwrap_or_else(|| panic!("no request under attempt {}: {spans:#?}", i + 1));
        let (client_trace, client_span) = ids(client);
        assert_eq!(client_trace, trace);
        let status = [500, 500, 200][i];
        assert_eq!(client["attributes"]["http.response.status_code"], status);
        // A request answered 5xx failed: its span says so, with the status as its error type
        // (the HTTP conventions); so does the attempt's. The success leaves both unset.
        match i {
            0 | 1 => {
                assert_failed(client, "500");
                assert_failed(attempt, "retryable");
            }
            _ => {
                assert_unset(client);
                assert_unset(attempt);
            }
        }
        assert_eq!(
            requests[i].header("traceparent"),
            format!("00-{client_trace}-{client_span}-01")
        );
    }
}

/// Deliveries that failed look failed: a webhook answered 400 (the task dead-lettered at once),
/// one that refuses the connection and one that never answers (each dead-lettered with its one
/// attempt used). Each request's CLIENT span and each attempt's CONSUMER span have status
/// ERROR and an `error.type`: the status code, or the class of a request with no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_dead_lettered_deliveries_have_error_status_and_type() {
    let t = TestQueue::new().await;
    let otlp = Otlp::start().await;
    let refusing = Receiver::start([Reply::status(400).body("no such order")]).await;
    // A port that was free a moment ago: nothing listens there now.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (silent_port, held) = silent_listener().await;
    let routes = json!({"routes": {
        "order.refused": {"sink": "http", "url": refusing.url("/hook")},
        "order.closed": {"sink": "http", "url": format!("http://127.0.0.1:{closed}/hook")},
        "order.silent": {"sink": "http", "url": format!("http://127.0.0.1:{silent_port}/hook"),
                         "timeout_ms": 500},
    }});
    let mut ids_of = std::collections::HashMap::new();
    for event_type in ["order.refused", "order.closed", "order.silent"] {
        let envelope = event_bridge::Envelope::new(event_type, json!({}));
        ids_of.insert(envelope.id.clone(), event_type);
        t.queue.publish(&envelope).await.unwrap();
    }
    let env = [("MAX_ATTEMPTS", "1")];
    let drain = ["process", "--drain"];
    let service = ("worker", routes.to_string());
    event_bridge_with(&t, &otlp, (service.0, &service.1), &drain, &env).await;
    held.abort();
    assert_eq!(t.children("dead").await.len(), 3, "all three dead-lettered");
    let spans = otlp.spans(6).await;
    assert_eq!(spans.len(), 6, "three attempts, three requests: {spans:#?}");
    let clients = of_kind(&spans, "CLIENT");
    for attempt in of_kind(&spans, "CONSUMER") {
        let id = attempt["attributes"]["messaging.message.id"]
            .as_str()
            .unwrap();
        let (_, span) = ids(attempt);
        let client = (clients.iter())
            .find(|c| c["parent_span_id"] == span.as_str())
            .unwrap_or_else(|| panic!("no request under {attempt:#}"));
        let (attempt_type, client_type) = match ids_of[id] {
            "order.refused" => ("permanent", "400"),
            "order.closed" => ("retryable", "connect_error"),
            _ => ("retryable", "timeout"),
        };
        assert_failed(attempt, attempt_type);
        assert_failed(client, client_type);
        assert!(
            !attempt["status"]["message"].as_str().unwrap().is_empty(),
            "the status says why: {attempt:#}"
        );
    }
}

/// A request its attempt gave up on is marked so: a webhook that never answers, with a
/// timeout longer than the run, is cut short by the run's deadline. The attempt, released at
/// its deadline, has not failed (status unset); its request, dropped unanswered, has status
/// ERROR and `error.type` `cancelled`, rather than ending as if nothing had gone wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_short_by_the_deadline_is_marked_cancelled() {
    let t = TestQueue::new().await;
    let otlp = Otlp::start().await;
    let (port, held) = silent_listener().await;
    let routes = json!({"routes": {"order.slow": {"sink": "http",
        "url": format!("http://127.0.0.1:{port}/hook"), "timeout_ms": 600_000}}});
    let envelope = event_bridge::Envelope::new("order.slow", json!({}));
    t.queue.publish(&envelope).await.unwrap();
    let env = [("TIME_BUDGET_MS", "3000"), ("DEADLINE_MARGIN_MS", "1000")];
    let routes = routes.to_string();
    let drain = ["process", "--drain"];
    event_bridge_with(&t, &otlp, ("worker", &routes), &drain, &env).await;
    held.abort();
    let spans = otlp.spans(2).await;
    assert_eq!(spans.len(), 2, "one attempt, one request: {spans:#?}");
    assert_unset(of_kind(&spans, "CONSUMER")[0]);
    let request = of_kind(&spans, "CLIENT")[0];
    assert_failed(request, "cancelled");
    assert_eq!(request["attributes"].get("http.response.status_code"), None);
    assert_eq!(t.children("dead").await.len(), 0, "released, not buried");
}

/// A queue with one task for a webhook that answers 200, and a receiver of spans.
struct Pending {
    t: TestQueue,
    otlp: Otlp,
    webhook: Receiver,
    /// The route table (JSON) that sends the task to the webhook.
    routes: String,
}

impl Pending {
    async fn new() -> Self {
        let t = TestQueue::new().await;
        let otlp = Otlp::start().await;
        let webhook = Receiver::start([Reply::status(200)]).await;
        let routes =
            json!({"routes": {"order.paid": {"sink": "http", "url": webhook.url("/hook")}}});
        let envelope = event_bridge::Envelope::new("order.paid", json!({"order": 8}));
        t.queue.publish(&envelope).await.unwrap();
        Pending {
            t,
            otlp,
            webhook,
            routes: routes.to_string(),
        }
    }
}

/// The attempt's CONSUMER span and its request's CLIENT span are at the receiver.
async fn attempt_and_request_arrived(otlp: &Otlp) {
    let spans = otlp.spans(2).await;
    let kinds: Vec<&str> = spans.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 2, "{spans:#?}");
    assert!(
        kinds.contains(&"CONSUMER") && kinds.contains(&"CLIENT"),
        "{kinds:?}"
    );
}

/// A Lambda function is frozen once it has answered: `process_events` sends its spans before
/// the answer goes back. Stopped (SIGSTOP) the moment its response arrives, its attempt and its
/// request are at the receiver all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_invocation_sends_its_spans_before_it_answers() {
    use harness::lambda_api::{RuntimeApi, function_command};
    let Pending {
        t,
        otlp,
        webhook,
        routes,
    } = Pending::new().await;
    let scheduled = json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}});
    let mut api = RuntimeApi::start(vec![("frozen-1", scheduled)])
        .await
        .unwrap();
    let mut function = function_command("process_events", &api, &t.config)
        .env("ROUTES", &routes)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint())
        .env("OTEL_SERVICE_NAME", "process_events")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = function.id().unwrap() as i32;
    let answered = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(request) = api.requests.recv().await {
            if request.is_post() {
                return request;
            }
        }
        panic!("the Runtime API closed");
    })
    .await
    .expect("an answer within 30 s");
    // Frozen as Lambda freezes it: nothing it had not sent yet goes out now.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    assert!(answered.path.ends_with("/response"), "{answered:?}");
    attempt_and_request_arrived(&otlp).await;
    assert_eq!(webhook.requests().len(), 1);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = function.wait().await;
}

/// The same on Vercel: the run a cron request starts has sent its spans before its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vercel_request_sends_its_spans_before_it_answers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Pending {
        t,
        otlp,
        webhook: _webhook,
        routes,
    } = Pending::new().await;
    let endpoint = otlp.endpoint();
    let env = [
        ("CRON_SECRET", "s3cret"),
        ("ROUTES", routes.as_str()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "process_events_vercel"),
    ];
    let server =
        harness::vercel::VercelBinary::start("process_events_vercel", &t.config, &env).await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let request = "GET /api/process_events_vercel HTTP/1.1\r\nHost: localhost\r\n\
                   Authorization: Bearer s3cret\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        // The whole answer: its head, and as many bytes of body as it says.
        loop {
            let n = stream.read(&mut chunk).await.unwrap();
            answer.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&answer).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = (head.lines())
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse::<usize>().ok());
                if n == 0 || length.is_some_and(|length| body.len() >= length) {
                    return text;
                }
            }
            if n == 0 {
                return text;
            }
        }
    })
    .await
    .expect("an answer within 30 s");
    // Frozen once it answered, as Vercel may freeze it.
    let pid = server.pid() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    attempt_and_request_arrived(&otlp).await;
    unsafe { libc::kill(pid, libc::SIGKILL) };
}
