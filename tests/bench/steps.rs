//! A resumable task's step write against its step number (issue 47, item 4): one task runs
//! 10 000 steps in one run, and at steps 10, 100, 1 000 and 10 000 the bench reads what the
//! step's checkpoint wrote, from ZooKeeper's own sizes (`dataLength`): the task's body it
//! rewrote, the step znode it created, the lease it extended. Its time is the `step` call's
//! (the step's work is nothing, so it is the multi-op's round trip), the median of the ten
//! steps ending at that one, and of that the median over [`REPEATS`] such tasks (a server's
//! fsync stalls a few writes now and then, whatever their step number). Target: the last
//! step at most 1.2 times the 10th, in bytes and in time. Beside it, what a later run pays
//! once to resume: the claim's read-back of the stored steps (time from the run's start until
//! the handler is called), at 10 and 10 000 steps: it is one read per stored write, so it
//! grows with the steps.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_bridge::handler::FnHandler;
use event_bridge::{Envelope, Queue, RunOptions, Task, process};
use serde_json::json;
use zookeeper_client as zk;

use crate::Result;
use crate::server::{close, delete_tree, fresh_chroot};

/// Tasks stepped through, one after the other; each mark's time is the median over them.
const REPEATS: usize = 3;

/// What one measured step wrote, and how long its `step` call took.
#[derive(Clone, Copy, Debug, Default)]
struct Written {
    step: usize,
    body: usize,
    chunk: usize,
    lease: usize,
    took: Duration,
}

impl Written {
    fn bytes(&self) -> usize {
        self.body + self.chunk + self.lease
    }
}

/// Runs the section: 10 000 steps (100 in the smoke run).
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let marks: &[usize] = if smoke {
        &[10, 100]
    } else {
        &[10, 100, 1_000, 10_000]
    };
    let (admin, chroot, config) = fresh_chroot(addr).await?;
    let client = event_bridge::session::connect(&config).await?;
    let queue = Queue::new(client, &config, "bench-steps");
    queue.ensure_paths().await?;
    let repeats = if smoke { 1 } else { REPEATS };
    let mut runs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        runs.push(run_steps(&queue, &admin, &chroot, marks).await?);
    }
    let rows = medians(&runs);
    let read_back = [
        resume_cost(&queue, marks[0]).await?,
        resume_cost(&queue, marks[marks.len() - 1]).await?,
    ];
    drop(queue);
    delete_tree(&admin, &chroot).await?;
    close(admin).await;
    print(&rows, &read_back);
    Ok(())
}

/// The first run's rows, each with the median time of that mark over `runs`.
fn medians(runs: &[Vec<Written>]) -> Vec<Written> {
    let mut rows = runs[0].clone();
    for (at, row) in rows.iter_mut().enumerate() {
        let mut took: Vec<Duration> = runs.iter().map(|run| run[at].took).collect();
        took.sort_unstable();
        row.took = took[took.len() / 2];
    }
    rows
}

fn print(rows: &[Written], read_back: &[(usize, Duration)]) {
    println!();
    println!("resumable_steps: a task's step checkpoint at its step number (one run per task):");
    println!(
        "  {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>7}  {:>8}  {:>7}",
        "step", "body", "chunk", "lease", "bytes", "/ 10th", "ms", "/ 10th"
    );
    let tenth = rows[0];
    for row in rows {
        println!(
            "  {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>7.2}  {:>8.3}  {:>7.2}",
            row.step,
            row.body,
            row.chunk,
            row.lease,
            row.bytes(),
            row.bytes() as f64 / tenth.bytes().max(1) as f64,
            row.took.as_secs_f64() * 1_000.0,
            row.took.as_secs_f64() / tenth.took.as_secs_f64().max(1e-9),
        );
    }
    println!("  target: last / 10th at most 1.2 (bytes and ms)");
    for (steps, took) in read_back {
        let ms = took.as_secs_f64() * 1_000.0;
        println!(
            "  resume of a record of {steps} steps: {ms:.1} ms from the run's start to the \
             handler (its read-back: O(steps), once per claim)"
        );
    }
}

/// One task of `marks`' last many steps; what the steps at `marks` wrote.
async fn run_steps(
    queue: &Queue,
    admin: &zk::Client,
    chroot: &str,
    marks: &[usize],
) -> Result<Vec<Written>> {
    let steps = *marks.last().ok_or("no marks")?;
    let envelope = Envelope::new("bench.steps", json!({}));
    let name = queue.publish_many(&[envelope]).await?.remove(0);
    let layout = queue.layout().clone();
    let task_path = format!("{chroot}{}", layout.task(&name));
    let lease_path = format!("{chroot}{}", layout.lease(&name));
    let rows = Arc::new(Mutex::new(Vec::new()));
    let handler = FnHandler(|task: Task| {
        let (rows, admin, layout) = (rows.clone(), admin.clone(), layout.clone());
        let (task_path, lease_path, chroot) =
            (task_path.clone(), lease_path.clone(), chroot.to_string());
        async move {
            let mut times = Vec::with_capacity(steps);
            for i in 1..=steps {
                let result = format!("row-{i:05}-{}", "x".repeat(40));
                let started = Instant::now();
                task.steps
                    .step(&format!("s{i:05}"), async { Ok(result) })
                    .await?;
                times.push(started.elapsed());
                if marks.contains(&i) {
                    let chunk = format!("{chroot}{}", layout.step_chunk(&task.envelope.id, i - 1));
                    let mut window = times[i.saturating_sub(10)..].to_vec();
                    window.sort_unstable();
                    let row = Written {
                        step: i,
                        body: size(&admin, &task_path).await,
                        chunk: size(&admin, &chunk).await,
                        lease: size(&admin, &lease_path).await,
                        took: window[window.len() / 2],
                    };
                    rows.lock().expect("rows").push(row);
                }
            }
            Ok(())
        }
    });
    let report = process::run(queue, &handler, &options()).await?;
    if report.completed != 1 {
        return Err(format!("the stepped task did not complete: {report:?}").into());
    }
    Ok(rows.lock().expect("rows").clone())
}

/// A task that records `steps` steps and stops, then the run that resumes it: the time from
/// that run's start until its handler is called (the claim and the read-back).
async fn resume_cost(queue: &Queue, steps: usize) -> Result<(usize, Duration)> {
    let envelope = Envelope::new("bench.resume", json!({}));
    queue.publish_many(&[envelope]).await?;
    let called = Arc::new(Mutex::new(None::<Instant>));
    let handler = FnHandler(|task: Task| {
        let called = called.clone();
        async move {
            called
                .lock()
                .expect("called")
                .get_or_insert_with(Instant::now);
            for i in 0..steps {
                task.steps.step(&format!("s{i}"), async { Ok(i) }).await?;
            }
            // The first run keeps a mark and stops; the resumed one finds it and completes.
            if task.steps.checkpointed::<bool>().is_none() {
                task.steps.checkpoint(&true).await?;
                return Err(task.steps.stop());
            }
            Ok(())
        }
    });
    process::run(queue, &handler, &options()).await?;
    *called.lock().expect("called") = None;
    let started = Instant::now();
    let report = process::run(queue, &handler, &options()).await?;
    if report.completed != 1 {
        return Err(format!("the resumed task did not complete: {report:?}").into());
    }
    let called = called.lock().expect("called").ok_or("never called")?;
    Ok((steps, called - started))
}

fn options() -> RunOptions {
    RunOptions {
        max_tasks: 1,
        concurrency: 1,
        deadline: tokio::time::Instant::now() + Duration::from_secs(1_200),
        margin: Duration::from_secs(1),
    }
}

async fn size(admin: &zk::Client, path: &str) -> usize {
    match admin.check_stat(path).await {
        Ok(Some(stat)) => stat.data_length as usize,
        _ => 0,
    }
}
