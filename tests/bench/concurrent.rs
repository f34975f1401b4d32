//! Many invocations, one process: the Lambda binary `process_events` draining a queue with
//! invocations handed out eight at once (`AWS_LAMBDA_MAX_CONCURRENCY=8`, as Lambda Managed
//! Instances does) against one at a time (the variable unset, classic Lambda), under a Runtime
//! API on loopback (`harness::lambda_api`), with the default handler.
//!
//! Each try publishes [`TASKS`] tasks (200 in the smoke run) into a fresh chroot, then starts
//! the binary with [`INVOCATIONS`] drain events of an equal share each
//! (`{"mode":"drain","max_tasks":…}`). Its time runs from the first `invocation/next` (the
//! process's init left out) to the last answer. The two settings alternate which goes first,
//! and each figure is the median of [`ROUNDS`] tries. Printed beside the rates: whether the
//! answers' claims summed to the tasks with `tasks/` empty after (every task claimed once), and
//! how many ZooKeeper sessions the process opened.

use std::process::Stdio;
use std::time::Duration;

use harness::lambda_api::{RuntimeApi, function_command};
use serde_json::{Value, json};

use crate::Result;
use crate::server::{delete_tree, fresh_chroot};

/// Tasks of a try, and the invocations sharing them.
const TASKS: usize = 4_000;
const INVOCATIONS: usize = 16;
/// Invocations at once with the variable set.
const CONCURRENCY: usize = 8;
/// Tries of each setting.
const ROUNDS: usize = 3;

/// One try's figures.
struct Try {
    took: Duration,
    claimed_once: bool,
    sessions: usize,
}

/// Measures and prints both settings.
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let (tasks, rounds) = if smoke { (200, 1) } else { (TASKS, ROUNDS) };
    let (mut eight, mut one) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for turn in 0..2 {
            match (round + turn) % 2 {
                0 => eight.push(drain(addr, tasks, CONCURRENCY).await?),
                _ => one.push(drain(addr, tasks, 1).await?),
            }
        }
    }
    let rate = |tries: &mut Vec<Try>| {
        tries.sort_by_key(|t| t.took);
        tasks as f64 / tries[tries.len() / 2].took.as_secs_f64()
    };
    let (at_once, in_turn) = (rate(&mut eight), rate(&mut one));
    let once = eight.iter().chain(&one).all(|t| t.claimed_once);
    let sessions = |tries: &[Try]| tries.iter().map(|t| t.sessions).max().unwrap_or(0);
    println!();
    println!(
        "concurrent invocations: process_events (Lambda binary) draining {tasks} tasks with \
         {INVOCATIONS} invocations (median of {rounds} alternating tries, init left out):"
    );
    println!(
        "  {CONCURRENCY} at once (AWS_LAMBDA_MAX_CONCURRENCY={CONCURRENCY}) {at_once:>8.0} \
         tasks/s, sessions opened {}",
        sessions(&eight)
    );
    println!(
        "  one at a time (unset)            {in_turn:>8.0} tasks/s, sessions opened {}",
        sessions(&one)
    );
    println!(
        "  {CONCURRENCY} at once / one at a time: {:.2}x; every task claimed once, tasks/ empty \
         after: {once}",
        at_once / in_turn
    );
    Ok(())
}

/// One try: `tasks` published, drained by [`INVOCATIONS`] invocations, `concurrency` at once.
async fn drain(addr: &str, tasks: usize, concurrency: usize) -> Result<Try> {
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let client = event_bridge::session::connect(&config).await?;
    let queue = event_bridge::Queue::new(client.clone(), &config, "bench-concurrent");
    queue.ensure_paths().await?;
    let envelopes: Vec<_> = (0..tasks).map(crate::envelope).collect();
    for chunk in envelopes.chunks(1_000) {
        queue.publish_many(chunk).await?;
    }
    let share = tasks.div_ceil(INVOCATIONS);
    let ids: Vec<String> = (0..INVOCATIONS).map(|i| format!("drain-{i}")).collect();
    let event = json!({"mode": "drain", "max_tasks": share});
    let events = ids.iter().map(|id| (id.as_str(), event.clone())).collect();
    let mut api = RuntimeApi::start_gated(events, concurrency).await?;
    let log_path = std::env::temp_dir().join(format!("bench-concurrent-{}.log", fastrand::u64(..)));
    let log = std::fs::File::create(&log_path)?;
    let mut command = function_command("process_events", &api, &config);
    if concurrency > 1 {
        command.env("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.to_string());
    }
    let mut function = command
        .env("RUST_LOG", "event_bridge::session=debug,warn")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let answered = answers(&mut api).await;
    let _ = function.kill().await;
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let (took, reports) = answered?;
    let claimed: u64 = (reports.iter())
        .map(|r| r["claimed"].as_u64().unwrap_or(0))
        .sum();
    let left = client.list_children(&queue.layout().tasks()).await?;
    delete_tree(&admin, &chroot).await?;
    Ok(Try {
        took,
        claimed_once: claimed == tasks as u64 && left.is_empty(),
        sessions: logs.matches("zookeeper session opened").count(),
    })
}

/// From the first `next` to the last of [`INVOCATIONS`] answers, and the answers (each
/// invocation's summary). A hang guard of ten minutes.
async fn answers(api: &mut RuntimeApi) -> Result<(Duration, Vec<Value>)> {
    let mut first = None;
    let mut reports = Vec::new();
    let collect = async {
        while let Some(request) = api.requests.recv().await {
            if request.is_next() {
                first.get_or_insert(request.at);
            } else if request.is_post() {
                reports.push(serde_json::from_slice::<Value>(&request.body)?);
                if reports.len() == INVOCATIONS {
                    let began = first.unwrap_or(request.at);
                    return Ok::<_, Box<dyn std::error::Error>>(request.at - began);
                }
            }
        }
        Err("the Runtime API closed".into())
    };
    let took = tokio::time::timeout(Duration::from_secs(600), collect)
        .await
        .map_err(|_| "the invocations did not all answer within ten minutes")??;
    Ok((took, reports))
}
