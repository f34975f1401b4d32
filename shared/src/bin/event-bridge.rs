//! `event-bridge`: publish tasks, run the functions' work locally, look at the queue.
//!
//! Settings come from the same environment variables as the functions (see the README).
//! Output meant for scripts is JSON on stdout; errors are one line on stderr and exit code 1.

use std::io::{BufRead, IsTerminal};

use clap::{Parser, Subcommand};
use event_bridge::trigger::Trigger;
use event_bridge::{Builtin, Config, Envelope, Queue, RunOptions, process, reap, stats};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "event-bridge",
    version,
    about = "A task queue on ZooKeeper for serverless consumers"
)]
#[command(
    after_help = "Configuration comes from environment variables: ZOOKEEPER_CONNECTION_STRING, EVENT_BRIDGE_ROOT, LEASE_TIMEOUT_MS, MAX_ATTEMPTS, … (see the README)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Publish one task from arguments, or many from JSON lines (a file or `-` for stdin).
    Publish {
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
        /// Group of a single task (stored; ordering by group comes later).
        #[arg(long)]
        group: Option<String>,
        /// Write --payload as the task body verbatim, without an envelope, as a producer that
        /// knows nothing of event-bridge would (it need not even be JSON).
        #[arg(long, requires = "payload")]
        raw: bool,
    },
    /// Claim and run tasks as `process_events` does, with the built-in handler.
    Process {
        /// Drain: run until the queue is empty or --max-tasks is reached.
        #[arg(long)]
        drain: bool,
        /// Cap on tasks claimed (default: MAX_TASKS_PER_RUN, or DRAIN_MAX_TASKS with --drain).
        #[arg(long)]
        max_tasks: Option<u32>,
    },
    /// Free expired and orphaned leases as `reap_leases` does.
    Reap,
    /// List the dead letters as JSON lines: task name, reason, attempts, last error, body.
    DeadList,
    /// Depth, leases, dead letters and the oldest task's age.
    Stats {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    event_bridge::telemetry::init_cli();
    if let Err(e) = run(cli.command).await {
        eprintln!("event-bridge: {e:#}");
        std::process::exit(1);
    }
}

async fn run(command: Command) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let client = event_bridge::zk::connect(&config).await?;
    let queue = Queue::new(client, &config, Queue::new_consumer_id("cli"));
    queue.ensure_paths().await?;
    match command {
        Command::Publish {
            raw: true,
            payload: Some(body),
            ..
        } => {
            let name = queue.publish_raw(body.as_bytes()).await?;
            println!("{}", json!({ "task": name }));
        }
        Command::Publish {
            event_type,
            payload,
            input,
            idempotency_key,
            group,
            ..
        } => {
            let envelopes = match input {
                Some(path) => read_lines(&path, &event_type)?,
                None => {
                    let payload: Value = serde_json::from_str(payload.as_deref().unwrap_or("{}"))
                        .map_err(|e| format!("--payload is not JSON: {e}"))?;
                    let mut envelope = Envelope::new(event_type, payload);
                    envelope.idempotency_key = idempotency_key;
                    envelope.group = group;
                    vec![envelope]
                }
            };
            let names = queue.publish_many(&envelopes).await?;
            for (name, envelope) in names.iter().zip(&envelopes) {
                println!("{}", json!({ "task": name, "id": envelope.id }));
            }
            if envelopes.len() > 1 && std::io::stderr().is_terminal() {
                eprintln!("published {} tasks", names.len());
            }
        }
        Command::Process { drain, max_tasks } => {
            let trigger = if drain {
                Trigger::Drain { max_tasks }
            } else {
                Trigger::Scheduled
            };
            let cap = match (drain, max_tasks) {
                (false, Some(n)) => n,
                _ => trigger.max_tasks(&config),
            };
            let options = RunOptions {
                max_tasks: cap,
                concurrency: (cap as usize).clamp(1, config.drain_concurrency),
                deadline: tokio::time::Instant::now() + config.time_budget,
                margin: config.deadline_margin,
            };
            let report = process::run(&queue, &Builtin(config.handler), &options).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::Reap => {
            let report = reap::reap(&queue).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Command::DeadList => {
            for (name, record) in event_bridge::dead::list(&queue).await? {
                println!("{}", json!({ "name": name, "record": record }));
            }
        }
        Command::Stats { json } => {
            let now = queue.server_time().await?;
            let stats = stats::collect(&queue, &now).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                let age = stats
                    .oldest_task_age_ms
                    .map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0));
                println!("root         {}", config.root);
                println!("pending      {}", stats.depth);
                println!("leased       {}", stats.leased);
                println!("dead         {}", stats.dead);
                println!("oldest task  {age}");
            }
        }
    }
    Ok(())
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
