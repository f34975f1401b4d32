//! A panic in a Lambda handler must reach the Lambda Runtime API as an error of that
//! invocation, with the runtime still running: that needs unwinding panics. So the workspace's
//! `[profile.release]` says `panic = "unwind"`: `sam build` builds with it as written
//! (scripts/lambda-build.sh, a plain `cargo zigbuild --release`), and cargo-lambda
//! (`cargo lambda build`, `watch`), which injects `panic = "abort"` into release builds whose
//! profile names no strategy, keeps it too.
//!
//! The functions have no handler that panics, so `tests/deploy/panic_probe` is a tiny Lambda
//! function (not a workspace member) that panics on request. It must use the workspace's
//! release profile (checked here, cheaply, in `make test`). The slow checks build a copy of it
//! with scripts/lambda-build.sh, as `sam build` builds the functions, and run the `bootstrap`
//! against a Lambda Runtime API served by the test on loopback. They are `#[ignore]`d and run
//! by `make deploy-check` (`cargo test --workspace --test deploy -- --ignored`).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use harness::lambda_api::{NEXT, Request, RuntimeApi, copy_probe, function_env};
use harness::workspace_root;

#[test]
fn the_panic_probe_builds_with_the_workspace_release_profile() {
    let workspace = release_profile(&read(&workspace_root().join("Cargo.toml")));
    assert_eq!(
        workspace.get("panic").map(String::as_str),
        Some("\"unwind\""),
        "the workspace's [profile.release] must say panic = \"unwind\": a panicking handler \
         kills the runtime otherwise (and cargo-lambda makes release builds abort when it is unset)"
    );
    let probe = release_profile(&read(&probe_dir().join("Cargo.toml")));
    assert_eq!(
        probe, workspace,
        "tests/deploy/panic_probe/Cargo.toml's [profile.release] must equal the workspace's"
    );
}

#[tokio::test]
#[ignore = "release-builds a Lambda binary as sam build does (a minute or two): make deploy-check runs it"]
async fn a_panicking_handler_is_reported_as_an_error_and_the_runtime_goes_on() {
    let bootstrap = build_probe("unwind", None).await;
    let run = run_probe(
        &bootstrap,
        vec![
            ("req-panic", json!({"panic": "probe handler panicked"})),
            ("req-echo", json!({"n": 1})),
        ],
    )
    .await;

    assert_eq!(
        run.exit, None,
        "the runtime died instead of reporting the panic; requests: {:?}\nlog:\n{}",
        run.requests, run.log
    );
    let posts: Vec<&Request> = run.requests.iter().filter(|r| r.method == "POST").collect();
    assert_eq!(
        posts.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        vec![
            "/2018-06-01/runtime/invocation/req-panic/error",
            "/2018-06-01/runtime/invocation/req-echo/response",
        ],
        "log:\n{}",
        run.log
    );
    let error: Value = serde_json::from_slice(&posts[0].body).expect("the error is JSON");
    assert!(
        error["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("probe handler panicked")),
        "error body: {error}"
    );
    let response: Value = serde_json::from_slice(&posts[1].body).expect("the response is JSON");
    assert_eq!(response, json!({"echoed": {"n": 1}}));
    let nexts = run.requests.iter().filter(|r| r.path == NEXT).count();
    assert_eq!(
        nexts, 3,
        "asked for a third event after the two: {:?}",
        run.requests
    );
}

/// The check above can fail: the same probe with `panic = "abort"` (what cargo-lambda injects
/// when the profile names no strategy) dies on the panic, and no error is ever posted. Built
/// unoptimized (`opt-level = 0`: how a panic ends does not depend on it), which halves the
/// CPU its build of the dependencies takes.
#[tokio::test]
#[ignore = "release-builds a Lambda binary as sam build does (a minute or two): make deploy-check runs it"]
async fn with_panic_abort_the_same_panic_kills_the_runtime() {
    let bootstrap = build_probe("abort", Some("abort")).await;
    let run = run_probe(
        &bootstrap,
        vec![
            ("req-panic", json!({"panic": "probe handler panicked"})),
            ("req-echo", json!({"n": 1})),
        ],
    )
    .await;

    let exit = run.exit.unwrap_or_else(|| {
        panic!(
            "with panic = \"abort\" the runtime survived; requests: {:?}",
            run.requests
        )
    });
    assert_eq!(
        exit.signal(),
        Some(libc::SIGABRT),
        "{exit}\nlog:\n{}",
        run.log
    );
    assert!(
        run.requests.iter().all(|r| r.method != "POST"),
        "nothing is reported: {:?}",
        run.requests
    );
}

fn probe_dir() -> PathBuf {
    workspace_root().join("tests/deploy/panic_probe")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `key = value` lines of a manifest's `[profile.release]` table, values as written.
fn release_profile(manifest: &str) -> BTreeMap<String, String> {
    manifest
        .lines()
        .map(str::trim)
        .skip_while(|line| *line != "[profile.release]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            Some((key.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Copies the probe to `target/panic-probe/<variant>` with the workspace's Cargo.lock (same
/// lambda_runtime and tokio as the functions), optionally with another panic strategy (then
/// unoptimized), builds it with scripts/lambda-build.sh (as `sam build` builds the functions)
/// and returns its `bootstrap`.
async fn build_probe(variant: &str, panic_strategy: Option<&str>) -> PathBuf {
    let root = workspace_root();
    let dir = root.join("target/panic-probe").join(variant);
    copy_probe(&dir, |manifest| match panic_strategy {
        None => manifest,
        Some(strategy) => {
            let line = "panic = \"unwind\"";
            assert!(manifest.contains(line), "the probe's manifest has {line}");
            manifest.replace(line, &format!("panic = \"{strategy}\"\nopt-level = 0"))
        }
    })
    .expect("probe copy");

    let out = dir.join("lambda");
    let build = tokio::process::Command::new(root.join("scripts/lambda-build.sh"))
        .arg("panic_probe")
        .arg(&out)
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("CARGO_MANIFEST_DIR")
        // Built as `sam build` builds: not through make test's lint wrapper (scripts/lint-env.sh).
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(1200), build)
        .await
        .expect("scripts/lambda-build.sh hung")
        .expect("scripts/lambda-build.sh runs");
    assert!(
        output.status.success(),
        "scripts/lambda-build.sh panic_probe ({variant}):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bootstrap = out.join("bootstrap");
    assert!(bootstrap.is_file(), "no {}", bootstrap.display());
    bootstrap
}

/// What a run of the probe did.
struct Run {
    requests: Vec<Request>,
    /// `None`: still running, asking for the event after the last one given.
    exit: Option<ExitStatus>,
    log: String,
}

/// Runs `bootstrap` against a Runtime API that hands out `events` in order. Stops when the
/// runtime asks for an event after the last (it survived everything), when it exits, or after
/// a minute.
async fn run_probe(bootstrap: &Path, events: Vec<(&str, Value)>) -> Run {
    let given = events.len();
    let mut api = RuntimeApi::start(events).await.expect("runtime api");

    let log_path = bootstrap.with_file_name("run.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut child = tokio::process::Command::new(bootstrap)
        .env("AWS_LAMBDA_RUNTIME_API", &api.address)
        .envs(function_env("panic_probe"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start bootstrap");

    let mut seen = Vec::new();
    let watched = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            tokio::select! {
                status = child.wait() => return Some(status.expect("wait")),
                request = api.requests.recv() => {
                    let request = request?;
                    let asks_past_the_last =
                        request.path == NEXT && seen.iter().filter(|r: &&Request| r.path == NEXT).count() == given;
                    seen.push(request);
                    if asks_past_the_last {
                        return None;
                    }
                }
            }
        }
    })
    .await;
    let mut exit = watched.unwrap_or_else(|_| {
        panic!(
            "the probe neither finished nor died within a minute; requests: {seen:?}\nlog:\n{}",
            read(&log_path)
        )
    });
    if exit.is_none() {
        // Give a runtime about to die the chance to show it (300 ms at most).
        let dying = tokio::time::timeout(Duration::from_millis(300), child.wait()).await;
        exit = dying.ok().map(|status| status.expect("wait"));
    }
    let _ = child.kill().await;
    while let Ok(request) = api.requests.try_recv() {
        seen.push(request);
    }
    Run {
        requests: seen,
        exit,
        log: read(&log_path),
    }
}
