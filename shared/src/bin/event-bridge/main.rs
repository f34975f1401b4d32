//! `event-bridge`: publish tasks, look into the queue, repair it, and run the functions' work
//! (or a long-running worker) from a terminal.
//!
//! Settings come from the same environment variables as the functions (see the book's configuration page).
//! Output a script would read is JSON on stdout (`--json` where there is also a text form).
//! Exit codes: 0 done, 1 failed (one line on stderr), 2 bad usage, 3 `status` or `cancel`
//! found nothing.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use event_bridge::sink::dead_letter_sink;
use event_bridge::{Config, Session, reap};

/// `println!` that returns the write error instead of panicking, so `event-bridge … | head`
/// ends quietly when the reader goes away.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)?
    };
}

mod batches;
mod control;
mod dead;
mod doctor;
mod lines;
mod look;
mod publish;
mod runs;
mod schedules;
mod show;
mod usage;

use show::print_json;

type Failure = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(
    name = "event-bridge",
    version,
    about = "A task queue on ZooKeeper for serverless consumers"
)]
#[command(
    after_help = "Settings come from environment variables: ZOOKEEPER_CONNECTION_STRING, EVENT_BRIDGE_ROOT, \
                  ZOOKEEPER_AUTH, LEASE_TIMEOUT_MS, MAX_ATTEMPTS, … (see the book's configuration page, docs/book/src/reference/configuration.md)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the base paths (with creator-only ACLs when ZOOKEEPER_AUTH is set).
    Init,
    /// Check what a deployment gets wrong, a line per check with its fix: each ZooKeeper
    /// server, the root and its ACLs, the clock's skew, the reaper's last run, the versions of
    /// the consumers holding leases, the routes and their sinks, the secrets needed. Exit 1
    /// when a check fails.
    Doctor {
        #[arg(long)]
        json: bool,
        /// Where the deployment runs, which decides the secrets it needs (default: told by
        /// VERCEL or AWS_LAMBDA_FUNCTION_NAME when set).
        #[arg(long, value_parser = ["lambda", "vercel", "worker"])]
        platform: Option<String>,
        /// How often the reaper is scheduled: a last run older than twice this fails.
        #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = sample_period)]
        reaper_every: Duration,
    },
    /// Publish one task from arguments, or many from JSON lines (a file, or `-` for stdin).
    Publish(Publish),
    /// Pending tasks in the order consumers take them (each lane oldest first), with age,
    /// attempts, lease holder and expiry.
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
    /// Where a task is: pending, leased, waiting, dead, or not found (exit 3); by id, also a
    /// debounced publish still pending under its key (debounced).
    Status {
        /// A task name (task-0000000042) or an envelope id.
        task: String,
        #[arg(long)]
        json: bool,
    },
    /// Why a task is where it is and what would let it go, a line per reason: its pause, due
    /// time, group, gates at their cap, parents, lease, or how it ended (exit 3 when it is
    /// nowhere).
    Explain {
        /// A task name (task-0000000042), a name it had, or an envelope id.
        task: String,
        #[arg(long)]
        json: bool,
    },
    /// Inspect and repair the dead letters.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Depth, leased, waiting, dead, age of the oldest task, counts per event type (of the
    /// oldest 1000 tasks, or of all with --full).
    Stats {
        #[arg(long)]
        json: bool,
        /// Count the types of every pending task (a request per 32 tasks), not a sample.
        #[arg(long)]
        full: bool,
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
    /// Cancel a task: pending or waiting, it goes to the dead letters (reason `cancelled`);
    /// held, it is marked so that its running attempt may still complete it but it is not run
    /// again; a debounced publish still pending (by its id) is withdrawn: deleted, it never
    /// runs. Exit 3 when there is no such task (also for the id of a debounced publish a later
    /// one of its key replaced: only the last one is pending).
    Cancel {
        /// A task name (task-0000000042), a name it had, or an envelope id.
        task: String,
    },
    /// Take a parent gone from the queue without an end (a 000-design consumer completed it,
    /// or its znode was deleted by hand: `stats` and `explain` of a child say so) as completed
    /// or dead, so that the children waiting for it go on. Refused (exit 1) for a parent that is
    /// somewhere; exit 3 when no child waits for it.
    EndParent {
        /// The parent's envelope id, as the child's `explain` names it.
        parent: String,
        /// How it ended: `completed` (its children go on once their other parents complete) or
        /// `dead` (each fails with it, or runs anyway, as its on_parent_dead says).
        #[arg(long = "as", value_name = "completed|dead", value_parser = event_bridge::queue::TakenAs::parse)]
        taken_as: event_bridge::queue::TakenAs,
    },
    /// Send a signal: the resumable task that waited first for KEY takes it and resumes; when
    /// none waits, it is kept (SIGNAL_KEEP_MS) for the first wait of KEY. Prints where it went.
    Signal {
        /// The key tasks wait for (`Steps::wait_for`).
        key: String,
        /// The signal's payload, JSON (`null` when left out).
        #[arg(long, default_value = "null")]
        payload: String,
    },
    /// Stop claiming tasks of one event type, or of the whole queue: tasks in flight finish,
    /// producers keep publishing.
    Pause {
        /// Only tasks of this event type.
        #[arg(long = "type")]
        event_type: Option<String>,
    },
    /// Claim again what `pause` stopped, or a group paused after one of its tasks went to the
    /// dead letters (--group).
    Resume {
        /// Only tasks of this event type.
        #[arg(long = "type", conflicts_with = "group")]
        event_type: Option<String>,
        /// The group to go on with.
        #[arg(long)]
        group: Option<String>,
    },
    /// Recurring schedules: a cron pattern in a time zone that publishes one task per slot
    /// (fired by every `process` run, so by `process_events` each minute, and by workers).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Batches: tasks published with --batch NAME, and one callback task once the batch is
    /// sealed and every member completed or dead.
    #[command(subcommand)]
    Batch(BatchCommand),
    /// Run until SIGTERM or SIGINT, processing tasks as they are published (ZooKeeper watches).
    Worker {
        /// Tasks in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Serve Prometheus text at http://ADDRESS/metrics (e.g. 127.0.0.1:9464): tasks
        /// handled by type and outcome, delivery time by route.
        #[arg(long, value_name = "ADDRESS")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// A web dashboard until SIGTERM or SIGINT: depth, leases, dead letters (redrive and purge
    /// with --admin), counts by type, pauses, schedules, a chart of the last hour; Prometheus
    /// text at /metrics.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDRESS")]
        listen: std::net::SocketAddr,
        /// Allow redrive and purge from the page, after signing in with DASHBOARD_TOKEN
        /// (or for anyone with ALLOW_UNAUTHENTICATED=1, for local use).
        #[arg(long)]
        admin: bool,
        /// How often the figures of the chart and /metrics are sampled, e.g. 10s, 1m.
        #[arg(long, default_value = "10s", value_parser = sample_period)]
        sample_every: Duration,
        /// A name the dashboard also answers to, HOST or HOST:PORT as browsers send it in
        /// Host (e.g. the name of a proxy in front of it); repeatable. Requests naming any
        /// other host than these and the listen address (and localhost on loopback) get 421.
        #[arg(long, value_name = "HOST[:PORT]", value_parser = event_bridge::dashboard::public_name)]
        public_name: Vec<String>,
    },
}

#[derive(Args)]
pub(crate) struct Publish {
    /// Event type of the task(s).
    #[arg(long = "type", default_value = "event")]
    pub(crate) event_type: String,
    /// Payload JSON of a single task.
    #[arg(long, conflicts_with = "input")]
    pub(crate) payload: Option<String>,
    /// JSON lines to publish: each line is a payload, or an object with `payload` (and
    /// optionally `type`, `id`, `group`, `idempotency_key`, `concurrency_key`, `after`,
    /// `on_parent_dead`, `priority`,
    /// `debounce_key` with `debounce` and `debounce_max`, `on_dead`). `-` reads stdin, as
    /// does a publish without --payload whose stdin is a pipe or a file.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub(crate) input: Option<String>,
    /// Idempotency key of a single task: while a task with this key is pending, held, or
    /// completed within DEDUP_WINDOW_MS, publishing it again creates nothing and prints that
    /// task with "duplicate": true.
    #[arg(long)]
    pub(crate) idempotency_key: Option<String>,
    /// Group of the task(s): tasks of a group run one at a time, in publish order.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Concurrency key of the task(s) (a JSON line's own `concurrency_key` comes first): tasks
    /// with one key share their route's `per_key` limits, across every consumer.
    #[arg(long)]
    pub(crate) concurrency_key: Option<String>,
    /// Batch the task(s) join (opened with `batch open`, not sealed): its callback follows
    /// the last member settled. A JSON line's own `batch` comes first.
    #[arg(long)]
    pub(crate) batch: Option<String>,
    /// Run the task(s) only after these tasks (task names or ids, separated by commas) have
    /// completed; a JSON line's own `after` comes first. A task not found (pending, dead, or
    /// completed with a record kept by KEEP_DONE) is an error and publishes nothing.
    #[arg(long, value_delimiter = ',')]
    pub(crate) after: Vec<String>,
    /// With --after: when a parent goes to the dead letters, go too, with a reason that names
    /// it (`fail`, the default), or run anyway (`run`).
    #[arg(long, value_parser = ["fail", "run"], requires = "after")]
    pub(crate) on_parent_dead: Option<String>,
    /// Lane of the task(s): consumers take high before normal before low (or by
    /// LANE_WEIGHTS). A JSON line's own `high` or `low` comes first.
    #[arg(long, value_parser = ["high", "normal", "low"])]
    pub(crate) priority: Option<String>,
    /// Debounce key of the task(s): publishing again with the key within --debounce replaces
    /// the pending task (its payload) and pushes its due time back; one task runs, the last.
    #[arg(long, requires = "debounce")]
    pub(crate) debounce_key: Option<String>,
    /// With --debounce-key: the task is due this long after the key's last publish (30s, 5m).
    #[arg(long, requires = "debounce_key")]
    pub(crate) debounce: Option<String>,
    /// With --debounce-key: and no later than this long after its first (none: a key
    /// published more often than its period waits until the publishes stop).
    #[arg(long, requires = "debounce_key")]
    pub(crate) debounce_max: Option<String>,
    /// W3C Trace Context of the request the task(s) come from
    /// (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>): sent on by the sinks, logged.
    #[arg(long, value_parser = traceparent)]
    pub(crate) traceparent: Option<String>,
    /// With --group: when the task goes to the dead letters, keep its group paused until
    /// `resume --group` (`pause`), or go on with the group's next task (`continue`, the default).
    #[arg(long, value_parser = ["pause", "continue"], requires = "group")]
    pub(crate) on_dead: Option<String>,
    /// Not claimable before this delay has passed, by ZooKeeper's clock: 1500ms, 30s, 5m, 2h, 1d
    /// (as a JSON line's "delay"), at most a year.
    #[arg(long, value_parser = lines::parse_delay)]
    pub(crate) delay: Option<Duration>,
    /// Not run if no run has started it within this long, by ZooKeeper's clock: it goes to the
    /// dead letters as expired (1500ms, 30s, 10m, 2h, 1d). A JSON line may say its own
    /// "expires_at" (RFC 3339).
    #[arg(long, value_name = "DURATION", value_parser = lines::parse_delay)]
    pub(crate) expires_in: Option<Duration>,
    /// How long a connection lost under the publish (a leader election) may stay lost: once
    /// ZooKeeper answers again within it, the tasks whose answers were lost are looked for
    /// (found ones printed) and the others sent again; past it, the publish stops, naming the
    /// first line without an answer. E.g. 30s, 5m.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = lines::parse_delay)]
    pub(crate) retry_for: Duration,
    /// Write --payload as the task body verbatim, without an envelope, as a producer that
    /// knows nothing of event-bridge would (it need not even be JSON).
    #[arg(long, requires = "payload", conflicts_with_all = ["delay", "expires_in", "group", "idempotency_key", "concurrency_key", "batch", "after", "priority", "debounce_key", "on_dead", "traceparent"])]
    pub(crate) raw: bool,
}

#[derive(Subcommand)]
pub(crate) enum DeadCommand {
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

#[derive(Subcommand)]
pub(crate) enum BatchCommand {
    /// Open a batch (exit 1 when one of that name exists).
    Open {
        name: String,
        /// Event type of the callback task published once the batch is sealed and settled.
        #[arg(long)]
        on_complete: String,
        /// Event type of a second callback, published too when no member is dead.
        #[arg(long)]
        on_success: Option<String>,
        /// JSON the callbacks carry (as `payload.payload`).
        #[arg(long, default_value = "{}")]
        payload: String,
    },
    /// Seal a batch: no member joins after; its callback comes once nothing is pending.
    Seal { name: String },
    /// A batch's counts: total, pending, completed, dead, sealed, callback (exit 3 when there
    /// is none).
    Status {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Add a schedule. Slots already passed make nothing; the first task comes at the next.
    Add(ScheduleAdd),
    /// Every schedule: pattern, zone, paused, latest and next slot.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a schedule (exit 3 when there is none).
    Remove { name: String },
    /// Stop a schedule from making tasks (exit 3 when there is none).
    Pause { name: String },
    /// Let a paused schedule go on from its next slot; slots passed while paused make nothing
    /// (exit 3 when there is none).
    Resume { name: String },
    /// Publish the schedule's task now, outside its slots (exit 3 when there is none).
    RunNow { name: String },
}

#[derive(Args)]
pub(crate) struct ScheduleAdd {
    pub(crate) name: String,
    /// Five fields: minute hour day-of-month month day-of-week, e.g. "0 3 * * *".
    #[arg(long)]
    pub(crate) cron: String,
    /// IANA time zone the pattern is read in, daylight saving included.
    #[arg(long, default_value = "UTC")]
    pub(crate) tz: String,
    /// Event type of the tasks.
    #[arg(long = "type")]
    pub(crate) event_type: String,
    /// Payload JSON of the tasks.
    #[arg(long, default_value = "{}")]
    pub(crate) payload: String,
    /// Group of the tasks: they run one at a time, in slot order.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// With --group: what the group does when a task goes to the dead letters.
    #[arg(long, value_parser = ["pause", "continue"], requires = "group")]
    pub(crate) on_dead: Option<String>,
    /// An idempotency key per task from {name}, {slot} (RFC 3339 in the zone), {slot_ms},
    /// {date} (the slot's date in the zone), e.g. "{name}-{date}".
    #[arg(long)]
    pub(crate) idempotency_key_template: Option<String>,
    /// After downtime: `last` fires the latest missed slot once; `skip` fires none of those
    /// found more than 2 minutes late.
    #[arg(long, value_parser = ["last", "skip"], default_value = "last")]
    pub(crate) misfire: String,
}

/// A `--sample-every` or `--reaper-every` value: a delay, more than zero.
fn sample_period(value: &str) -> Result<Duration, String> {
    match lines::parse_delay(value)? {
        period if period.is_zero() => Err("give a period of more than zero, e.g. 10s".into()),
        period => Ok(period),
    }
}

/// A `--traceparent` value, checked.
fn traceparent(value: &str) -> Result<String, String> {
    match event_bridge::task::is_traceparent(value) {
        true => Ok(value.to_string()),
        false => Err("give a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lower case".into()),
    }
}

/// The most of an error's message printed, in bytes.
const MESSAGE_BYTES: usize = 4_096;

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| usage::exit(e));
    event_bridge::logs::init_cli();
    let ran = runtime_for(&cli.command).block_on(run(cli.command));
    // `exit` runs no destructor: the spans ended so far are sent first.
    event_bridge::traces::flush();
    match ran {
        Ok(code) => std::process::exit(code),
        Err(e) if broken_pipe(e.as_ref()) => std::process::exit(0),
        Err(e) => {
            // One line, whatever a value quoted in it held.
            let message = event_bridge::task::one_line(&e.to_string(), MESSAGE_BYTES);
            eprintln!("event-bridge: {message}");
            std::process::exit(1);
        }
    }
}

/// The runtime a command runs on. The queue's runs and the commands that print one report at
/// the end run on one thread: no wake-up is handed from one thread to another (measured: four
/// `process --drain` at once use about a fifth less CPU on two cores, and end sooner). The
/// others get a thread per core, so the session's pings go on while a blocking read of the
/// input (`publish`, the confirmation of `dead`) or a blocking write to a slow reader (`list`
/// piped to a pager) waits, and so `worker` and `serve` can use every core.
fn runtime_for(command: &Command) -> tokio::runtime::Runtime {
    let mut builder = match command {
        Command::Process { .. }
        | Command::Reap
        | Command::Stats { .. }
        | Command::Init
        | Command::Status { .. }
        | Command::Explain { .. }
        | Command::Cancel { .. }
        | Command::EndParent { .. }
        | Command::Signal { .. }
        | Command::Pause { .. }
        | Command::Resume { .. } => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    builder
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

async fn run(command: Command) -> Result<i32, Failure> {
    if let Command::Doctor {
        json,
        platform,
        reaper_every,
    } = command
    {
        return doctor::doctor(json, platform.as_deref(), reaper_every).await;
    }
    let config = Config::from_env()?;
    if let Command::Worker {
        concurrency,
        metrics_listen,
    } = command
    {
        if let Some(listen) = metrics_listen {
            event_bridge::run_metrics::serve(listen)?;
        }
        return runs::worker(&config, concurrency).await;
    }
    if let Command::Serve {
        listen,
        admin,
        sample_every,
        public_name,
    } = command
    {
        let options = event_bridge::dashboard::Options {
            listen,
            admin,
            sample_every,
            public_names: public_name,
        };
        return runs::serve(config, options).await;
    }
    let session = Session::open(config.clone(), "cli", dead_letter_sink(&config).await?).await?;
    let queue = session.queue();
    match command {
        Command::Init => look::init(&config, &queue)?,
        Command::Publish(args) => publish::publish(&session, args).await?,
        Command::List { limit, json } => look::list(&queue, limit, json).await?,
        Command::Peek { count } => look::peek(&queue, count).await?,
        Command::Status { task, json } => return look::status(&config, &queue, &task, json).await,
        Command::Explain { task, json } => {
            return look::explain(&config, &queue, &task, json).await;
        }
        Command::Dead(command) => dead::dead_command(&queue, command).await?,
        Command::Stats { json, full } => look::stats(&config, &queue, json, full).await?,
        Command::Process { drain, max_tasks } => {
            runs::process(&config, &queue, drain, max_tasks).await?
        }
        Command::Reap => print_json(&reap::reap(&queue).await?)?,
        Command::Cancel { task } => return control::cancel(&config, &queue, &task).await,
        Command::EndParent { parent, taken_as } => {
            return control::end_parent(&config, &queue, &parent, taken_as).await;
        }
        Command::Signal { key, payload } => control::signal(&queue, &key, &payload).await?,
        Command::Pause { event_type } => control::pause(&queue, event_type, true).await?,
        Command::Resume {
            group: Some(group), ..
        } => control::unpause_group(&queue, &group).await?,
        Command::Resume { event_type, .. } => control::pause(&queue, event_type, false).await?,
        Command::Schedule(command) => return schedules::command(&queue, command).await,
        Command::Batch(command) => return batches::command(&queue, command).await,
        Command::Worker { .. } | Command::Serve { .. } | Command::Doctor { .. } => {
            unreachable!("handled above")
        }
    }
    Ok(0)
}
