//! `docs/openapi.yaml` against the code: the document is valid OpenAPI 3.1 (PyPI's
//! openapi-spec-validator), and real replies of both HTTP entries (the Lambda handler given
//! Function URL events, the Vercel binary as a local HTTP server) match the schema it names for
//! their path, method and status (`openapi_check.py`: openapi-schema-validator's OAS 3.1
//! validator). Wrong bodies made from the real ones must fail the same check.
//! Needs: python3 with openapi-spec-validator (`make tools`), ZooKeeper, the binaries.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use event_bridge::config::RouteSource;
use event_bridge::queue::ClaimOutcome;
use harness::{TestQueue, workspace_root};
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

#[tokio::test]
async fn function_url_replies_match_the_openapi_spec() {
    let hook = answering(RECEIPT).await;
    let tq = TestQueue::with(|c| {
        c.publish_max_bytes = 4_000;
        c.keep_done = Some(Duration::from_secs(3_600));
        c.routes = Some(RouteSource {
            variable: "ROUTES",
            origin: "<inline JSON>".into(),
            text: json!({"default": {"sink": "http", "url": hook}}).to_string(),
        });
    })
    .await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let url = FunctionUrl { app: &app };
    let mut replies = Replies::default();

    let lines = [
        json!({"type": "order.paid", "payload": {"order": 7}, "idempotency_key": "order-7"}),
        json!({"type": "alert.page", "payload": {}, "priority": "high", "id": "page-1",
            "group": "g", "on_dead": "pause", "concurrency_key": "tenant-1",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        json!({"type": "report.export", "payload": null, "priority": "low"}),
    ];
    let lines: Vec<String> = lines.iter().map(Value::to_string).collect();
    let created = url.post("", &lines.join("\n")).await;
    replies.expect(LAMBDA, "post", 202, "three tasks created", &created);
    let task = created.body["published"][0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    let duplicate = url.post("", &lines[0]).await;
    replies.expect(LAMBDA, "post", 202, "a duplicate key", &duplicate);
    assert_eq!(duplicate.body["published"][0]["duplicate"], true);
    let debounced = json!({"type": "a", "payload": 1, "debounce_key": "doc-1", "debounce": "30s",
        "debounce_max": "5m"});
    let first = url.post("", &debounced.to_string()).await;
    replies.expect(LAMBDA, "post", 202, "debounced", &first);
    let replacing = url.post("", &debounced.to_string()).await;
    replies.expect(LAMBDA, "post", 202, "debounced, replacing", &replacing);
    assert_eq!(
        replacing.body["published"][0]["replaced"],
        first.body["published"][0]["id"]
    );
    let pending_id = replacing.body["published"][0]["id"].as_str().unwrap();
    let debounced = url.get(&format!("status={pending_id}")).await;
    replies.expect(LAMBDA, "get", 200, "status: debounced", &debounced);
    assert_eq!(debounced.body["state"], "debounced", "{}", debounced.body);
    let not_json = url
        .post("", "{\"type\": \"a\", \"payload\": 1}\nnot json")
        .await;
    replies.expect(LAMBDA, "post", 400, "a line not JSON", &not_json);
    let large = json!({"type": "a", "payload": "x".repeat(5_000)}).to_string();
    replies.expect(
        LAMBDA,
        "post",
        413,
        "over PUBLISH_MAX_BYTES",
        &url.post("", &large).await,
    );

    let pending = url.get(&format!("status={task}")).await;
    replies.expect(LAMBDA, "get", 200, "status: pending", &pending);
    let by_id = url.get("status=page-1").await;
    replies.expect(LAMBDA, "get", 200, "status by id", &by_id);
    let missing = url.get("status=task-0999999999").await;
    replies.expect(LAMBDA, "get", 404, "status: not found", &missing);
    replies.expect(
        LAMBDA,
        "get",
        400,
        "status= empty",
        &url.get("status=").await,
    );
    let bad_cap = url.get("drain=1&max_tasks=0").await;
    replies.expect(LAMBDA, "get", 400, "max_tasks=0", &bad_cap);

    // A task held by another consumer whose handler reported progress, carried by an
    // extension: its status shows it.
    let held = tq.publish(1).await.remove(0);
    let now = tq.now().await;
    let ClaimOutcome::Claimed(mut lease) = tq.queue.claim(&held, &now).await.unwrap() else {
        panic!("not claimed")
    };
    lease
        .task
        .progress
        .report(40, "copied 4 of 10 files")
        .unwrap();
    tq.queue.extend(&mut lease).await.unwrap();
    let leased = url.get(&format!("status={held}")).await;
    replies.expect(LAMBDA, "get", 200, "status: leased, with progress", &leased);
    assert_eq!(
        leased.body["task"]["lease"]["progress"],
        json!({"percent": 40, "message": "copied 4 of 10 files"}),
        "{}",
        leased.body
    );
    tq.queue.complete(lease).await.unwrap();

    let head = url.send("HEAD", "drain=1", None).await;
    replies.expect(LAMBDA, "head", 405, "HEAD refused", &head);

    let drained = url.send("POST", "drain=1", None).await;
    replies.expect(LAMBDA, "post", 200, "a drain's report", &drained);
    assert_eq!(drained.body["completed"], 3, "{}", drained.body);
    let completed = url.get(&format!("status={task}")).await;
    replies.expect(LAMBDA, "get", 200, "status: completed", &completed);
    assert_eq!(completed.body["state"], "completed");
    assert_eq!(
        completed.body["record"]["result"],
        serde_json::from_str::<Value>(RECEIPT).unwrap(),
        "the webhook's answer, as the result: {}",
        completed.body
    );
    let again = url.post("", &lines[0]).await;
    replies.expect(
        LAMBDA,
        "post",
        202,
        "a duplicate of a completed task",
        &again,
    );

    let doomed = url.post("", r#"{"type": "a", "payload": 2}"#).await;
    let doomed = doomed.body["published"][0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    event_bridge::cancel::cancel(&tq.queue, &doomed)
        .await
        .expect("cancel");
    let dead = url.get(&format!("status={doomed}")).await;
    replies.expect(LAMBDA, "get", 200, "status: dead", &dead);
    assert_eq!(dead.body["state"], "dead");
    let scheduled = url.get("").await;
    replies.expect(LAMBDA, "get", 200, "a GET's drain", &scheduled);

    let wrong = wrong_bodies(&replies);
    replies.check_against_spec();
    wrong.check_refused();
}

#[tokio::test]
async fn vercel_replies_match_the_openapi_spec() {
    let tq = TestQueue::new().await;
    let routes = json!({"default": {"sink": "http", "url": answering(RECEIPT).await}});
    let routes = routes.to_string();
    let env = [
        ("CRON_SECRET", "cron"),
        ("PUBLISH_SECRET", "pub"),
        ("PUBLISH_MAX_BYTES", "2000"),
        ("KEEP_DONE", "1h"),
        ("ROUTES", routes.as_str()),
    ];
    let server = Vercel::start(&tq, &env).await;
    let mut replies = Replies::default();
    let task = r#"{"type": "order.paid", "payload": {"n": 1}, "idempotency_key": "o-1"}"#;

    let anonymous = server.send("POST", "", None, task).await;
    replies.expect(VERCEL, "post", 401, "publish without a bearer", &anonymous);
    let cron = server
        .send("GET", "?drain=1", Some("Bearer wrong"), "")
        .await;
    replies.expect(VERCEL, "get", 401, "a run with the wrong bearer", &cron);
    let large = format!("{{\"type\": \"a\", \"payload\": \"{}\"}}", "x".repeat(3000));
    let anonymous = server.send("POST", "", None, &large).await;
    replies.expect(
        VERCEL,
        "post",
        401,
        "a large body without a bearer",
        &anonymous,
    );
    let large = server.send("POST", "", Some("Bearer pub"), &large).await;
    replies.expect(VERCEL, "post", 413, "a body over the limit", &large);

    let created = server.send("POST", "", Some("Bearer pub"), task).await;
    replies.expect(VERCEL, "post", 202, "a task created", &created);
    let status_url = created.body["published"][0]["status_url"].as_str().unwrap();
    let status_query = status_url.strip_prefix(VERCEL).expect("a URL of this path");
    let refused = server
        .send("GET", status_query, Some("Bearer cron"), "")
        .await;
    replies.expect(VERCEL, "get", 401, "status with the cron secret", &refused);
    let pending = server
        .send("GET", status_query, Some("Bearer pub"), "")
        .await;
    replies.expect(VERCEL, "get", 200, "status: pending", &pending);
    let duplicate = server.send("POST", "", Some("Bearer pub"), task).await;
    replies.expect(VERCEL, "post", 202, "a duplicate key", &duplicate);
    let missing = server
        .send("GET", "?status=nothing-here", Some("Bearer pub"), "")
        .await;
    replies.expect(VERCEL, "get", 404, "status: not found", &missing);
    let empty = server.send("GET", "?status=", None, "").await;
    replies.expect(VERCEL, "get", 400, "status= empty", &empty);
    let drained = server
        .send("GET", "?drain=1", Some("Bearer cron"), "")
        .await;
    replies.expect(VERCEL, "get", 200, "a drain's report", &drained);
    assert_eq!(drained.body["completed"], 1, "{}", drained.body);
    let completed = server
        .send("GET", status_query, Some("Bearer pub"), "")
        .await;
    replies.expect(VERCEL, "get", 200, "status: completed", &completed);
    assert_eq!(
        completed.body["record"]["result"],
        serde_json::from_str::<Value>(RECEIPT).unwrap(),
        "{}",
        completed.body
    );
    let scheduled = server.send("POST", "", Some("Bearer cron"), "").await;
    replies.expect(VERCEL, "post", 200, "a POST run without a body", &scheduled);

    replies.check_against_spec();
}

/// Replies a wrong spec or a wrong body must not pass: made from the real ones, each broken
/// in one way the schemas forbid.
fn wrong_bodies(real: &Replies) -> Replies {
    let mut wrong = Replies::default();
    let mut break_one = |label: &str, method: &str, status: u16, change: &dyn Fn(&mut Value)| {
        let mut reply = real.find(label).clone();
        change(&mut reply.body);
        reply.status = status;
        wrong.expect(LAMBDA, method, status, &format!("wrong: {label}"), &reply);
    };
    break_one("three tasks created", "post", 202, &|b| {
        b["published"][0]
            .as_object_mut()
            .unwrap()
            .remove("status_url");
    });
    break_one("a duplicate key", "post", 202, &|b| {
        b["published"][0]["state"] = json!("frozen")
    });
    break_one("debounced", "post", 202, &|b| {
        b["published"][0]
            .as_object_mut()
            .unwrap()
            .remove("replaced");
    });
    break_one("a drain's report", "post", 200, &|b| {
        b["claimed"] = json!(-1)
    });
    break_one("a drain's report", "post", 200, &|b| {
        b["surprise"] = json!(1)
    });
    break_one("status: pending", "get", 200, &|b| {
        b["state"] = json!("lost")
    });
    break_one("status: pending", "get", 200, &|b| {
        b["task"]["envelope"]["time"] = json!("yesterday")
    });
    break_one("status: debounced", "get", 200, &|b| {
        b.as_object_mut().unwrap().remove("due_at_ms");
    });
    break_one("status: leased, with progress", "get", 200, &|b| {
        b["task"]["lease"]["progress"]["percent"] = json!(101)
    });
    break_one("status: completed", "get", 200, &|b| {
        b["record"]["result_omitted"] = json!({"bytes": 70000})
    });
    break_one("status: not found", "get", 404, &|b| {
        b["state"] = json!("pending")
    });
    break_one("a line not JSON", "post", 400, &|b| {
        b.as_object_mut().unwrap().remove("message");
    });
    break_one("a line not JSON", "post", 503, &|_| {});
    break_one("a line not JSON", "post", 418, &|_| {});
    break_one("three tasks created", "post", 200, &|_| {});
    wrong
}

// ---- Replies and the check ----

/// One HTTP reply: its status, content type and JSON body.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    content_type: String,
    body: Value,
}

/// Replies collected for the check, each with the path, method and status the test expects.
#[derive(Default)]
struct Replies(Vec<(String, Value, Reply)>);

impl Replies {
    /// Keeps `reply`, after checking it has the status the scenario expects.
    fn expect(&mut self, path: &str, method: &str, status: u16, label: &str, reply: &Reply) {
        assert_eq!(reply.status, status, "{label}: {}", reply.body);
        let sample = json!({
            "label": label, "path": path, "method": method, "status": reply.status,
            "content_type": reply.content_type, "body": reply.body,
        });
        self.0.push((label.to_string(), sample, reply.clone()));
    }

    fn find(&self, label: &str) -> &Reply {
        let found = self.0.iter().find(|(l, _, _)| l == label);
        &found.unwrap_or_else(|| panic!("no reply {label:?}")).2
    }

    /// Every reply matches the spec.
    fn check_against_spec(&self) {
        for (label, problems) in self.problems() {
            assert!(problems.is_empty(), "{label}: {problems:#?}");
        }
    }

    /// Every reply is refused by the spec.
    fn check_refused(&self) {
        for (label, problems) in self.problems() {
            assert!(!problems.is_empty(), "{label} passed the check");
        }
    }

    /// Each reply's problems, as `openapi_check.py` finds them.
    fn problems(&self) -> Vec<(String, Vec<Value>)> {
        let samples: Vec<&Value> = self.0.iter().map(|(_, sample, _)| sample).collect();
        let script = workspace_root().join("tests/functions/openapi_check.py");
        let mut child = python()
            .arg(script)
            .arg(spec())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python3");
        let input = serde_json::to_vec(&samples).expect("samples");
        child.stdin.take().unwrap().write_all(&input).expect("send");
        let output = child.wait_with_output().expect("the check's answer");
        assert!(output.status.success(), "{}", output_text(&output));
        let results: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON results");
        assert_eq!(results.len(), samples.len());
        results
            .into_iter()
            .map(|r| {
                let problems = r["problems"].as_array().cloned().unwrap_or_default();
                (
                    r["label"].as_str().unwrap_or_default().to_string(),
                    problems,
                )
            })
            .collect()
    }
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

/// The Lambda handler, given Function URL events as AWS sends them.
struct FunctionUrl<'a> {
    app: &'a App,
}

impl FunctionUrl<'_> {
    async fn get(&self, query: &str) -> Reply {
        self.send("GET", query, None).await
    }

    async fn post(&self, query: &str, body: &str) -> Reply {
        self.send("POST", query, Some(body)).await
    }

    /// `method /?query` with `body`, as `events/publish.json` with those changed.
    async fn send(&self, method: &str, query: &str, body: Option<&str>) -> Reply {
        let path = workspace_root().join("events/publish.json");
        let mut event: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("event")).expect("JSON");
        event["requestContext"]["http"]["method"] = json!(method);
        event["rawQueryString"] = json!(query);
        event["body"] = json!(body);
        let event = LambdaEvent::new(event, Context::default());
        let reply = process_events::lambda::handle(self.app, event)
            .await
            .expect("an HTTP reply");
        Reply {
            status: reply["statusCode"].as_u64().expect("a status") as u16,
            content_type: reply["headers"]["content-type"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            body: serde_json::from_str(reply["body"].as_str().expect("a body")).expect("JSON"),
        }
    }
}

/// The Vercel binary as a local HTTP server (`VERCEL_DEV_PORT`), killed when dropped.
struct Vercel {
    server: harness::vercel::VercelBinary,
}

impl Vercel {
    async fn start(tq: &TestQueue, env: &[(&str, &str)]) -> Self {
        let server =
            harness::vercel::VercelBinary::start("process_events_vercel", &tq.config, env).await;
        Vercel { server }
    }

    /// `method VERCEL?query` with an optional `Authorization` header and `body`.
    async fn send(&self, method: &str, query: &str, auth: Option<&str>, body: &str) -> Reply {
        let mut stream = TcpStream::connect(("127.0.0.1", self.server.port))
            .await
            .expect("connect");
        let auth = auth.map(|a| format!("Authorization: {a}\r\n"));
        let head = format!(
            "{method} {VERCEL}{query} HTTP/1.1\r\nHost: localhost\r\n{}Content-Length: {}\r\n\
             Connection: close\r\n\r\n",
            auth.unwrap_or_default(),
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("send");
        stream.write_all(body.as_bytes()).await.expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
        let content_type = head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        });
        Reply {
            status: status.unwrap_or_else(|| panic!("{head}")),
            content_type: content_type.unwrap_or_default(),
            body: serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}")),
        }
    }
}
