//! Cold start of the Lambda binary: `process_events` (release) started under a Runtime API on
//! loopback (`harness::lambda_api`) with one scheduled event on an empty queue, against a
//! `lambda_runtime` hello world (`tests/deploy/panic_probe`, which echoes its event) built in
//! the same run with the workspace's Cargo.lock and release profile. Rounds alternate which
//! goes first; each figure is the median:
//!
//! - init: from the spawn to the runtime's first `invocation/next` (what Lambda bills as init);
//! - first response: from the spawn to the event's response posted;
//! - peak RSS: the process's `VmHWM` once it asks for the second event.
//!
//! `process_events` connects to the bench's ZooKeeper on loopback, so its figures include a
//! few round trips to it; the section prints the median read and write of that ZooKeeper
//! beside them.
//!
//! `process_events` is built with its default features, `otel` among them, and started without
//! an OTLP endpoint: traces built in and switched off. `make bench` also builds it without
//! `otel` (into `target/bench-no-otel`) and starts both in turn, so the row says what the
//! feature costs a cold start when it is off. (The smoke run, under `cargo test`, skips that
//! build: it would be a second build of every dependency.)

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness::lambda_api::{RuntimeApi, copy_probe, function_env};
use serde_json::json;
use tokio::time::Instant;

use crate::Result;
use crate::server::{delete_tree, fresh_chroot};

/// Starts of each binary (`BENCH_COLD_ROUNDS`, default 7).
fn rounds() -> usize {
    std::env::var("BENCH_COLD_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7)
}

/// One start's figures.
#[derive(Clone, Copy)]
struct Start {
    init: Duration,
    response: Duration,
    peak_kb: u64,
}

/// Measures and prints both binaries' cold starts.
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let process_events = harness::binary("process_events");
    let hello = hello_world(smoke).await?;
    let plain = match smoke {
        true => None,
        false => Some(without_otel().await?),
    };
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let env = [
        ("ZOOKEEPER_CONNECTION_STRING", config.zookeeper.clone()),
        ("EVENT_BRIDGE_ROOT", config.root.clone()),
    ];
    let rounds = if smoke { 1 } else { rounds() };
    let (mut ours, mut theirs, mut plains) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Who goes first turns round each round.
        for turn in 0..3 {
            match (round + turn) % 3 {
                0 => ours.push(start(&process_events, &env).await?),
                1 => theirs.push(start(&hello, &[]).await?),
                _ => {
                    if let Some(plain) = &plain {
                        plains.push(start(plain, &env).await?);
                    }
                }
            }
        }
    }
    let trips = round_trips(addr).await?;
    delete_tree(&admin, &chroot).await?;
    print(&median(&ours), &median(&theirs), trips, rounds);
    if !plains.is_empty() {
        print_otel_off(&median(&ours), &median(&plains));
    }
    Ok(())
}

/// What `otel` built in and switched off costs a cold start.
fn print_otel_off(ours: &Start, plain: &Start) {
    let ms = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1000.0;
    println!(
        "  process_events without otel: init {:.1}ms, first response {:.1}ms, peak RSS {:.1}MB; \
         with otel built in, switched off: init {:+.2} ms, first response {:+.2} ms, RSS {:+.1} MB",
        plain.init.as_secs_f64() * 1000.0,
        plain.response.as_secs_f64() * 1000.0,
        plain.peak_kb as f64 / 1024.0,
        ms(ours.init, plain.init),
        ms(ours.response, plain.response),
        (ours.peak_kb as f64 - plain.peak_kb as f64) / 1024.0
    );
}

/// Builds `process_events` (release) without feature `otel` into `target/bench-no-otel`; its
/// binary's path.
async fn without_otel() -> Result<PathBuf> {
    let root = harness::workspace_root();
    let dir = root.join("target/bench-no-otel");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = tokio::process::Command::new(cargo)
        .args(["build", "--quiet", "--release", "-p", "process_events"])
        .args([
            "--bin",
            "process_events",
            "--no-default-features",
            "--features",
            "lambda",
        ])
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", &dir)
        .env_remove("CARGO_MANIFEST_DIR")
        .status()
        .await?;
    if !built.success() {
        return Err("building process_events without feature otel failed".into());
    }
    Ok(dir.join("release/process_events"))
}

fn print(ours: &Start, hello: &Start, (read, write): (Duration, Duration), rounds: usize) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!();
    println!(
        "cold start under a Runtime API on loopback, one scheduled event on an empty queue \
         (median of {rounds} alternating starts; on this ZooKeeper a read takes {:.2} ms, a \
         write {:.2} ms):",
        ms(read),
        ms(write)
    );
    println!(
        "  {:<22} {:>8} {:>15} {:>9}",
        "", "init", "first response", "peak RSS"
    );
    for (name, s) in [("process_events", ours), ("lambda_runtime hello", hello)] {
        println!(
            "  {name:<22} {:>6.1}ms {:>13.1}ms {:>7.1}MB",
            ms(s.init),
            ms(s.response),
            mb(s.peak_kb)
        );
    }
    println!(
        "  process_events - hello: init +{:.1} ms, first response +{:.1} ms ({:.1} reads), RSS +{:.1} MB",
        ms(ours.init.saturating_sub(hello.init)),
        ms(ours.response.saturating_sub(hello.response)),
        ours.response.saturating_sub(hello.response).as_secs_f64() / read.as_secs_f64(),
        mb(ours.peak_kb.saturating_sub(hello.peak_kb))
    );
}

/// Starts `bin` under a fresh Runtime API with one scheduled event, and measures it.
async fn start(bin: &Path, env: &[(&str, String)]) -> Result<Start> {
    let event = json!({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}});
    let mut api = RuntimeApi::start(vec![("cold-1", event)]).await?;
    let spawned = Instant::now();
    let mut child = tokio::process::Command::new(bin)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.address)
        .envs(function_env("coldstart"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("the started binary has no pid")?;
    let (mut init, mut response) = (None, None);
    while let Some(request) = tokio::time::timeout(Duration::from_secs(30), api.requests.recv())
        .await
        .map_err(|_| format!("{} answered nothing within 30 s", bin.display()))?
    {
        match (request.is_next(), init) {
            (true, None) => init = Some(request.at - spawned),
            (true, Some(_)) => break,
            (false, _) if request.is_post() => {
                if !request.path.ends_with("/response") {
                    let body = String::from_utf8_lossy(&request.body).into_owned();
                    return Err(format!("{} failed the event: {body}", bin.display()).into());
                }
                response = Some(request.at - spawned);
            }
            _ => {}
        }
    }
    let peak_kb = peak_kb(pid)?;
    child.kill().await?;
    Ok(Start {
        init: init.ok_or("no invocation/next")?,
        response: response.ok_or("no response posted")?,
        peak_kb,
    })
}

/// The process's peak resident set (`VmHWM`, counted from its `exec`), in KiB.
fn peak_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM in /proc/<pid>/status")?;
    let kb = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim();
    Ok(kb.parse()?)
}

/// The median time of a read (an `exists`) and of a write (a `setData`, which ZooKeeper logs
/// to disk before it answers) on an open session.
async fn round_trips(addr: &str) -> Result<(Duration, Duration)> {
    let client = crate::server::admin_client(addr).await?;
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        let began = Instant::now();
        client.check_stat("/").await?;
        reads.push(began.elapsed());
        let began = Instant::now();
        client.set_data(crate::BENCH_ROOT, b"", None).await?;
        writes.push(began.elapsed());
    }
    Ok((mid(reads), mid(writes)))
}

fn mid(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn median(starts: &[Start]) -> Start {
    let mut peaks: Vec<u64> = starts.iter().map(|s| s.peak_kb).collect();
    peaks.sort_unstable();
    Start {
        init: mid(starts.iter().map(|s| s.init).collect()),
        response: mid(starts.iter().map(|s| s.response).collect()),
        peak_kb: peaks[peaks.len() / 2],
    }
}

/// Builds the hello world (`tests/deploy/panic_probe`) with the workspace's Cargo.lock into
/// `target/hello-lambda`, with the cargo that runs the bench (release, but a debug build for
/// the smoke run, as its `process_events` is); its binary's path.
async fn hello_world(smoke: bool) -> Result<PathBuf> {
    let dir = harness::workspace_root().join("target/hello-lambda");
    copy_probe(&dir, |manifest| manifest)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let profile = if smoke { "debug" } else { "release" };
    let built = tokio::process::Command::new(cargo)
        .args(["build", "--quiet"])
        .args((!smoke).then_some("--release"))
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("CARGO_MANIFEST_DIR")
        .status()
        .await?;
    if !built.success() {
        return Err(
            "building the lambda_runtime hello world (tests/deploy/panic_probe) failed".into(),
        );
    }
    Ok(dir.join("target").join(profile).join("panic_probe"))
}
