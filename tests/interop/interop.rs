//! Interop with clients in other languages: the Python and Node packages' producers
//! (`packages/`), as `make packages` installed them from their artifacts, feed our consumers,
//! and a consumer written to the 000 design (`tests/interop/consumer-000.js`) shares one queue
//! with ours.
//!
//! These tests need the packages installed under `target/packages` (`make packages`: the
//! wheel in a venv there, the npm tarball in a project there). A missing one fails the test and
//! says so.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_bridge::Secret;
use event_bridge::{ProcessReport, Queue, process, reap};
use serde_json::{Value, json};
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, options};

/// The workspace's root: the test scripts are addressed from there.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `path` in the place `make packages` installs the language packages into from their
/// artifacts (scripts/packages.sh): `ruby` (a GEM_HOME), `python` (a venv), `node` (an npm
/// project).
pub(crate) fn installed(path: &str) -> PathBuf {
    workspace().join("target/packages").join(path)
}

/// The Python interpreter: `$PYTHON`, else the venv `make packages` installed the wheel into.
pub(crate) fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| installed("python/bin/python").display().to_string())
}

/// Fails the test unless Python can import the installed package (and so kazoo).
pub(crate) fn require_python() {
    let python = python();
    let probe = Command::new(&python)
        .args(["-c", "import event_bridge, kazoo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "`{python}` cannot import event_bridge: run `make packages` (it installs the package's \
         wheel into a venv at target/packages/python)"
    );
}

/// Fails the test unless Node runs and the npm package is installed.
pub(crate) fn require_node() {
    let probe = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run `node` ({e}): Node.js is needed for the interop tests")
        });
    assert!(probe.success(), "`node --version` failed");
    let package = installed("node/node_modules/event-bridge/package.json");
    assert!(
        package.exists(),
        "{} is missing: run `make packages` (it installs the npm package's tarball there)",
        package.display()
    );
}

/// `command` (a `ruby`) on the gem as `make packages` installed it from its .gem: GEM_HOME is
/// that install and GEM_PATH unset (so Debian's ActiveJob and Rack resolve as before), with no
/// load path into the source tree, run from outside it.
pub(crate) fn installed_gem(mut command: Command) -> Command {
    command
        .env("GEM_HOME", installed("ruby"))
        .env_remove("GEM_PATH")
        .env_remove("RUBYLIB")
        .env_remove("RUBYOPT")
        .current_dir(installed(""));
    command
}

/// `program args…`, run from `dir`, with none of the settings a producer would read from the
/// environment: each test passes what it means.
fn command_in(dir: &Path, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_remove("ZOOKEEPER_CONNECTION_STRING")
        .env_remove("EVENT_BRIDGE_ROOT")
        .env_remove("ZOOKEEPER_AUTH");
    command
}

/// The installed Python package's producer (`python -m event_bridge.producer`, the
/// `event-bridge-publish` command), run outside the source tree.
pub(crate) fn python_producer() -> Command {
    command_in(&installed(""), python(), &["-m", "event_bridge.producer"])
}

/// The installed npm package's producer: its `event-bridge-publish` bin.
pub(crate) fn node_producer() -> Command {
    let bin = installed("node/node_modules/.bin/event-bridge-publish");
    command_in(&installed(""), bin, &[])
}

/// Runs a producer's command line and returns the `(task, id)` of each JSON line it printed.
pub(crate) fn run_producer(command: &mut Command) -> Vec<(String, String)> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("producer output is UTF-8")
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("producer line {line:?} is not JSON: {e}"));
            let field = |k: &str| {
                v[k].as_str()
                    .unwrap_or_else(|| panic!("producer line {line:?} has no {k}"))
                    .to_string()
            };
            (field("task"), field("id"))
        })
        .collect()
}

/// The trace context the producers are given.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The arguments every producer takes, pointed at the test's chroot.
fn producer_args(t: &TestQueue, event_type: &str, payload: &Value, count: usize) -> Vec<String> {
    [
        "--zookeeper",
        &t.config.zookeeper,
        "--root",
        &t.config.root,
        "--type",
        event_type,
        "--payload",
        &payload.to_string(),
        "--count",
        &count.to_string(),
        "--group",
        "interop",
        "--traceparent",
        TRACEPARENT,
    ]
    .map(String::from)
    .to_vec()
}

/// Drains the queue with our library and checks that every published task ran once, with the
/// envelope the producer meant to write.
async fn drain_and_check(
    t: &TestQueue,
    published: &[(String, String)],
    event_type: &str,
    payload: &Value,
) {
    let recorder = Recorder::default();
    let report = process::run(&t.queue, &recorder, &options(100, 8))
        .await
        .expect("run");
    assert_eq!(
        (
            report.completed as usize,
            report.dead_lettered,
            report.remaining_depth
        ),
        (published.len(), 0, Some(0)),
        "{report:?}"
    );
    let mut ran = recorder.names();
    ran.sort();
    let mut want: Vec<String> = published.iter().map(|(task, _)| task.clone()).collect();
    want.sort();
    assert_eq!(ran, want, "every published task ran exactly once");

    let ids: HashMap<&str, &str> = published
        .iter()
        .map(|(task, id)| (task.as_str(), id.as_str()))
        .collect();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for task in recorder.seen.lock().unwrap().iter() {
        let e = &task.envelope;
        assert_eq!(e.format, "event-bridge/1", "{}", task.name);
        assert_eq!(e.event_type, event_type, "{}", task.name);
        assert_eq!(&e.payload, payload, "{}", task.name);
        assert_eq!(Some(e.id.as_str()), ids.get(task.name.as_str()).copied());
        assert_eq!(e.group.as_deref(), Some("interop"));
        assert_eq!(e.traceparent.as_deref(), Some(TRACEPARENT));
        assert_eq!(e.attempts, 1, "{}: first claim", task.name);
        assert!(e.extra.is_empty(), "no stray fields: {:?}", e.extra);
        let age_ms = now_ms - e.time.timestamp_millis();
        assert!(
            (-60_000..60_000).contains(&age_ms),
            "{}: time {} is not now",
            task.name,
            e.time
        );
    }
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("leases").await.is_empty());
}

/// A payload that exercises JSON beyond ASCII strings and integers.
fn sample_payload(lang: &str) -> Value {
    json!({"lang": lang, "user_id": 42, "ratio": 2.5, "tags": ["a", null, true], "name": "Zoë ✓"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_producer_tasks_are_processed_by_our_functions() {
    require_python();
    let t = TestQueue::new().await;
    let payload = sample_payload("python");
    let published =
        run_producer(python_producer().args(producer_args(&t, "interop.python", &payload, 25)));
    assert_eq!(published.len(), 25);
    drain_and_check(&t, &published, "interop.python", &payload).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_producer_tasks_are_processed_by_our_functions() {
    require_node();
    let t = TestQueue::new().await;
    let payload = sample_payload("node");
    let published =
        run_producer(node_producer().args(producer_args(&t, "interop.node", &payload, 25)));
    assert_eq!(published.len(), 25);
    drain_and_check(&t, &published, "interop.node", &payload).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_take_their_defaults_from_the_environment() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    let env = |c: &mut Command| {
        c.env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
            .env("EVENT_BRIDGE_ROOT", &t.config.root)
            .args(["--type", "env.default", "--payload", "{}"]);
    };
    let (mut py, mut node) = (python_producer(), node_producer());
    env(&mut py);
    env(&mut node);
    let mut names: Vec<String> = [run_producer(&mut py), run_producer(&mut node)]
        .concat()
        .into_iter()
        .map(|(task, _)| task)
        .collect();
    names.sort();
    assert_eq!(names, t.children("tasks").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_zookeeper_auth_producers_write_tasks_only_that_user_can_read() {
    require_python();
    require_node();
    const AUTH: &str = "bridge:s3cret";
    let t = TestQueue::with(|c| c.zookeeper_auth = Some(Secret::new(AUTH))).await;
    let payload = json!({"secret": true});

    // Without the credentials the base paths refuse them.
    for mut anonymous in [python_producer(), node_producer()] {
        let output = anonymous
            .args(producer_args(&t, "auth.test", &payload, 1))
            .output()
            .expect("spawn producer");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.to_lowercase().replace('_', "").contains("noauth"),
            "{anonymous:?} should fail with NoAuth without credentials; stderr: {stderr}"
        );
    }
    let mut published = Vec::new();
    for mut producer in [python_producer(), node_producer()] {
        producer
            .env("ZOOKEEPER_AUTH", AUTH)
            .args(producer_args(&t, "auth.test", &payload, 2));
        published.extend(run_producer(&mut producer));
    }
    let anonymous = zk::Client::connect(&t.config.zookeeper).await.unwrap();
    for (task, _) in &published {
        let path = format!("{}/tasks/{task}", t.config.root);
        assert_eq!(
            anonymous.get_data(&path).await.unwrap_err(),
            zk::Error::NoAuth,
            "{task} is readable by anyone"
        );
    }
    drain_and_check(&t, &published, "auth.test", &payload).await;
}

/// A running `tests/interop/consumer-000.js`, its stdout read as it comes.
struct Consumer000 {
    id: String,
    child: Child,
    ready: Arc<Mutex<bool>>,
    processed: Arc<Mutex<Vec<String>>>,
    stdout: Option<std::thread::JoinHandle<()>>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Consumer000 {
    fn start(t: &TestQueue, id: &str, idle_ms: u64) -> Self {
        let lease_timeout_ms = t.config.lease_timeout.as_millis().to_string();
        let mut child = command_in(&workspace(), "node", &["tests/interop/consumer-000.js"])
            .args(["--zookeeper", &t.config.zookeeper, "--root", &t.config.root])
            .args(["--lease-timeout-ms", &lease_timeout_ms, "--consumer-id", id])
            .args(["--duration-ms", "90000", "--idle-ms", &idle_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn node tests/interop/consumer-000.js");
        let ready = Arc::new(Mutex::new(false));
        let processed: Arc<Mutex<Vec<String>>> = Arc::default();
        let stdout = child.stdout.take().unwrap();
        let (r, p, who) = (ready.clone(), Arc::clone(&processed), id.to_string());
        let stdout = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("read consumer-000 stdout");
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("{who}: line {line:?} is not JSON: {e}"));
                if v.get("ready").is_some() {
                    *r.lock().unwrap() = true;
                } else if let Some(task) = v["processed"].as_str() {
                    assert_eq!(v["by"], who.as_str());
                    p.lock().unwrap().push(task.to_string());
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            stderr.read_to_string(&mut text).ok();
            text
        });
        Consumer000 {
            id: id.to_string(),
            child,
            ready,
            processed,
            stdout: Some(stdout),
            stderr: Some(stderr),
        }
    }

    async fn wait_ready(&mut self) {
        let mut tries = harness::Tries::within(Duration::from_secs(20));
        while tries.again().await {
            if *self.ready.lock().unwrap() {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                let stderr = self.stderr.take().unwrap().join().unwrap();
                panic!("{} exited before connecting ({status}): {stderr}", self.id);
            }
        }
        panic!("{} did not connect", self.id);
    }

    /// Waits for the process to stop by itself; returns the tasks it processed.
    async fn finish(mut self) -> Vec<String> {
        let child = &mut self.child;
        let exited = || std::future::ready(child.try_wait().unwrap());
        let Some(status) = harness::poll(Duration::from_secs(120), exited).await else {
            self.child.kill().ok();
            panic!("{} did not stop", self.id);
        };
        self.stdout.take().unwrap().join().expect("stdout reader");
        let stderr = self.stderr.take().unwrap().join().unwrap();
        assert!(status.success(), "{} failed ({status}): {stderr}", self.id);
        eprintln!("{}: {}", self.id, stderr.trim());
        std::mem::take(&mut *self.processed.lock().unwrap())
    }
}

impl Drop for Consumer000 {
    fn drop(&mut self) {
        // Only when a test fails half way: do not leave a consumer polling.
        if self.child.try_wait().ok().flatten().is_none() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// Our consumer, as a drain trigger would run it, again and again until the queue is empty.
async fn our_consumer(queue: Queue, recorder: Recorder) -> Vec<ProcessReport> {
    let mut reports = Vec::new();
    let mut tries = harness::Tries::within(Duration::from_secs(120));
    while tries.again().await {
        let report = process::run(&queue, &recorder, &options(10_000, 8))
            .await
            .expect("our run");
        let done = report.remaining_depth == Some(0);
        reports.push(report);
        if done {
            return reports;
        }
    }
    panic!(
        "{}: the queue did not empty: {reports:?}",
        queue.consumer_id()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_000_consumer_and_ours_share_a_queue() {
    require_node();
    // Enough for one publish to pack its creates into multi-ops (a window of 512 or more):
    // the 000 consumer reads tasks published so.
    const TASKS: usize = 600;
    let t = TestQueue::new().await;
    assert_eq!(
        t.config.lease_timeout,
        Duration::from_secs(300),
        "both sides use our default lease timeout, so no reaper frees a live lease"
    );
    let published = t.publish(TASKS).await;

    // The 000 consumers start first: Node starts slower than a tokio task, and one of them
    // listing everything per task is far slower than ours, so on a loaded machine ours could
    // drain the queue before they took a task. Ours join once they have taken one; the other
    // tasks are contested by all.
    let mut theirs: Vec<Consumer000> = (0..2)
        .map(|i| Consumer000::start(&t, &format!("node000-{i}"), 1_500))
        .collect();
    for c in &mut theirs {
        c.wait_ready().await;
    }
    let took_one = || async { (theirs.iter()).any(|c| !c.processed.lock().unwrap().is_empty()) };
    assert!(
        harness::poll(Duration::from_secs(20), took_one)
            .await
            .is_some(),
        "the 000 consumers processed nothing"
    );
    let ours: Vec<(Queue, Recorder)> = vec![
        (t.consumer("ours-a").await, Recorder::default()),
        (t.consumer("ours-b").await, Recorder::default()),
    ];
    let runs =
        futures::future::join_all(ours.iter().map(|(q, r)| our_consumer(q.clone(), r.clone())));
    let reaper = t.consumer("reaper").await;
    let reaping = async {
        let mut reports = Vec::new();
        for _ in 0..5 {
            reports.push(reap::reap(&reaper).await.expect("reap"));
            let why = "reaps spread over the consumers' runs, none freeing a live lease";
            harness::real_time(Duration::from_millis(150), why).await;
        }
        reports
    };
    let (runs, reaps) = tokio::join!(runs, reaping);
    let mut node_processed = Vec::new();
    for c in theirs {
        let id = c.id.clone();
        let done = c.finish().await;
        eprintln!("{id} processed {}", done.len());
        node_processed.push(done);
    }

    for ((queue, recorder), reports) in ours.iter().zip(&runs) {
        eprintln!(
            "{} processed {} in {} runs, lost {} claims to others",
            queue.consumer_id(),
            recorder.count(),
            reports.len(),
            reports.iter().map(|r| r.lease_conflicts).sum::<u32>()
        );
        for r in reports {
            assert_eq!(
                (r.leases_lost, r.retried, r.dead_lettered),
                (0, 0, 0),
                "{r:?}"
            );
        }
    }
    let orphans: u32 = reaps.iter().map(|r| r.orphans_removed).sum();
    eprintln!(
        "our reaper: {} runs, {orphans} orphan leases of 000 consumers removed",
        reaps.len()
    );
    for r in &reaps {
        assert_eq!(r.reaped, 0, "no lease is 5 minutes old: {r:?}");
    }

    let ours_count: usize = ours.iter().map(|(_, r)| r.count()).sum();
    let theirs_count: usize = node_processed.iter().map(Vec::len).sum();
    eprintln!("processed: ours {ours_count}, 000 consumers {theirs_count}, of {TASKS}");
    let mut runs_of: HashMap<String, usize> = HashMap::new();
    let all = ours
        .iter()
        .flat_map(|(_, r)| r.names())
        .chain(node_processed.into_iter().flatten());
    for name in all {
        *runs_of.entry(name).or_default() += 1;
    }
    let twice: Vec<_> = runs_of.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "tasks processed more than once: {twice:?}"
    );
    let ran: BTreeSet<&String> = runs_of.keys().collect();
    let want: BTreeSet<&String> = published.iter().collect();
    assert_eq!(ran, want, "every published task processed");
    assert!(
        ours_count > 0 && theirs_count > 0,
        "both sides took part: ours {ours_count}, 000 consumers {theirs_count}"
    );
    assert!(t.children("tasks").await.is_empty(), "tasks/ ends empty");
    assert_eq!(
        t.children("leases").await,
        Vec::<String>::new(),
        "leases/ ends empty"
    );
}

/// The 000 design's consumer completes a parent by deleting it, knowing nothing of the marker
/// its child waits under: the reaper's audit counts the child stuck, `explain` says the parent
/// is gone and names the command, and that command lets the child go on: `explain` then says
/// the next run claims it, and the next run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_a_000_consumer_completes_is_found_gone_and_its_child_goes_on() {
    require_node();
    let t = TestQueue::new().await;
    let parent = event_bridge::Envelope::new("report.build", json!({}));
    let parent_id = parent.id.clone();
    let name = t.queue.publish_many(&[parent]).await.unwrap().remove(0);
    let mut child = event_bridge::Envelope::new("report.mail", json!({}));
    child.after = vec![parent_id.clone()];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();

    let mut theirs = Consumer000::start(&t, "node000-parent", 500);
    theirs.wait_ready().await;
    assert_eq!(
        theirs.finish().await,
        vec![name],
        "the 000 consumer completed the parent"
    );
    for _ in 0..3 {
        let report = reap::reap(&t.queue).await.expect("reap");
        assert_eq!(report.stats.stuck_tasks, 1, "{:?}", report.audit);
    }
    let now = t.now().await;
    let explained = event_bridge::inspect::explain(&t.queue, &now, &child_id)
        .await
        .unwrap();
    let command = format!("`event-bridge end-parent {parent_id} --as completed`");
    assert!(explained.lines[0].contains(&command), "{explained:?}");

    let ended = Command::new(harness::binary("event-bridge"))
        .args(["end-parent", &parent_id, "--as", "completed"])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .stdin(Stdio::null())
        .output()
        .expect("run event-bridge end-parent");
    assert!(ended.status.success(), "{ended:?}");
    let ended: Value = serde_json::from_slice(&ended.stdout).unwrap();
    assert_eq!(ended["children"], 1, "{ended}");
    let now = t.now().await;
    let explained = event_bridge::inspect::explain(&t.queue, &now, &child_id)
        .await
        .unwrap();
    assert_eq!(
        explained.lines,
        vec!["ready: nothing holds it back; the next run claims it"]
    );
    let recorder = Recorder::default();
    harness::run(&t.queue, &recorder, 10).await;
    let ran: Vec<String> = (recorder.seen.lock().unwrap().iter())
        .map(|task| task.envelope.id.clone())
        .collect();
    assert_eq!(ran, vec![child_id]);
    let report = reap::reap(&t.queue).await.expect("reap");
    assert_eq!(report.stats.stuck_tasks, 0, "{:?}", report.audit);
}

/// Runs a producer and returns the one JSON line it printed.
fn producer_line(command: &mut Command) -> Value {
    let output = command.stdin(Stdio::null()).output().expect("spawn");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// Python, Node and our library share idempotency keys: whoever publishes a key first makes
/// the task; the others get it back, before and after it completes; a dead letter frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_in_every_language_share_idempotency_keys() {
    require_python();
    require_node();
    let t = TestQueue::new().await;
    let keyed = |command: Command, key: &str| {
        let mut command = command;
        command
            .args(producer_args(
                &t,
                "interop.keyed",
                &serde_json::json!({}),
                1,
            ))
            .args(["--idempotency-key", key]);
        command
    };
    let first = producer_line(&mut keyed(python_producer(), "order 7/é"));
    let task = first["task"].as_str().unwrap().to_string();
    assert!(first.get("duplicate").is_none(), "{first}");
    let again = producer_line(&mut keyed(node_producer(), "order 7/é"));
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["task"], task.as_str());
    let mut ours = event_bridge::Envelope::new("interop.keyed", serde_json::json!({}));
    ours.idempotency_key = Some("order 7/é".into());
    let published = t
        .queue
        .publish_all(&[ours.clone()])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(published.task(), Some(task.as_str()));
    assert!(matches!(
        published,
        event_bridge::queue::Published::Existing { .. }
    ));
    // Completed: still taken (the window is a day).
    let recorder = harness::Recorder::default();
    assert_eq!(harness::run(&t.queue, &recorder, 10).await.completed, 1);
    let after = producer_line(&mut keyed(node_producer(), "order 7/é"));
    assert_eq!(after["duplicate"], true, "{after}");
    assert_eq!(t.children("keys").await.len(), 1);
    // A key from Node whose task dies is free again for Python.
    let node_task = producer_line(&mut keyed(node_producer(), "doomed"));
    assert!(node_task.get("duplicate").is_none());
    let failing = event_bridge::handler::FnHandler(|_t: event_bridge::Task| async {
        Err(event_bridge::HandlerError::Permanent("no".into()))
    });
    assert_eq!(harness::run(&t.queue, &failing, 10).await.dead_lettered, 1);
    let reborn = producer_line(&mut keyed(python_producer(), "doomed"));
    assert!(reborn.get("duplicate").is_none(), "{reborn}");
    assert_ne!(reborn["task"], node_task["task"]);
}
