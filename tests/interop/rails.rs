//! The Rails flow with real parts: Debian's Ruby and ActiveJob enqueue jobs through the
//! `event_bridge` gem's queue adapter, which publishes over HTTP to the Vercel build of
//! `process_events` serving locally; drains of that server deliver them, signed as Standard
//! Webhooks, to `EventBridge::JobRunner` behind WEBrick (`examples/ruby/demo/serve.rb`), which
//! runs them and records each run. The gem is the one `make packages` built (`gem build`) and
//! installed from its .gem into target/packages/ruby: every Ruby here runs with that GEM_HOME
//! and no load path into `packages/ruby`.
//!
//! Needs `ruby` with `active_job`, `rack` and `webrick` (`apt-get install ruby ruby-activejob
//! ruby-rack ruby-webrick`; `make tools` does), the installed gem (`make packages`) and the
//! built binaries.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::time::timeout;

use harness::vercel::{VercelBinary, free_port};
use harness::{TestQueue, uuid_like, workspace_root};

use crate::interop::{installed, installed_gem};

const PUBLISH_SECRET: &str = "publish-secret";
const CRON_SECRET: &str = "cron-secret";
const DRAIN: &str = "/api/process_events_vercel?drain=1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_jobs_publish_over_http_and_run_in_the_signed_job_runner() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(Some(&secret), &record, None).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_steps_stopped_after_each_step_resumes_until_done_each_step_once() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let one_step = [("EVENT_BRIDGE_DEMO_STEPS_PER_DELIVERY", "1")];
    let runner = Runner::start_with(Some(&secret), &record, None, &one_step).await;
    let bridge = bridge(&tq, free_port(), &runner, &secret).await;

    let enqueued = enqueue(bridge.port, &["steps"]).await;
    let job = &enqueued["Demo::StepsJob"];
    let runs = drain_until_done(&bridge, &record, 1).await;
    let mine: Vec<_> = runs
        .iter()
        .filter(|r| r["job_id"] == job["job_id"])
        .collect();
    let seen: Vec<String> = mine.iter().map(|r| shown_run(r)).collect();
    // Five deliveries: each runs one step and stops before the next (the runner's 202), the
    // one with a cursor whole; the last finishes (200).
    let expected = [
        "start, step fetch, stopped",
        "start, step resize, stopped",
        "start, step tag, stopped",
        "start, step upload 0, step upload 1, step upload 2, stopped",
        "start, step notify, done",
    ];
    assert_eq!(seen.join(", "), expected.join(", "), "{mine:#?}");

    // Each stop answered the steps done so far; the next delivery carried that checkpoint.
    let stops: Vec<_> = mine.iter().filter(|r| r["what"] == "stopped").collect();
    let done = ["fetch", "resize", "tag", "upload"];
    for (i, stop) in stops.iter().enumerate() {
        let checkpoint = json!({"completed": done[..=i], "resumptions": i});
        assert_eq!(stop["checkpoint"], checkpoint, "{mine:#?}");
    }
    let deliveries = starts(&runs, job);
    assert!(deliveries[0]["resumed_from"].is_null(), "{mine:#?}");
    for (delivery, stop) in deliveries[1..].iter().zip(&stops) {
        assert_eq!(delivery["resumed_from"], stop["checkpoint"], "{mine:#?}");
    }
    // A stop counts no attempt; each delivery is a claim of its own.
    assert!(deliveries.iter().all(|d| d["attempt"] == 1), "{mine:#?}");
    let tokens: Vec<_> = deliveries
        .iter()
        .map(|d| d["fencing_token"].as_u64())
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(tq.children("tasks").await.is_empty() && tq.children("dead").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_steps_resumes_from_its_cursor_and_stops_when_the_deadline_is_near() {
    require_ruby();
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(Some(&secret), &record, None).await;
    let envelope = |checkpoint: Value| {
        json!({"format": "event-bridge/1", "id": "steps", "type": "active_job.default",
            "payload": {"job_class": "Demo::StepsJob", "job_id": "steps-job", "queue_name": "default",
                "arguments": ["import-7"], "executions": 0, "locale": "en"},
            "resume": {"checkpoint": checkpoint, "done": []}})
        .to_string()
    };
    let deliver = |body, deadline_ms| deliver_steps(&runner, &secret, body, deadline_ms);
    let now_ms = unix_seconds() * 1000;

    // Stopped inside `upload` at part 1; its deadline a second away, within the runner's
    // margin (5 s): the job runs part 1, advances, and stops at that checkpoint.
    let inside = json!({"completed": ["fetch", "resize", "tag"],
        "current": {"name": "upload", "cursor": 1}, "resumptions": 3});
    let (status, answer) = deliver(envelope(inside), now_ms + 1_000).await;
    assert_eq!(status, 202, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect(&answer);
    let next = json!({"completed": ["fetch", "resize", "tag"],
        "current": {"name": "upload", "cursor": 2}, "resumptions": 4});
    assert_eq!(answer, json!({"checkpoint": next}));

    // With time left, it finishes from there.
    let (status, answer) = deliver(envelope(next), now_ms + 60_000).await;
    assert_eq!(status, 200, "{answer}");
    let runs = read_runs(&record);
    let seen: Vec<String> = runs.iter().map(shown_run).collect();
    let expected = [
        "start, step upload 1, stopped",
        "start, step upload 2, step notify, done",
    ];
    assert_eq!(seen.join(", "), expected.join(", "), "{runs:#?}");

    // A checkpoint this job's steps do not fit: 422, to the dead letters, nothing run.
    let (status, answer) =
        deliver(envelope(json!({"completed": ["resize"]})), now_ms + 60_000).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer.contains("step :fetch met where the checkpoint has step :resize done"),
        "{answer}"
    );
    assert_eq!(read_runs(&record).len(), runs.len() + 1, "only its start");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_stale_delivery_gets_401_and_runs_nothing() {
    require_ruby();
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(Some(&secret), &record, None).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_publish_raises_in_perform_later_with_the_servers_message() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let runner = Runner::start(Some(&secret), &record, None).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_retry_on_gives_up_goes_to_the_dead_letters_at_once() {
    require_ruby();
    let tq = TestQueue::new().await;
    let (secret, record) = (new_secret(), new_record());
    let port = free_port();
    // The runner publishes retry_on's re-enqueue through the same bridge.
    let publish = publish_url(port);
    let runner = Runner::start(Some(&secret), &record, Some(&publish)).await;
    let bridge = bridge(&tq, port, &runner, &secret).await;

    let enqueued = enqueue(bridge.port, &["retrying"]).await;
    let job = &enqueued["Demo::RetryingJob"];
    let dead = harness::poll(Duration::from_secs(30), || async {
        if !tq.children("dead").await.is_empty() {
            return true;
        }
        drain(&bridge).await;
        false
    });
    assert!(dead.await.is_some(), "{:#?}", read_runs(&record));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_is_set_without_the_publish_url_and_the_first_perform_later_names_it() {
    require_ruby();
    let tq = TestQueue::new().await;
    let server = publish_server(&tq).await;
    // As a Rails app boots (a process that only runs jobs, `rails assets:precompile`): the
    // adapter is set with no publish URL; no job to enqueue needs none; the URL comes later,
    // and then the jobs publish.
    let program = r##"
        ActiveJob::Base.queue_adapter = :event_bridge
        puts "adapter set"
        puts "no job: #{ActiveJob::Base.queue_adapter.enqueue_all([])}"
        begin
          Demo::WelcomeJob.perform_later("ada")
        rescue StandardError => e
          puts "#{e.class}: #{e.message}"
        end
        ENV["EVENT_BRIDGE_PUBLISH_URL"] = ENV.fetch("LATER_URL")
        ENV["EVENT_BRIDGE_PUBLISH_SECRET"] = ENV.fetch("LATER_SECRET")
        puts Demo::WelcomeJob.perform_later("grace").provider_job_id
    "##;
    let mut command = ruby_program(program);
    command
        .env("LATER_URL", publish_url(server.port))
        .env("LATER_SECRET", PUBLISH_SECRET);
    let stdout = run_ruby(command).await;
    let lines: Vec<_> = stdout.lines().collect();
    let [set, none, refused, published] = lines[..] else {
        panic!("four lines: {stdout}");
    };
    assert_eq!(set, "adapter set");
    assert_eq!(
        none, "no job: 0",
        "enqueue_all([]) sends nothing, needing no URL"
    );
    assert!(
        refused.starts_with("KeyError: EVENT_BRIDGE_PUBLISH_URL is not set"),
        "{refused}"
    );
    assert_eq!(tq.children("tasks").await, [published], "only grace's job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_all_publishes_every_job_in_one_request_and_sets_each_provider_job_id() {
    require_ruby();
    let tq = TestQueue::new().await;
    let server = publish_server(&tq).await;
    let (proxy, seen) = recording_proxy(server.port).await;
    // Debian's ActiveJob 6.1 has no perform_all_later, so the adapter's enqueue_all is called
    // as Rails 7.1 calls it, on jobs given the two members 7.1 adds: `successfully_enqueued=`,
    // which the adapter sets, and `successfully_enqueued?`, which Rails reads back.
    let program = r##"
        ActiveJob::Base.attr_writer :successfully_enqueued
        ActiveJob::Base.define_method(:successfully_enqueued?) { @successfully_enqueued }
        ActiveJob::Base.queue_adapter = :event_bridge
        adapter = ActiveJob::Base.queue_adapter
        first = Demo::WelcomeJob.perform_later("ada")
        again = Demo::WelcomeJob.new("ada").tap { |job| job.job_id = first.job_id }
        later = Demo::ReminderJob.new("grace").tap { |job| job.scheduled_at = Time.now.to_f + 60 }
        urgent = Demo::FlakyJob.new("linus").tap { |job| job.priority = -1 }
        jobs = [Demo::WelcomeJob.new("barbara"), later, urgent, again]
        count = adapter.enqueue_all(jobs)
        empty = adapter.enqueue_all([])
        refused = [Demo::WelcomeJob.new("mallory")]
        publisher = EventBridge::Publisher.new(url: ENV["EVENT_BRIDGE_PUBLISH_URL"], secret: "wrong")
        refusal = begin
          ActiveJob::QueueAdapters::EventBridgeAdapter.new(publisher).enqueue_all(refused)
        rescue EventBridge::PublishError => e
          e.message
        end
        shown = lambda do |job|
          { job_id: job.job_id, provider_job_id: job.provider_job_id,
            enqueued: job.successfully_enqueued? }
        end
        puts JSON.generate(first: first.provider_job_id, count: count, jobs: jobs.map(&shown),
                           empty: empty, refusal: refusal, refused: refused.map(&shown))
    "##;
    let mut command = ruby_program(program);
    command
        .env("EVENT_BRIDGE_PUBLISH_URL", publish_url(proxy))
        .env("EVENT_BRIDGE_PUBLISH_SECRET", PUBLISH_SECRET);
    let stdout = run_ruby(command).await;
    let out: Value = serde_json::from_str(stdout.trim()).expect(&stdout);

    let requests = seen.lock().expect("not poisoned").clone();
    let tasks_sent: Vec<_> = requests
        .iter()
        .map(|(_, body)| body.lines().count())
        .collect();
    assert_eq!(
        tasks_sent,
        [1, 4, 1],
        "perform_later, the 4 jobs in one request, none for no job, the refused one: {requests:#?}"
    );
    assert_eq!(
        (&out["count"], &out["empty"]),
        (&json!(4), &json!(0)),
        "{out}"
    );
    let jobs = out["jobs"].as_array().expect(&stdout);
    let [fresh, later, urgent, again] = &jobs[..] else {
        panic!("{out}");
    };
    assert!(jobs.iter().all(|job| job["enqueued"] == true), "{out}");
    // The high lane's tasks live under lanes/high, the others under tasks/.
    for (job, dir) in [(fresh, "tasks"), (later, "tasks"), (urgent, "lanes/high")] {
        let name = job["provider_job_id"].as_str().expect(&stdout);
        let task = tq.read_json(&format!("{dir}/{name}")).await;
        assert_eq!(task["payload"]["job_id"], job["job_id"], "{task}");
    }
    assert_eq!(
        again["provider_job_id"], out["first"],
        "a job whose key is taken gets the task that has it"
    );
    let name = later["provider_job_id"].as_str().unwrap_or_default();
    let due = tq.read_json(&format!("tasks/{name}")).await["retry_at"].as_u64();
    let soonest = unix_seconds() * 1000 + 50_000;
    assert!(
        due.is_some_and(|due| due >= soonest),
        "due a minute on: {due:?}"
    );
    let normal = tq.children("tasks").await.len();
    assert_eq!(normal, 3, "ada's, then 2 new (and 1 in the high lane)");

    let refusal = out["refusal"].as_str().unwrap_or_default();
    assert!(refusal.contains("HTTP 401"), "{out}");
    let refused = &out["refused"][0];
    assert!(
        refused["provider_job_id"].is_null() && refused["enqueued"] != true,
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_without_its_webhook_secret_boots_and_answers_500_naming_it() {
    require_ruby();
    let record = new_record();
    let runner = Runner::start(None, &record, None).await;
    let body = json!({"format": "event-bridge/1", "id": "unchecked", "type": "active_job.default",
        "payload": {"job_class": "Demo::WelcomeJob", "job_id": "unchecked-job", "queue_name": "default",
            "arguments": ["ada"], "executions": 0, "locale": "en"}})
    .to_string();
    let signed = standard_headers(&new_secret(), "unchecked", unix_seconds(), &body);
    let (status, answer) = post(runner.port, &runner.path, &signed, &body).await;
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer.contains("EVENT_BRIDGE_WEBHOOK_SECRET: not set"),
        "{answer}"
    );
    assert!(read_runs(&record).is_empty(), "nothing ran");
}

// ---- Helpers ----

/// Fails the test unless Debian's Ruby with ActiveJob, Rack and WEBrick is there, and the gem
/// is installed.
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
    let gem = installed_gem(std::process::Command::new("ruby"))
        .args(["-e", "require 'event_bridge/rails'"])
        .stderr(Stdio::null())
        .status();
    assert!(
        gem.is_ok_and(|s| s.success()),
        "the event_bridge gem is not installed in {}: run `make packages`",
        installed("ruby").display()
    );
}

/// A Standard Webhooks secret of the test's own.
pub(crate) fn new_secret() -> String {
    format!("whsec_{}", BASE64.encode(fastrand::u64(..).to_be_bytes()))
}

/// A file for the runner's record of runs, removed with the runner.
pub(crate) fn new_record() -> PathBuf {
    std::env::temp_dir().join(format!("rails-{}.jsonl", uuid_like()))
}

/// `ruby examples/ruby/demo/<script>` on the installed gem.
fn ruby(script: &str) -> Command {
    let mut command = installed_ruby();
    command.arg(workspace_root().join("examples/ruby/demo").join(script));
    command
}

/// `ruby` on the installed gem, killed when dropped.
fn installed_ruby() -> Command {
    let mut command = Command::from(installed_gem(std::process::Command::new("ruby")));
    command.kill_on_drop(true);
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
    /// Starts the runner (with `secret` as EVENT_BRIDGE_WEBHOOK_SECRET, none if `None`); with
    /// `publish`, its jobs' re-enqueues publish there.
    async fn start(secret: Option<&str>, record: &PathBuf, publish: Option<&str>) -> Self {
        Self::start_with(secret, record, publish, &[]).await
    }

    /// As `start`, with more of serve.rb's environment (EVENT_BRIDGE_DEMO_STEPS_PER_DELIVERY).
    async fn start_with(
        secret: Option<&str>,
        record: &PathBuf,
        publish: Option<&str>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = ruby("serve.rb");
        command.envs(env.iter().copied());
        command.env_remove("EVENT_BRIDGE_WEBHOOK_SECRET");
        if let Some(secret) = secret {
            command.env("EVENT_BRIDGE_WEBHOOK_SECRET", secret);
        }
        if let Some(url) = publish {
            command
                .env("EVENT_BRIDGE_PUBLISH_URL", url)
                .env("EVENT_BRIDGE_PUBLISH_SECRET", PUBLISH_SECRET);
        }
        let mut child = command
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

/// `process_events_vercel` taking publishes with PUBLISH_SECRET, with no route (nothing is
/// delivered). Killed when dropped.
async fn publish_server(tq: &TestQueue) -> VercelBinary {
    let env = [("PUBLISH_SECRET", PUBLISH_SECRET)];
    VercelBinary::start("process_events_vercel", &tq.config, &env).await
}

/// The publish URL of a server on `port`.
fn publish_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/api/process_events_vercel")
}

/// `ruby -e program` after `demo/jobs.rb` (the installed gem and the demo jobs), with no
/// publish setting but what the test gives.
fn ruby_program(program: &str) -> Command {
    let mut command = installed_ruby();
    command
        .arg("-r")
        .arg(workspace_root().join("examples/ruby/demo/jobs"))
        .args(["-e", program])
        .env_remove("EVENT_BRIDGE_PUBLISH_URL")
        .env_remove("EVENT_BRIDGE_PUBLISH_SECRET");
    command
}

/// What `command` printed, once it exited 0.
async fn run_ruby(mut command: Command) -> String {
    let output = command.output().await.expect("run ruby");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ruby failed: {stdout}{stderr}");
    stdout
}

/// The requests a proxy passed on, each as its request line and body.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A proxy on a port of its own that passes each request on to `port` and keeps it: how many
/// requests a publish took, and what each carried. It ends with the test's runtime.
async fn recording_proxy(port: u16) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let own = listener.local_addr().expect("addr").port();
    let seen = Seen::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move { pass_on(stream, port, &kept).await });
        }
    });
    (own, seen)
}

/// Reads one request (its body as long as its Content-Length), keeps it, sends it on to `port`
/// with its Authorization, and the answer back.
async fn pass_on(stream: TcpStream, port: u16, kept: &Mutex<Vec<(String, String)>>) {
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("read a request");
        match line.trim_end() {
            "" => break,
            line => head.push(line.to_string()),
        }
    }
    let header = |name: &str| {
        head.iter().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    };
    let length = header("content-length").map_or(0, |n| n.parse().expect(&n));
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.expect("read the body");
    let body = String::from_utf8(body).expect("UTF-8");
    let mut words = head[0].split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    kept.lock()
        .expect("not poisoned")
        .push((format!("{method} {path}"), body.clone()));
    let auth = header("authorization").map(|value| ("Authorization", value));
    let (status, answer) = request(port, method, path, auth.as_slice(), &body).await;
    let reply = format!(
        "HTTP/1.1 {status} Passed on\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{answer}",
        answer.len()
    );
    let mut stream = reader.into_inner();
    stream.write_all(reply.as_bytes()).await.expect("answer");
}

/// Runs `demo/enqueue.rb` against the bridge with `secret`.
async fn run_enqueue(port: u16, secret: &str, jobs: &[&str]) -> std::process::Output {
    ruby("enqueue.rb")
        .args(jobs)
        .env("EVENT_BRIDGE_PUBLISH_URL", publish_url(port))
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
    let done = harness::poll(Duration::from_secs(30), || async {
        drain(bridge).await;
        let runs = read_runs(record);
        (runs.iter().filter(|r| r["what"] == "done").count() >= jobs).then_some(runs)
    });
    match done.await {
        Some(runs) => runs,
        None => panic!("not all done in 30 s: {:#?}", read_runs(record)),
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

/// POSTs `body` to the runner, signed, with `deadline_ms` as its X-Event-Bridge-Deadline.
async fn deliver_steps(
    runner: &Runner,
    secret: &str,
    body: String,
    deadline_ms: u64,
) -> (u16, String) {
    let mut headers = standard_headers(secret, "steps", unix_seconds(), &body);
    headers.push(("X-Event-Bridge-Deadline", deadline_ms.to_string()));
    post(runner.port, &runner.path, &headers, &body).await
}

/// A run event as the steps tests compare it: `what`, and a step's name and part.
fn shown_run(run: &Value) -> String {
    let mut shown = run["what"].as_str().unwrap_or_default().to_string();
    for field in ["step", "part"] {
        match &run[field] {
            Value::String(s) => shown = format!("{shown} {s}"),
            Value::Number(n) => shown = format!("{shown} {n}"),
            _ => {}
        }
    }
    shown
}

/// The recorded starts of `job`, in order.
fn starts(runs: &[Value], job: &Value) -> Vec<Value> {
    let id = &job["job_id"];
    let mine = runs
        .iter()
        .filter(|r| &r["job_id"] == id && r["what"] == "start");
    mine.cloned().collect()
}

pub(crate) fn unix_seconds() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.expect("after 1970").as_secs()
}

/// Standard Webhooks headers for `body`, signed with `secret` (`whsec_` and base64).
pub(crate) fn standard_headers(
    secret: &str,
    id: &str,
    at: u64,
    body: &str,
) -> Vec<(&'static str, String)> {
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

pub(crate) async fn post(
    port: u16,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, String) {
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
