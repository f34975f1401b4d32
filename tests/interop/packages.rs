//! The language packages as a user gets them: each built from `packages/` and installed from
//! its artifact by `make packages` (scripts/packages.sh), then used here from that install.
//! They carry the workspace's one version; the Python and npm packages' webhook helpers check
//! real deliveries of our HTTP sink and suspend and resume a task through our consumer. (Their
//! producers, and the gem in the Rails flow, are the other tests of this target.)

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::Handler;
use event_bridge::queue::Signalled;
use event_bridge::sink::http::{HttpSink, HttpSpec};
use event_bridge::sink::route::SignatureScheme;
use event_bridge::{Envelope, HandlerError, Secret, Task, process};
use harness::{TestQueue, options, run};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

use crate::interop::{installed, installed_gem, python, require_node, require_python, workspace};
use crate::rails::{new_record, new_secret, post, standard_headers, unix_seconds};

/// The workspace's version, `[workspace.package] version` in Cargo.toml: the one for all.
fn workspace_version() -> String {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let section = manifest
        .split("[workspace.package]")
        .nth(1)
        .expect("a [workspace.package] section");
    let line = (section.lines())
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| line.strip_prefix("version = "))
        .expect("a version in [workspace.package]");
    line.trim_matches('"').to_string()
}

/// What `command` printed, once it exited 0, a line each.
fn lines_of(command: &mut StdCommand) -> Vec<String> {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?} failed: {stderr}");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    stdout.lines().map(String::from).collect()
}

/// Asserts that `file` lies under `dir`, symbolic links resolved: loaded from the install.
fn assert_inside(file: &str, dir: &Path) {
    let file = std::fs::canonicalize(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(
        file.starts_with(&dir),
        "{} was loaded from outside the install {}",
        file.display(),
        dir.display()
    );
}

#[test]
fn every_package_carries_the_workspace_version_and_the_changelog_records_it() {
    require_python();
    require_node();
    let version = workspace_version();
    let cli = lines_of(StdCommand::new(harness::binary("event-bridge")).arg("--version"));
    assert_eq!(cli, [format!("event-bridge {version}")]);

    // Where each package states it, in the source tree.
    let source = |path: &str| std::fs::read_to_string(workspace().join(path)).expect(path);
    let stated = [
        (
            "packages/ruby/lib/event_bridge/version.rb",
            "VERSION = \"{}\"",
        ),
        ("packages/python/pyproject.toml", "\nversion = \"{}\"\n"),
        ("packages/node/package.json", "\n  \"version\": \"{}\",\n"),
    ];
    for (path, form) in stated {
        let line = form.replace("{}", &version);
        assert!(
            source(path).contains(&line),
            "{path} does not say version {version} (scripts/set-version.sh {version} sets it)"
        );
    }
    let changelog = source("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## [{version}]")),
        "CHANGELOG.md has no section for {version}"
    );

    // What the installed artifacts say, each loaded from its install.
    let ruby = "require 'event_bridge'\n\
        puts EventBridge::VERSION, Gem.loaded_specs.fetch('event_bridge').version\n\
        puts $LOADED_FEATURES.grep(%r{/event_bridge/version\\.rb\\z}).first";
    let gem = lines_of(installed_gem(StdCommand::new("ruby")).args(["-e", ruby]));
    assert_eq!(gem[..2], [version.clone(), version.clone()], "{gem:?}");
    assert_inside(&gem[2], &installed("ruby"));

    let program = "import importlib.metadata, event_bridge\n\
        print(event_bridge.__version__)\n\
        print(importlib.metadata.version('event-bridge'))\n\
        print(event_bridge.__file__)";
    let mut command = StdCommand::new(python());
    let wheel = lines_of(command.args(["-c", program]).current_dir(installed("")));
    assert_eq!(wheel[..2], [version.clone(), version.clone()], "{wheel:?}");
    assert_inside(&wheel[2], &installed("python"));

    let program = "console.log(require('event-bridge').version);\n\
        console.log(require('event-bridge/package.json').version);\n\
        console.log(require.resolve('event-bridge'));";
    let mut command = StdCommand::new("node");
    let npm = lines_of(command.args(["-e", program]).current_dir(installed("node")));
    assert_eq!(npm[..2], [version.clone(), version.clone()], "{npm:?}");
    assert_inside(&npm[2], &installed("node/node_modules/event-bridge"));
}

/// Our HTTP sink signing as a route with `"signature": "standard"` does.
struct Hook(HttpSink);

impl Hook {
    fn new(url: String, secret: &str) -> Self {
        let spec = HttpSpec {
            url,
            secret: Some(Secret::new(secret)),
            signature: SignatureScheme::Standard,
            timeout: Duration::from_secs(10),
        };
        Hook(HttpSink::new(spec).expect("valid spec"))
    }
}

impl Handler for Hook {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.0.deliver(task).await.map(drop).map_err(Into::into)
    }
}

/// A webhook receiver written with a package's helpers (tests/interop/webhook_receiver.*),
/// recording each request it got. Killed when dropped.
struct Receiver {
    port: u16,
    record: PathBuf,
    _child: Child,
}

impl Receiver {
    async fn start(mut command: Command, secret: &str, wait_key: &str) -> Self {
        let record = new_record();
        let mut child = command
            .env("WEBHOOK_SECRET", secret)
            .env("WAIT_KEY", wait_key)
            .env("RECORD", &record)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the receiver starts")
            .expect("read its stdout")
            .expect("the receiver exited before listening");
        let listening: Value = serde_json::from_str(&line).expect(&line);
        let port = listening["listening"].as_u64().expect(&line);
        Receiver {
            port: u16::try_from(port).expect(&line),
            record,
            _child: child,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// What it recorded: the deliveries it answered, and the requests it refused.
    fn records(&self) -> (Vec<Value>, Vec<Value>) {
        let text = std::fs::read_to_string(&self.record).unwrap_or_default();
        let all = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect(l));
        all.partition(|r| r.get("refused").is_none())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.record);
    }
}

/// The receiver refuses a request that is not a genuine delivery with 401, through the
/// package's verifier: unsigned, signed with another key, stale, a malformed signature, and a
/// signed body that is no JSON.
async fn refuses_what_is_not_a_delivery(receiver: &Receiver, secret: &str) {
    let body = json!({"format": "event-bridge/1", "id": "forged", "type": "order.export",
        "payload": {"order": 8}})
    .to_string();
    let now = unix_seconds();
    let other = new_secret();
    let mut malformed = standard_headers(secret, "forged", now, &body);
    malformed[2].1 = "v1".into();
    let not_json = "not json";
    let cases = [
        (vec![], body.as_str()),
        (standard_headers(&other, "forged", now, &body), &body),
        (standard_headers(secret, "forged", now - 301, &body), &body),
        (malformed, &body),
        (standard_headers(secret, "forged", now, not_json), not_json),
    ];
    for (headers, body) in &cases {
        let (status, answer) = post(receiver.port, "/hook", headers, body).await;
        assert_eq!(status, 401, "{headers:?} {body}: {answer}");
    }
    let (delivered, refused) = receiver.records();
    assert!(delivered.is_empty(), "{delivered:?}");
    assert_eq!(refused.len(), cases.len(), "{refused:?}");
}

/// A task delivered by our consumer to a webhook that answers with the package's helpers:
/// `checkpoint` (delivered again at once), `resume_in` 30 s (asleep until then, by ZooKeeper's
/// clock), `wait_for` a key (until its signal), then 200. Each delivery carries the checkpoint
/// answered before it, and the last the wait's outcome; no attempt is counted.
async fn suspends_and_resumes_a_task_through_our_consumer(language: &str, receiver: Command) {
    let t = TestQueue::new().await;
    let secret = new_secret();
    let key = format!("order-7-{language}");
    let receiver = Receiver::start(receiver, &secret, &key).await;
    refuses_what_is_not_a_delivery(&receiver, &secret).await;
    let hook = Hook::new(receiver.url(), &secret);
    let payload = json!({"order": 7, "from": language});
    let envelope = Envelope::new("order.export", payload.clone());
    let name = t.queue.publish(&envelope).await.expect("publish");

    let first = run(&t.queue, &hook, 1).await;
    let second = run(&t.queue, &hook, 1).await;
    assert_eq!((first.suspended, second.suspended), (1, 1), "{second:?}");
    let asleep = run(&t.queue, &hook, 1).await;
    assert_eq!(receiver.records().0.len(), 2, "asleep for 30 s: {asleep:?}");
    let later = ZkTime::at(t.now().await.now_ms() + 31_000);
    let third = process::run_at(&t.queue, &hook, &options(1, 1), &later).await;
    assert_eq!(third.expect("run").suspended, 1);
    assert!(
        t.children("leases").await.is_empty(),
        "no lease while it waits"
    );
    let sent = t.queue.signals().signal(&key, &json!({"paid": true})).await;
    assert!(matches!(sent, Ok(Signalled::Delivered { .. })), "{sent:?}");
    let fourth = run(&t.queue, &hook, 1).await;
    assert_eq!(fourth.completed, 1, "{fourth:?}");

    let (deliveries, _) = receiver.records();
    let field = |name: &str| -> Vec<Value> { deliveries.iter().map(|d| d[name].clone()).collect() };
    let step = |n: u32| json!({"step": n});
    assert_eq!(
        field("checkpoint"),
        [Value::Null, step(1), step(2), step(3)],
        "{deliveries:#?}"
    );
    let answers = [
        json!({"checkpoint": step(1)}),
        json!({"checkpoint": step(2), "resume_in": "30s"}),
        json!({"checkpoint": step(3), "wait_for": [key], "timeout": "1h"}),
    ];
    let outcome = json!({"by": "signal", "key": key, "payload": {"paid": true}});
    let answered: Vec<Value> = deliveries.iter().map(|d| d["answer"].clone()).collect();
    assert_eq!(answered[..3], answers, "{deliveries:#?}");
    assert_eq!(answered[3], json!({"outcome": outcome}), "{deliveries:#?}");
    assert_eq!(field("status"), [202, 202, 202, 200]);
    assert_eq!(field("outcome")[3], outcome);
    // A task back from a sleep or a wait is a new znode; the same task by its idempotency key.
    assert_eq!(field("task")[..2], [name.as_str(), name.as_str()]);
    for delivery in &deliveries {
        assert_eq!(
            delivery["attempt"], 1,
            "a suspension counts no attempt: {delivery}"
        );
        assert_eq!(delivery["payload"], payload, "{delivery}");
        assert_eq!(
            delivery["idempotency_key"],
            envelope.id.as_str(),
            "{delivery}"
        );
        assert_eq!(delivery["time_left_ok"], true, "{delivery}");
    }
    let tokens: Vec<u64> = (field("fencing_token").iter())
        .map(|token| token.as_u64().expect("a fencing token"))
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(t.children("tasks").await.is_empty() && t.children("dead").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_packages_webhook_helpers_verify_and_suspend_through_our_consumer() {
    require_python();
    let mut receiver = Command::new(python());
    receiver
        .arg(workspace().join("tests/interop/webhook_receiver.py"))
        .current_dir(installed(""));
    suspends_and_resumes_a_task_through_our_consumer("python", receiver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_packages_webhook_helpers_verify_and_suspend_through_our_consumer() {
    require_node();
    let mut receiver = Command::new("node");
    receiver
        .arg(workspace().join("tests/interop/webhook_receiver.js"))
        .env("NODE_PATH", installed("node/node_modules"))
        .current_dir(installed(""));
    suspends_and_resumes_a_task_through_our_consumer("node", receiver).await;
}

/// The `202` helpers refuse, before anything is sent, what the server would send to the dead
/// letters (tests/sinks' malformed 202): a span without its unit, a wait with no key, more than
/// 16 keys or a key too long for a znode name (200 bytes: a `/` takes three); and they write a
/// span in the largest unit that says it exactly.
#[test]
fn the_202_helpers_refuse_an_answer_the_server_would_not_take() {
    require_python();
    require_node();
    let in_python = r#"
from event_bridge import resume
asks = [lambda: resume.resume_in("10"), lambda: resume.wait_for([], 60),
        lambda: resume.wait_for([str(i) for i in range(17)], 60),
        lambda: resume.wait_for("/" * 67, 60), lambda: resume.resume_in(-1)]
for ask in asks:
    try:
        print("sent", ask().fields)
    except ValueError as e:
        print(e)
print(resume.span(1.5), resume.span(90), resume.span(7 * 86400), resume.span(0))
"#;
    let in_node = r#"
const r = require('event-bridge');
const asks = [() => r.resumeIn('10'), () => r.waitFor([], 60000),
  () => r.waitFor([...Array(17).keys()].map(String), 60000),
  () => r.waitFor('/'.repeat(67), 60000), () => r.resumeIn(-1)];
for (const ask of asks) {
  try { console.log('sent', ask().body); } catch (e) { console.log(e.message); }
}
console.log(r.span(1500), r.span(90000), r.span(7 * 86400000), r.span(0));
"#;
    let mut command = StdCommand::new(python());
    let from_python = lines_of(command.args(["-c", in_python]).current_dir(installed("")));
    let mut command = StdCommand::new("node");
    let from_node = lines_of(command.args(["-e", in_node]).current_dir(installed("node")));
    for lines in [from_python, from_node] {
        let [span, none, many, long, negative, spans] = &lines[..] else {
            panic!("six lines: {lines:#?}");
        };
        assert!(span.contains("\"10\"") || span.contains("'10'"), "{span}");
        assert!(span.contains("is not a span"), "{span}");
        assert_eq!(none, "a wait names no key");
        assert_eq!(many, "a wait names 17 keys, over the 16 it may");
        assert!(long.contains("201 bytes as a znode name"), "{long}");
        assert!(negative.contains("cannot be negative"), "{negative}");
        assert_eq!(spans, "1500ms 90s 7d 0ms");
    }
}
