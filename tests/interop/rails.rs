//! The Rails flow with real parts: Debian's Ruby and ActiveJob enqueue jobs through the
//! `event_bridge` queue adapter (`examples/ruby/lib/event_bridge/`), which publishes over
//! HTTP to the Vercel build of `process_events` serving locally; drains of that server deliver
//! them, signed as Standard Webhooks, to `EventBridge::JobRunner` behind WEBrick
//! (`examples/ruby/demo/serve.rb`), which runs them and records each run.
//!
//! Needs `ruby` with `active_job`, `rack` and `webrick` (`apt-get install ruby ruby-activejob
//! ruby-rack ruby-webrick`; `make tools` does) and the built binaries.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep, timeout};

use harness::vercel::free_port;
use harness::{TestQueue, uuid_like, workspace_root};

const PUBLISH_SECRET: &str = "publish-secret";
const CRON_SECRET: &str = "cron-secret";
const DRAIN: &str = "/api/process_events_vercel?drain=1";

#[tokio::test]
async fn active_jobs_publish_over_http_and_run_in_the_signed_job_runner() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(&secret, &record, None).await;
    let bridge = bridge(&tq, free_port(), &runner, &secret).await;

    let enqueued = enqueue(bridge.port, &[]).await;
    let [welcome, reminder, flaky] =
        ["Welcome", "Reminder", "Flaky"].map(|job| &enqueued[&format!("Demo::{job}Job")]);
    where_they_wait(&tq, welcome, reminder, flaky).await;

    let runs = drain_until_done(&bridge, &record, 3).await;
    for job in [welcome, reminder, flaky] {
        let done = runs
            .iter()
            .filter(|r| r["job_id"] == job["job_id"] && r["what"] == "done");
        assert_eq!(done.count(), 1, "{job} ran once in the end: {runs:#?}");
    }
    assert_eq!(starts(&runs, welcome).len(), 1, "{runs:#?}");
    let reminded = starts(&runs, reminder);
    assert_eq!(reminded.len(), 1, "{runs:#?}");
    let ran_at = reminded[0]["at_ms"].as_u64().expect("a run's wall time");
    let due = reminder["scheduled_at_ms"]
        .as_u64()
        .expect("set(wait: 2)'s time");
    assert!(ran_at >= due, "ran at {ran_at}, due at {due}");
    let tries = starts(&runs, flaky);
    let attempts: Vec<_> = tries.iter().map(|r| r["attempt"].clone()).collect();
    assert_eq!(attempts, [json!(1), json!(2)], "{runs:#?}");
    assert!(tries[1]["fencing_token"].as_u64() > tries[0]["fencing_token"].as_u64());
    assert!(tq.children("tasks").await.is_empty() && tq.children("dead").await.is_empty());
}

/// Right after the publish: the plain job is a task of the normal lane, the delayed one is a
/// task due two seconds after its publish by ZooKeeper's clock, the one of priority -1 is in
/// the high lane.
async fn where_they_wait(tq: &TestQueue, plain: &Value, delayed: &Value, urgent: &Value) {
    let name = plain["provider_job_id"].as_str().unwrap_or_default();
    assert!(name.starts_with("task-"), "{plain}");
    let name = delayed["provider_job_id"].as_str().unwrap_or_default();
    assert!(name.starts_with("task-"), "{delayed}");
    let body = tq.read_json(&format!("tasks/{name}")).await;
    assert!(body["retry_at"].as_i64().is_some(), "a due time: {body}");
    let high = tq.children("lanes/high").await;
    let name = &urgent["provider_job_id"];
    assert!(high.iter().any(|task| name == task.as_str()), "{high:?}");
}

#[tokio::test]
async fn a_forged_or_stale_delivery_gets_401_and_runs_nothing() {
    require_ruby();
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(&secret, &record, None).await;
    let body = json!({"format": "event-bridge/1", "id": "forged", "type": "active_job.default",
        "payload": {"job_class": "Demo::WelcomeJob", "job_id": "forged-job", "queue_name": "default",
            "arguments": ["mallory"], "executions": 0, "locale": "en"}})
    .to_string();
    let now = unix_seconds();
    let other = format!("whsec_{}", BASE64.encode(b"someone else's key"));
    let signed = standard_headers(&secret, "forged", now, &body);
    let mut replayed = signed.clone();
    replayed[0].1 = "another-id".into();
    let requests = [
        vec![],
        standard_headers(&other, "forged", now, &body),
        standard_headers(&secret, "forged", now - 301, &body),
        standard_headers(&secret, "forged", now, &body.replace("mallory", "eve")),
        replayed,
    ];
    for headers in requests {
        let (status, answer) = post(runner.port, &runner.path, &headers, &body).await;
        assert_eq!(status, 401, "{headers:?}: {answer}");
    }
    let (status, answer) = post(runner.port, &runner.path, &signed, &body).await;
    assert_eq!(status, 200, "the same request signed runs: {answer}");
    let runs = read_runs(&record);
    assert_eq!(
        runs.len(),
        2,
        "only the signed request ran (start, done): {runs:#?}"
    );
}

#[tokio::test]
async fn a_refused_publish_raises_in_perform_later_with_the_servers_message() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(&secret, &record, None).await;
    let bridge = bridge(&tq, free_port(), &runner, &secret).await;

    let output = run_enqueue(bridge.port, "not the publish secret", &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("EventBridge::PublishError")
            && stderr.contains("HTTP 401: send Authorization: Bearer <PUBLISH_SECRET>"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no job was enqueued");
    assert!(tq.children("tasks").await.is_empty());
}

#[tokio::test]
async fn a_job_whose_retry_on_gives_up_goes_to_the_dead_letters_at_once() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let port = free_port();
    // The runner publishes retry_on's re-enqueue through the same bridge.
    let publish = format!("http://127.0.0.1:{port}/api/process_events_vercel");
    let runner = Runner::start(&secret, &record, Some(&publish)).await;
    let bridge = bridge(&tq, port, &runner, &secret).await;

    let enqueued = enqueue(bridge.port, &["retrying"]).await;
    let job = &enqueued["Demo::RetryingJob"];
    let deadline = Instant::now() + Duration::from_secs(30);
    while tq.children("dead").await.is_empty() {
        assert!(Instant::now() < deadline, "{:#?}", read_runs(&record));
        drain(&bridge).await;
        sleep(Duration::from_millis(250)).await;
    }
    let runs = read_runs(&record);
    let tries = starts(&runs, job);
    let seen: Vec<_> = tries
        .iter()
        .map(|r| (&r["executions"], &r["attempt"]))
        .collect();
    let once = (&json!(1), &json!(1));
    let twice = (&json!(2), &json!(1));
    assert_eq!(
        seen,
        [once, twice],
        "retry_on's two executions, each a task's first attempt"
    );
    let dead = tq.children("dead").await;
    let letter = tq.read_json(&format!("dead/{}", dead[0])).await.to_string();
    assert!(
        letter.contains("HTTP 422") && letter.contains("the partner is down"),
        "{letter}"
    );
    assert_eq!(dead.len(), 1, "{dead:?}");
}

// ---- Helpers ----

/// Fails the test unless Debian's Ruby with ActiveJob, Rack and WEBrick is there.
fn require_ruby() {
    let probe = std::process::Command::new("ruby")
        .args([
            "-e",
            "require 'active_job'; require 'rack'; require 'webrick'",
        ])
        .stderr(Stdio::null())
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "the Rails tests need ruby with active_job, rack and webrick: `apt-get install ruby \
         ruby-activejob ruby-rack ruby-webrick` (make tools does)"
    );
}

/// A Standard Webhooks secret of the test's own.
fn new_secret() -> String {
    format!("whsec_{}", BASE64.encode(fastrand::u64(..).to_be_bytes()))
}

/// A file for the runner's record of runs, removed with the runner.
fn new_record() -> PathBuf {
    std::env::temp_dir().join(format!("rails-{}.jsonl", uuid_like()))
}

/// `ruby -I examples/ruby/lib examples/ruby/demo/<script>`, from the workspace.
fn ruby(script: &str) -> Command {
    let mut command = Command::new("ruby");
    command
        .args(["-I", "examples/ruby/lib"])
        .arg(format!("examples/ruby/demo/{script}"))
        .current_dir(workspace_root())
        .kill_on_drop(true);
    command
}

/// The job runner behind WEBrick, recording runs in a file. Killed when dropped.
struct Runner {
    port: u16,
    path: String,
    _child: Child,
    record: PathBuf,
}

impl Runner {
    /// Starts the runner; with `publish`, its jobs' re-enqueues publish there.
    async fn start(secret: &str, record: &PathBuf, publish: Option<&str>) -> Self {
        let mut command = ruby("serve.rb");
        if let Some(url) = publish {
            command
                .env("EVENT_BRIDGE_PUBLISH_URL", url)
                .env("EVENT_BRIDGE_PUBLISH_SECRET", PUBLISH_SECRET);
        }
        let mut child = command
            .env("EVENT_BRIDGE_WEBHOOK_SECRET", secret)
            .env("EVENT_BRIDGE_DEMO_RECORD", record)
            .env("PORT", "0")
            .stdout(Stdio::piped())
            // ActiveJob logs the flaky job's first failure with its backtrace: expected.
            .stderr(Stdio::null())
            .spawn()
            .expect("start the job runner");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the runner starts")
            .expect("read its stdout")
            .expect("the runner exited before listening");
        let url = line
            .strip_prefix("runner listening on http://127.0.0.1:")
            .expect(&line);
        let (port, path) = url.split_once('/').expect(url);
        Runner {
            port: port.parse().expect(url),
            path: format!("/{path}"),
            _child: child,
            record: record.clone(),
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.record);
    }
}

/// `process_events_vercel` on `port`, routing `active_job.default` to the runner with standard
/// signatures. Killed when dropped.
struct Bridge {
    port: u16,
    _server: harness::vercel::VercelBinary,
}

async fn bridge(tq: &TestQueue, port: u16, runner: &Runner, secret: &str) -> Bridge {
    let url = format!("http://127.0.0.1:{}{}", runner.port, runner.path);
    let routes = json!({"routes": {"active_job.default": {"sink": "http", "url": url,
        "signature": "standard", "secret_env": "RAILS_JOBS_SECRET", "timeout_ms": 10000}}})
    .to_string();
    let env = [
        ("CRON_SECRET", CRON_SECRET),
        ("PUBLISH_SECRET", PUBLISH_SECRET),
        ("ROUTES", routes.as_str()),
        ("RAILS_JOBS_SECRET", secret),
        ("BACKOFF_BASE_MS", "200"),
    ];
    let bin = "process_events_vercel";
    let server = harness::vercel::VercelBinary::start_on(bin, port, &tq.config, &env).await;
    Bridge {
        port,
        _server: server,
    }
}

/// Runs `demo/enqueue.rb` against the bridge with `secret`.
async fn run_enqueue(port: u16, secret: &str, jobs: &[&str]) -> std::process::Output {
    let url = format!("http://127.0.0.1:{port}/api/process_events_vercel");
    ruby("enqueue.rb")
        .args(jobs)
        .env("EVENT_BRIDGE_PUBLISH_URL", url)
        .env("EVENT_BRIDGE_PUBLISH_SECRET", secret)
        .output()
        .await
        .expect("run enqueue.rb")
}

/// Runs `demo/enqueue.rb` against the bridge: what it printed of each job, by class.
async fn enqueue(port: u16, jobs: &[&str]) -> HashMap<String, Value> {
    let output = run_enqueue(port, PUBLISH_SECRET, jobs).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "enqueue.rb failed: {stdout}{stderr}"
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect(line))
        .map(|job| (job["job"].as_str().unwrap().to_string(), job))
        .collect()
}

/// Drains until `jobs` runs are done (or 30 s pass): every run recorded.
async fn drain_until_done(bridge: &Bridge, record: &PathBuf, jobs: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        drain(bridge).await;
        let runs = read_runs(record);
        if runs.iter().filter(|r| r["what"] == "done").count() >= jobs {
            return runs;
        }
        assert!(Instant::now() < deadline, "not all done in 30 s: {runs:#?}");
        sleep(Duration::from_millis(250)).await;
    }
}

/// One drain of the bridge, as a cron request with `?drain=1` runs it.
async fn drain(bridge: &Bridge) {
    let auth = [("Authorization", format!("Bearer {CRON_SECRET}"))];
    let (status, report) = request(bridge.port, "GET", DRAIN, &auth, "").await;
    assert_eq!(status, 200, "{report}");
}

/// What the runner recorded, a JSON object per run event.
fn read_runs(record: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect(l))
        .collect()
}

/// The recorded starts of `job`, in order.
fn starts(runs: &[Value], job: &Value) -> Vec<Value> {
    let id = &job["job_id"];
    let mine = runs
        .iter()
        .filter(|r| &r["job_id"] == id && r["what"] == "start");
    mine.cloned().collect()
}

fn unix_seconds() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.expect("after 1970").as_secs()
}

/// Standard Webhooks headers for `body`, signed with `secret` (`whsec_` and base64).
fn standard_headers(secret: &str, id: &str, at: u64, body: &str) -> Vec<(&'static str, String)> {
    let key = BASE64.decode(&secret["whsec_".len()..]).expect("base64");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("any key");
    mac.update(format!("{id}.{at}.{body}").as_bytes());
    let signature = BASE64.encode(mac.finalize().into_bytes());
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", at.to_string()),
        ("webhook-signature", format!("v1,{signature}")),
    ]
}

async fn post(port: u16, path: &str, headers: &[(&str, String)], body: &str) -> (u16, String) {
    request(port, "POST", path, headers, body).await
}

/// One HTTP/1.1 request on loopback: the status and the body.
async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect(&response);
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.expect(head), body.to_string())
}
