//! `event-bridge`: publish tasks, look into the queue, repair it, and run the functions' work
//! (or a long-running worker) from a terminal.
//!
//! Settings come from the same environment variables as the functions (see the README).
//! Output a script would read is JSON on stdout (`--json` where there is also a text form).
//! Exit codes: 0 done, 1 failed (one line on stderr), 2 bad usage, 3 `status` found nothing.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use event_bridge::inspect::{self, Status, TaskInfo};
use event_bridge::sink::router::Delivery;
use event_bridge::trigger::Trigger;
use event_bridge::worker::Worker;
use event_bridge::{Config, Envelope, Queue, RunOptions, dead, process, reap};
use serde_json::{Value, json};

type Failure = Box<dyn std::error::Error>;

/// `println!` that returns the write error instead of panicking, so `event-bridge … | head`
/// ends quietly when the reader goes away.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)?
    };
}

#[derive(Parser)]
#[command(
    name = "event-bridge",
    version,
    about = "A task queue on ZooKeeper for serverless consumers"
)]
#[command(
    after_help = "Settings come from environment variables: ZOOKEEPER_CONNECTION_STRING, EVENT_BRIDGE_ROOT, \
                  ZOOKEEPER_AUTH, LEASE_TIMEOUT_MS, MAX_ATTEMPTS, … (see the README's configuration table)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the base paths (with creator-only ACLs when ZOOKEEPER_AUTH is set).
    Init,
    /// Publish one task from arguments, or many from JSON lines (a file, or `-` for stdin).
    Publish(Publish),
    /// Pending tasks, oldest first, with age, attempts, lease holder and expiry.
    List {
        /// Show at most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// The oldest pending tasks with their whole envelopes (JSON).
    Peek {
        /// How many.
        #[arg(default_value_t = 1)]
        count: usize,
    },
    /// Where a task is: pending, leased, dead, or not found (exit 3).
    Status {
        /// A task name (task-0000000042) or an envelope id.
        task: String,
        #[arg(long)]
        json: bool,
    },
    /// Inspect and repair the dead letters.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Depth, leased, in backoff, dead, age of the oldest task, counts per event type.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Claim and run tasks once, as `process_events` does (through ROUTES when set).
    Process {
        /// Drain: run until the queue is empty or --max-tasks is reached.
        #[arg(long)]
        drain: bool,
        /// Cap on tasks claimed (default: MAX_TASKS_PER_RUN, or DRAIN_MAX_TASKS with --drain).
        #[arg(long)]
        max_tasks: Option<u32>,
    },
    /// Free expired and orphaned leases, as `reap_leases` does.
    Reap,
    /// Run until SIGTERM or SIGINT, processing tasks as they are published (ZooKeeper watches).
    Worker {
        /// Tasks in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
}

#[derive(Args)]
struct Publish {
    /// Event type of the task(s).
    #[arg(long = "type", default_value = "event")]
    event_type: String,
    /// Payload JSON of a single task.
    #[arg(long, conflicts_with = "input")]
    payload: Option<String>,
    /// JSON lines to publish: each line is a payload, or an object with `payload` (and
    /// optionally `type`, `id`, `group`, `idempotency_key`). `-` reads stdin.
    #[arg(long, short = 'f', value_name = "FILE")]
    input: Option<String>,
    /// Idempotency key of a single task.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Group of the task(s) (stored; ordering by group is not implemented yet).
    #[arg(long)]
    group: Option<String>,
    /// Not claimable before this delay has passed, e.g. 30s, 5m, 1500ms.
    #[arg(long, value_parser = parse_delay)]
    delay: Option<Duration>,
    /// Write --payload as the task body verbatim, without an envelope, as a producer that
    /// knows nothing of event-bridge would (it need not even be JSON).
    #[arg(long, requires = "payload", conflicts_with_all = ["delay", "group", "idempotency_key"])]
    raw: bool,
}

#[derive(Subcommand)]
enum DeadCommand {
    /// Every dead letter: name, reason, attempts, last error.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One dead letter's whole record (JSON).
    Show { name: String },
    /// Send dead letters back to the queue: attempts reset, id kept.
    Redrive {
        /// Every dead letter.
        #[arg(long, conflicts_with = "names")]
        all: bool,
        names: Vec<String>,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
    /// Delete dead letters for good.
    Purge {
        #[arg(long, conflicts_with = "names")]
        all: bool,
        names: Vec<String>,
        #[arg(long, short)]
        yes: bool,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    event_bridge::telemetry::init_cli();
    match run(cli.command).await {
        Ok(code) => std::process::exit(code),
        Err(e) if broken_pipe(e.as_ref()) => std::process::exit(0),
        Err(e) => {
            eprintln!("event-bridge: {e}");
            std::process::exit(1);
        }
    }
}

fn broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

async fn run(command: Command) -> Result<i32, Failure> {
    let config = Config::from_env()?;
    let client = event_bridge::zk::connect(&config).await?;
    let mut queue = Queue::new(client, &config, Queue::new_consumer_id("cli"));
    if let Some(url) = &config.dead_letter_queue_url {
        let dlq = event_bridge::sink::sqs::DeadLetterQueue::new(
            event_bridge::sink::sqs::client().await,
            url.clone(),
        );
        queue = queue.with_dead_letter_queue(dlq);
    }
    queue.ensure_paths().await?;
    match command {
        Command::Init => {
            let acl = if config.zookeeper_auth.is_some() {
                "creator"
            } else {
                "open"
            };
            print_json(
                &json!({ "root": config.root, "paths": queue.layout().base_paths(), "acl": acl }),
            )?;
        }
        Command::Publish(args) => publish(&queue, args).await?,
        Command::List { limit, json } => {
            let tasks = inspect::pending(&queue, &queue.server_time().await?, Some(limit)).await?;
            if json {
                print_json(&tasks)?;
            } else {
                print_table(&tasks)?;
            }
        }
        Command::Peek { count } => {
            let tasks = inspect::pending(&queue, &queue.server_time().await?, Some(count)).await?;
            print_json(&tasks)?;
        }
        Command::Status { task, json } => {
            let status = inspect::status(&queue, &queue.server_time().await?, &task).await?;
            if json {
                print_json(&status)?;
            } else {
                out!("{}", describe(&status));
            }
            if status == Status::NotFound {
                eprintln!("event-bridge: no task {task} under {}", config.root);
                return Ok(3);
            }
        }
        Command::Dead(command) => dead_command(&queue, command).await?,
        Command::Stats { json } => {
            let stats = inspect::detailed_stats(&queue, &queue.server_time().await?).await?;
            if json {
                print_json(&stats)?;
            } else {
                print_stats(&config, &stats)?;
            }
        }
        Command::Process { drain, max_tasks } => {
            let trigger = if drain {
                Trigger::Drain { max_tasks }
            } else {
                Trigger::Scheduled
            };
            let cap = if drain {
                trigger.max_tasks(&config)
            } else {
                max_tasks.unwrap_or(config.max_tasks_per_run)
            };
            let options = RunOptions {
                max_tasks: cap,
                concurrency: (cap as usize).clamp(1, config.drain_concurrency),
                deadline: tokio::time::Instant::now() + config.time_budget,
                margin: config.deadline_margin,
            };
            let delivery = Delivery::from_config(&config).await?;
            print_json(&process::run(&queue, &delivery, &options).await?)?;
        }
        Command::Reap => print_json(&reap::reap(&queue).await?)?,
        Command::Worker { concurrency } => {
            drop(queue);
            let worker = Worker::new(
                config.clone(),
                Delivery::from_config(&config).await?,
                concurrency,
            );
            let (stop, stopped) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                shutdown_signal().await;
                let _ = stop.send(true);
            });
            print_json(&worker.run(stopped).await?)?;
        }
    }
    Ok(0)
}

async fn publish(queue: &Queue, args: Publish) -> Result<(), Failure> {
    if args.raw {
        let body = args.payload.unwrap_or_default();
        let name = queue.publish_raw(body.as_bytes()).await?;
        out!("{}", json!({ "task": name }));
        return Ok(());
    }
    let mut envelopes = match &args.input {
        Some(path) => read_lines(path, &args.event_type)?,
        None => {
            let payload: Value = serde_json::from_str(args.payload.as_deref().unwrap_or("{}"))
                .map_err(|e| format!("--payload is not JSON: {e}"))?;
            let mut envelope = Envelope::new(&args.event_type, payload);
            envelope.idempotency_key = args.idempotency_key.clone();
            vec![envelope]
        }
    };
    let retry_at = match args.delay {
        Some(delay) => Some(queue.server_time().await?.now_ms() + delay.as_millis() as i64),
        None => None,
    };
    for envelope in &mut envelopes {
        envelope.group = envelope.group.take().or_else(|| args.group.clone());
        envelope.retry_at = retry_at;
    }
    let bar = progress_bar(envelopes.len());
    let mut stdout = std::io::stdout().lock();
    for chunk in envelopes.chunks(1_000) {
        let names = queue.publish_many(chunk).await?;
        for (name, envelope) in names.iter().zip(chunk) {
            writeln!(stdout, "{}", json!({ "task": name, "id": envelope.id }))?;
        }
        if let Some(bar) = &bar {
            bar.inc(chunk.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_with_message("published");
    }
    Ok(())
}

/// A progress bar on stderr for bulk input, only when stderr is a terminal.
fn progress_bar(len: usize) -> Option<indicatif::ProgressBar> {
    (len > 1 && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(len as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} tasks {per_sec} {msg}")
                .expect("static template"),
        );
        bar
    })
}

async fn dead_command(queue: &Queue, command: DeadCommand) -> Result<(), Failure> {
    match command {
        DeadCommand::List { json } => {
            let records = dead::list(queue).await?;
            if json {
                let list: Vec<Value> = records
                    .into_iter()
                    .map(|(name, record)| json!({"name": name, "record": record}))
                    .collect();
                print_json(&list)?;
            } else {
                for (name, r) in records {
                    let last = r["last_error"].as_str().unwrap_or("-");
                    out!(
                        "{name}  attempts={}  reason={}  last_error={last}",
                        r["attempts"],
                        r["reason"]
                    );
                }
            }
        }
        DeadCommand::Show { name } => match dead::show(queue, &name).await? {
            Some(record) => print_json(&record)?,
            None => return Err(format!("no dead letter {name}").into()),
        },
        DeadCommand::Redrive { all, names, yes } => {
            let names = chosen(queue, all, names).await?;
            confirm(&format!("redrive {} dead letter(s)", names.len()), yes)?;
            let done = dead::redrive(queue, &names).await?;
            print_json(&json!({ "redriven": done }))?;
        }
        DeadCommand::Purge { all, names, yes } => {
            let names = chosen(queue, all, names).await?;
            confirm(
                &format!("delete {} dead letter(s) for good", names.len()),
                yes,
            )?;
            print_json(&json!({ "purged": dead::purge(queue, &names).await? }))?;
        }
    }
    Ok(())
}

async fn chosen(queue: &Queue, all: bool, names: Vec<String>) -> Result<Vec<String>, Failure> {
    match (all, names.is_empty()) {
        (true, _) => Ok(dead::names(queue).await?),
        (false, false) => Ok(names),
        (false, true) => Err("name the dead letters, or pass --all".into()),
    }
}

/// Asks on the terminal; refuses when nobody can answer and --yes was not given.
fn confirm(action: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!("refusing to {action} without --yes (stdin is not a terminal)").into());
    }
    eprint!("{action}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err("not confirmed".into())
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    out!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn print_table(tasks: &[TaskInfo]) -> Result<(), Failure> {
    out!(
        "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}",
        "TASK",
        "AGE",
        "ATTEMPTS",
        "TYPE",
        "HOLDER",
        "EXPIRES IN"
    );
    for t in tasks {
        let (holder, expires) = match &t.lease {
            Some(l) => (
                l.consumer_id.clone().unwrap_or("?".into()),
                seconds(l.expires_in_ms),
            ),
            None if t.backoff_left_ms.is_some() => ("(backoff)".into(), "-".into()),
            None => ("-".into(), "-".into()),
        };
        let kind = t.event_type.clone().unwrap_or_else(|| "(poison)".into());
        out!(
            "{:<16} {:>9} {:>8}  {:<20} {:<22} {:>10}",
            t.name,
            seconds(t.age_ms),
            t.attempts,
            kind,
            holder,
            expires
        );
    }
    Ok(())
}

fn print_stats(config: &Config, s: &inspect::DetailedStats) -> Result<(), Failure> {
    let age = s.stats.oldest_task_age_ms.map_or("-".into(), seconds);
    out!("root         {}", config.root);
    out!("pending      {}", s.stats.depth);
    out!("leased       {}", s.stats.leased);
    out!("in backoff   {}", s.in_backoff);
    out!("dead         {}", s.stats.dead);
    out!("oldest task  {age}");
    for (event_type, n) in &s.by_type {
        out!("  {event_type:<24} {n}");
    }
    Ok(())
}

fn describe(status: &Status) -> String {
    match status {
        Status::Pending { task } => match task.backoff_left_ms {
            Some(left) => format!(
                "{}: pending, in backoff for {}, {} attempts",
                task.name,
                seconds(left),
                task.attempts
            ),
            None => format!("{}: pending, {} attempts", task.name, task.attempts),
        },
        Status::Leased { task } => {
            let lease = task.lease.as_ref().expect("leased");
            let holder = lease.consumer_id.as_deref().unwrap_or("?");
            format!(
                "{}: leased by {holder}, expires in {}",
                task.name,
                seconds(lease.expires_in_ms)
            )
        }
        Status::Dead { name, record } => format!(
            "{name}: dead ({})",
            record["reason"].as_str().unwrap_or("?")
        ),
        Status::NotFound => "not found".into(),
    }
}

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Reads JSON lines into envelopes; a bad line is an error naming its number.
fn read_lines(path: &str, default_type: &str) -> Result<Vec<Envelope>, String> {
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut envelopes = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("{path}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(&line).map_err(|e| format!("{path}:{}: not JSON: {e}", i + 1))?;
        envelopes.push(envelope_from_line(value, default_type));
    }
    Ok(envelopes)
}

/// A line with a `payload` field names its own type, id, group and key; any other line is
/// the payload itself.
fn envelope_from_line(mut value: Value, default_type: &str) -> Envelope {
    let Some(payload) = value.as_object_mut().and_then(|o| o.remove("payload")) else {
        return Envelope::new(default_type, value);
    };
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let mut envelope = Envelope::new(text("type").unwrap_or_else(|| default_type.into()), payload);
    if let Some(id) = text("id") {
        envelope.id = id;
    }
    envelope.group = text("group");
    envelope.idempotency_key = text("idempotency_key");
    envelope
}

/// `1500ms`, `30s`, `5m`, `2h`, or a bare number of seconds.
fn parse_delay(raw: &str) -> Result<Duration, String> {
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{raw:?} is not a delay such as 30s or 5m"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{raw:?}: unit must be ms, s, m or h")),
    };
    const YEAR_MS: u64 = 365 * 24 * 3_600_000;
    let ms = ms
        .filter(|ms| *ms <= YEAR_MS)
        .ok_or_else(|| format!("{raw:?}: a delay is at most a year"))?;
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_take_a_unit() {
        assert_eq!(parse_delay("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_delay("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_delay("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_delay("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_delay("5d").is_err());
        assert!(parse_delay("m").is_err());
        assert!(parse_delay("99999999999999999h").is_err());
    }

    #[test]
    fn lines_with_a_payload_field_carry_their_own_fields() {
        let e = envelope_from_line(
            json!({"type": "a.b", "payload": 1, "id": "x", "group": "g"}),
            "dflt",
        );
        assert_eq!(
            (e.event_type.as_str(), e.id.as_str(), e.group.as_deref()),
            ("a.b", "x", Some("g"))
        );
        assert_eq!(e.payload, json!(1));
        let plain = envelope_from_line(json!({"user": 1}), "dflt");
        assert_eq!(
            (plain.event_type.as_str(), plain.payload.clone()),
            ("dflt", json!({"user": 1}))
        );
    }
}
