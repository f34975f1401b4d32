//! The deploy files agree with what the workspace builds: the SAM template lints and names
//! the Lambda binaries, every Vercel cron reaches a Vercel binary the way Vercel's Rust
//! builder finds it, and `cargo lambda invoke` drains through the Lambda binary, served by
//! cargo-lambda's Runtime API emulator (`cargo lambda watch --only-lambda-apis`). The binary
//! is the one `make test` built: letting `watch` build it would compile the workspace again
//! with the function's own features (minutes); `make deploy-check` builds the functions in
//! release, as `sam build` does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use event_bridge::Config;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::time::timeout;

use harness::{TestQueue, workspace_root};

#[test]
fn cfn_lint_passes_on_the_sam_template() {
    let output = Command::new("cfn-lint")
        .arg("template.yaml")
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|e| {
            panic!("cfn-lint is not installed ({e}): run `make tools` (pip install cfn-lint)")
        });
    assert!(
        output.status.success(),
        "cfn-lint template.yaml:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `sam build` runs `make build-<Function>` for each function of template.yaml (BuildMethod
/// makefile): each such target of the Makefile builds one Lambda binary with
/// scripts/lambda-build.sh, and together they build every Lambda binary of the workspace, for
/// the template's architecture.
#[test]
fn sam_template_builds_every_lambda_binary() {
    let root = workspace_root();
    let template = std::fs::read_to_string(root.join("template.yaml")).expect("template.yaml");
    let makefile = std::fs::read_to_string(root.join("Makefile")).expect("Makefile");
    let functions = sam_functions(&template);
    assert_eq!(
        functions,
        ["ProcessEventsFunction", "ReapLeasesFunction"],
        "template.yaml's functions"
    );
    let methods: Vec<String> = yaml_values(&template, "BuildMethod").collect();
    assert_eq!(
        methods,
        vec!["makefile"; functions.len()],
        "one make target per function"
    );

    let built: BTreeSet<String> = (functions.iter())
        .map(|f| {
            make_target_lambda_bin(&makefile, &format!("build-{f}")).unwrap_or_else(|| {
                panic!("the Makefile's build-{f} runs no scripts/lambda-build.sh")
            })
        })
        .collect();
    let lambda_bins: BTreeSet<String> = bins()
        .into_iter()
        .filter(|b| !b.in_api())
        .map(|b| b.name)
        .collect();
    assert_eq!(
        lambda_bins,
        BTreeSet::from(["process_events".into(), "reap_leases".into()])
    );
    assert_eq!(built, lambda_bins, "the binaries the make targets build");

    let script = std::fs::read_to_string(root.join("scripts/lambda-build.sh")).unwrap();
    let architectures: Vec<String> = yaml_values(&template, "Architectures").collect();
    assert_eq!(architectures, ["[x86_64]"], "template.yaml's Globals");
    assert!(
        script.contains("target=x86_64-unknown-linux-gnu"),
        "scripts/lambda-build.sh builds for the template's architecture"
    );
}

/// The logical names of template.yaml's `AWS::Serverless::Function` resources, in order.
fn sam_functions(template: &str) -> Vec<String> {
    let lines: Vec<&str> = template.lines().collect();
    (lines.windows(2))
        .filter(|w| w[1].trim() == "Type: AWS::Serverless::Function")
        .filter_map(|w| Some(w[0].trim().strip_suffix(':')?.to_string()))
        .collect()
}

/// The binary the recipe of the Makefile's `target` builds with scripts/lambda-build.sh.
fn make_target_lambda_bin(makefile: &str, target: &str) -> Option<String> {
    let mut lines = makefile
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{target}:")));
    lines.next()?;
    let recipe = lines
        .take_while(|l| l.starts_with('\t'))
        .collect::<Vec<_>>()
        .join("\n");
    let after = recipe.split("scripts/lambda-build.sh ").nth(1)?;
    Some(after.split_whitespace().next()?.to_string())
}

/// Vercel's Rust builder, for an entry `api/x.rs`: runs `cargo locate-project` in `api/`,
/// looks in that manifest for a `[[bin]]` with the entry's path, else takes the file name
/// (`x`) as the binary's name; then `cargo build --bin x` at the project root.
#[test]
fn every_vercel_cron_reaches_a_vercel_binary() {
    let root = workspace_root();
    let vercel: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("vercel.json")).expect("vercel.json"),
    )
    .expect("vercel.json is JSON");
    let crons = vercel["crons"].as_array().expect("crons");
    let manifest = located_manifest(&root.join("api"));
    let bins = bins();

    let mut reached = BTreeSet::new();
    for cron in crons {
        let path = cron["path"].as_str().expect("cron path");
        let path = path.split('?').next().unwrap();
        let entry = root.join(format!("{}.rs", path.trim_start_matches('/')));
        assert!(
            path.starts_with("/api/") && entry.is_file(),
            "cron {path}: no entry file {}",
            entry.display()
        );
        assert!(
            !manifest.contains("[[bin]]"),
            "{} declares binaries: the builder would look there first; revisit this test",
            manifest
        );
        let name = entry.file_stem().unwrap().to_str().unwrap();
        let matching: Vec<&Bin> = bins.iter().filter(|b| b.name == name).collect();
        assert_eq!(
            matching.len(),
            1,
            "cron {path}: `cargo build --bin {name}` needs exactly one such binary"
        );
        assert_eq!(
            matching[0].src_path,
            entry.canonicalize().unwrap(),
            "cron {path}: bin {name} is built from another file"
        );
        assert!(
            matching[0].uses_vercel_runtime,
            "cron {path}: bin {name}'s package lacks vercel_runtime"
        );
        reached.insert(name.to_string());
    }
    let vercel_bins: BTreeSet<String> = bins
        .iter()
        .filter(|b| b.in_api())
        .map(|b| b.name.clone())
        .collect();
    assert_eq!(reached, vercel_bins, "every Vercel function has a cron");
    for key in vercel["functions"].as_object().expect("functions").keys() {
        assert!(
            root.join(key).is_file(),
            "vercel.json functions: {key} does not exist"
        );
    }
}

/// The manifest `cargo locate-project` finds from `dir`, as text.
fn located_manifest(dir: &Path) -> String {
    let output = cargo()
        .arg("locate-project")
        .current_dir(dir)
        .output()
        .expect("cargo locate-project");
    let located: Value =
        serde_json::from_slice(&output.stdout).expect("locate-project prints JSON");
    std::fs::read_to_string(located["root"].as_str().expect("root")).expect("read manifest")
}

/// One `[[bin]]` of the workspace.
struct Bin {
    name: String,
    src_path: PathBuf,
    uses_vercel_runtime: bool,
}

impl Bin {
    /// Whether Vercel sees it: its entry file is under `api/`.
    fn in_api(&self) -> bool {
        self.src_path
            .starts_with(workspace_root().join("api").canonicalize().unwrap())
    }
}

/// The binaries of the function packages (those under `functions/`), from `cargo metadata`.
fn bins() -> Vec<Bin> {
    let output = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata");
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let functions = workspace_root().join("functions");
    let mut bins = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        if !Path::new(package["manifest_path"].as_str().unwrap()).starts_with(&functions) {
            continue;
        }
        let deps = package["dependencies"].as_array().unwrap();
        let uses_vercel_runtime = deps
            .iter()
            .any(|d| d["name"] == "vercel_runtime" && d["kind"].is_null());
        for target in package["targets"].as_array().unwrap() {
            if target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "bin")
            {
                bins.push(Bin {
                    name: target["name"].as_str().unwrap().to_string(),
                    src_path: PathBuf::from(target["src_path"].as_str().unwrap())
                        .canonicalize()
                        .unwrap(),
                    uses_vercel_runtime,
                });
            }
        }
    }
    bins
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The values of every `key: value` line of a YAML text (enough for SAM's `Binary:` lines).
fn yaml_values<'a>(text: &'a str, key: &'a str) -> impl Iterator<Item = String> + 'a {
    text.lines().filter_map(move |line| {
        let (k, v) = line.trim().split_once(':')?;
        (k == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

#[tokio::test]
async fn cargo_lambda_invoke_drains_through_the_lambda_binary() {
    let tq = TestQueue::new().await;
    tq.publish(3).await;
    let port = free_port();
    let mut watch = Watch::start(port);
    wait_for_port(port, &mut watch).await;
    let mut function = Function::start(&tq.config, port);

    let invoke = tokio::process::Command::new("cargo")
        .args([
            "lambda",
            "invoke",
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
        ])
        .arg(port.to_string())
        .args(["--data-file", "events/drain.json", "process_events"])
        .current_dir(workspace_root())
        .kill_on_drop(true)
        .output();
    // A hang guard. A function that cannot start ends the wait at once: the invoke itself
    // would wait for it until the timeout.
    let output = tokio::select! {
        output = timeout(INVOKE_TIMEOUT, invoke) => output,
        exit = function.exit() => panic!("the function exited ({exit}); its log:\n{}", function.stop()),
    };
    let function_log = function.stop();
    let log = watch.stop();
    assert_eq!(
        watch.left_running,
        Vec::<u32>::new(),
        "processes left running after watch stopped"
    );
    let output = output.unwrap_or_else(|_| {
        panic!("cargo lambda invoke hung; watch log:\n{log}\nfunction log:\n{function_log}")
    });
    let output = output.expect("cargo lambda is installed (make tools)");

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "invoke failed: {}\n{stdout}\nwatch log:\n{log}\nfunction log:\n{function_log}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["completed"], 3, "{report}");
    assert!(tq.children("tasks").await.is_empty());
}

/// Kicks on Lambda: a publish with `EVENT_BRIDGE_KICK_URL=lambda:process_events` invokes the
/// Lambda binary through cargo lambda's emulator, whose Invoke API stands in for Lambda's
/// (`AWS_ENDPOINT_URL_LAMBDA`): the drain runs the task with no cron tick, and clears the kick
/// node.
#[tokio::test]
async fn a_kick_through_cargo_lambdas_invoke_api_drains_through_the_lambda_binary() {
    let tq = TestQueue::new().await;
    let port = free_port();
    let mut watch = Watch::start(port);
    wait_for_port(port, &mut watch).await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let kicks = [
        ("EVENT_BRIDGE_KICK", "on"),
        ("EVENT_BRIDGE_KICK_URL", "lambda:process_events"),
        ("AWS_ENDPOINT_URL_LAMBDA", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("KICK_LINGER_MS", "0"),
    ];
    let mut function = Function::start_with(&tq.config, port, &kicks);

    let publish = tokio::process::Command::new(harness::binary("event-bridge"))
        .args(["publish", "--type", "user.signup", "--payload", "{}"])
        .env("ZOOKEEPER_CONNECTION_STRING", &tq.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &tq.config.root)
        .envs(kicks)
        .env("KICK_WAIT_MS", "60000")
        .env("RUST_LOG", "event_bridge::kick=debug,warn")
        .kill_on_drop(true)
        .output();
    let published = tokio::select! {
        output = timeout(INVOKE_TIMEOUT, publish) => output,
        exit = function.exit() => panic!("the function exited ({exit}); its log:\n{}", function.stop()),
    };
    let drained = timeout(INVOKE_TIMEOUT, async {
        let mut tries = harness::Tries::within(INVOKE_TIMEOUT);
        while tries.again().await {
            if tq.children("tasks").await.is_empty() {
                return true;
            }
        }
        false
    })
    .await;
    let function_log = function.stop();
    let log = watch.stop();
    let published = published
        .expect("the publish returned (a hang guard)")
        .expect("run event-bridge publish");
    let stderr = String::from_utf8_lossy(&published.stderr);
    assert!(published.status.success(), "publish failed: {stderr}");
    assert!(
        stderr.contains("drain kicked"),
        "the publish kicked: {stderr}\nwatch log:\n{log}\nfunction log:\n{function_log}"
    );
    assert_eq!(
        drained,
        Ok(true),
        "the kicked drain ran the task\nwatch log:\n{log}\nfunction log:\n{function_log}"
    );
    let node = tq.raw.check_stat(&tq.queue.layout().kick()).await.unwrap();
    assert!(node.is_none(), "the drain cleared the kick node");
}

/// `cargo lambda watch --only-lambda-apis` (the Runtime API emulator, starting no function)
/// in a process group of its own. [`Watch::stop`] ends it and everything it started; dropping
/// it without stopping does the same.
struct Watch {
    child: std::process::Child,
    log: PathBuf,
    stopped: bool,
    /// What [`Watch::stop`] could not end (should stay empty).
    left_running: Vec<u32>,
}

impl Watch {
    fn start(port: u16) -> Self {
        use std::os::unix::process::CommandExt;
        let log = std::env::temp_dir().join(format!("cargo-lambda-watch-{port}.log"));
        let file = std::fs::File::create(&log).expect("watch log");
        let child = std::process::Command::new("cargo")
            .args([
                "lambda",
                "watch",
                "--only-lambda-apis",
                "--invoke-address",
                "127.0.0.1",
                "--invoke-port",
            ])
            .arg(port.to_string())
            .env_remove("CARGO_MANIFEST_DIR")
            .current_dir(workspace_root())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .process_group(0)
            .spawn()
            .expect("cargo lambda is installed (make tools)");
        Watch {
            child,
            log,
            stopped: false,
            left_running: Vec::new(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM to the group, then SIGKILL to anything it started that is still there.
    /// Returns the log.
    fn stop(&mut self) -> String {
        if self.stopped {
            return self.log();
        }
        self.stopped = true;
        let pid = self.child.id();
        let started = descendants(pid);
        signal("TERM", &format!("-{pid}"));
        let exited = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !exited {
            signal("KILL", &format!("-{pid}"));
            let _ = self.child.wait();
        }
        for pid in started.iter().filter(|p| alive(**p)) {
            signal("KILL", &pid.to_string());
        }
        let gone = (0..50).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            started.iter().all(|p| !alive(*p))
        });
        if !gone {
            self.left_running = started.into_iter().filter(|p| alive(*p)).collect();
        }
        let log = self.log();
        let _ = std::fs::remove_file(&self.log);
        log
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The Lambda binary `process_events`, as Lambda starts it: the Runtime API's address (the
/// emulator's, by the function's name) and the function's variables, with the test's
/// ZooKeeper chroot.
struct Function {
    child: tokio::process::Child,
    log: PathBuf,
}

impl Function {
    fn start(config: &Config, port: u16) -> Self {
        Self::start_with(config, port, &[])
    }

    /// As [`Function::start`], with `env` besides.
    fn start_with(config: &Config, port: u16, env: &[(&str, &str)]) -> Self {
        let log = std::env::temp_dir().join(format!("process-events-{port}.log"));
        let file = std::fs::File::create(&log).expect("function log");
        let api = format!("http://127.0.0.1:{port}/.rt/process_events");
        let child = tokio::process::Command::new(harness::binary("process_events"))
            .env("AWS_LAMBDA_RUNTIME_API", api)
            .env("AWS_LAMBDA_FUNCTION_NAME", "process_events")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("ZOOKEEPER_CONNECTION_STRING", &config.zookeeper)
            .env("EVENT_BRIDGE_ROOT", &config.root)
            .envs(env.iter().copied())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("start process_events");
        Function { child, log }
    }

    /// Returns once the function exited, with its status (it should not, while invoked).
    async fn exit(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }

    /// Kills it; returns its log.
    fn stop(&mut self) -> String {
        let _ = self.child.start_kill();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        log
    }
}

/// How long an invoke may take: a hang guard.
const INVOKE_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until `cargo lambda watch` accepts connections, or fails with its log if it exits.
async fn wait_for_port(port: u16, watch: &mut Watch) {
    let mut tries = harness::Tries::within(Duration::from_secs(120));
    while tries.again().await {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        if let Ok(Some(status)) = watch.child.try_wait() {
            panic!("cargo lambda watch exited ({status}):\n{}", watch.log());
        }
    }
    panic!("cargo lambda watch listens: not within 120 s");
}

fn signal(name: &str, target: &str) {
    let _ = std::process::Command::new("kill")
        .args([&format!("-{name}"), "--", target])
        .status();
}

/// Processes started by `pid`, directly or not (read from /proc).
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The fields after the parenthesised command: state, then the parent's pid.
            let parent = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether `pid` is running (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}
