//! The consumers of the run, as child processes of the real `event-bridge` binary: workers
//! (`worker --concurrency 8`), loops that run `process --drain --max-tasks 200` again and
//! again, a loop of scheduled runs (`process` without `--drain`: `MAX_TASKS_PER_RUN` tasks,
//! and the schedules' due slots) every second, and a loop that runs `reap` every second.
//! Every process's stderr (JSON logs) goes to a file of its role in the scratch directory,
//! appended across restarts. The operator's commands (`pause`, `schedule add`, …) run with
//! the same environment.
//!
//! Logs are at WARN (`RUST_LOG=warn`), plus the DEBUG line `task claimed` of the target
//! `event_bridge::process::task`, which names the consumer id (that is how a fault knows which
//! leases its victim holds), and `handler ended` (when a request stopped counting against its
//! route's limit), and the DEBUG line `admitted through a rate` of
//! `event_bridge::queue::claim`, with the gate's moment of each admission (the rate check),
//! and the INFO lines of `event_bridge::process::suspend` (a few per resumable task: a task
//! released to resume in another run, one claimed back before its sleep or wait ended), which
//! `reclaims` and `redrives` judge; `task_steps`'s INFO line `cut at the run's deadline` comes
//! with its DEBUG ones.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::scratch::Scratch;

pub const WORKER_CONCURRENCY: &str = "8";
pub const DRAIN_MAX_TASKS: &str = "200";
/// Tasks a drain keeps in flight (the default, said here for the lanes' bound).
pub const DRAIN_CONCURRENCY: &str = "64";
/// Tasks a scheduled run (`process` without `--drain`) claims.
pub const MAX_TASKS_PER_RUN: &str = "5";
/// Retries come soon, and never run out by chance: a task fails about one request in six,
/// so fifty failures in a row do not happen.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
pub const BACKOFF_MAX: Duration = Duration::from_millis(1_000);
pub const MAX_ATTEMPTS: u32 = 50;
/// The HTTP timeout of every route: a request the receiver never answers fails after it.
pub const HTTP_TIMEOUT: Duration = Duration::from_millis(2_000);
/// The limited route: at most this many of its tasks at once, and this rate (its burst: a
/// tenth of a second's worth, at least one).
pub const LIMITED_MAX_IN_FLIGHT: usize = 2;
pub const LIMITED_RATE_PER_S: f64 = 20.0;
/// The tenants' route: at most this many tasks of one concurrency key at once.
pub const TENANT_MAX_PER_KEY: usize = 1;
/// What the consumers log (see the module's documentation).
pub const RUST_LOG: &str = "warn,event_bridge::process::task=debug,\
    event_bridge::queue::claim=debug,event_bridge::process::suspend=info";
/// Pause between two runs of a drain loop.
const DRAIN_PAUSE: Duration = Duration::from_millis(200);
/// Pause between two scheduled runs.
const SCHEDULED_PAUSE: Duration = Duration::from_secs(1);
/// Pause between two runs of the reap loop.
const REAP_PAUSE: Duration = Duration::from_secs(1);
/// A stopping process gets this long before it is killed (a hang guard).
const STOP_GUARD: Duration = Duration::from_secs(60);

/// How every consumer process is started: the binary and the run's environment.
pub struct Launcher {
    binary: PathBuf,
    env: Vec<(&'static str, String)>,
    dir: PathBuf,
}

/// What a loop runs: a binary, its arguments, and variables that add to (or override) the
/// run's environment.
#[derive(Clone)]
pub struct Program {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
}

/// A consumer process that runs now: enough to signal it and find its consumer id.
#[derive(Clone)]
pub struct Victim {
    pub pid: u32,
    log: PathBuf,
    /// Where this process's lines start in the (shared, appended) log.
    offset: u64,
}

/// One worker's place: the process in it now, restarted after a kill.
pub struct WorkerSlot {
    name: String,
    args: Vec<&'static str>,
    running: tokio::sync::Mutex<Option<(Child, Victim)>>,
}

/// A loop running one command again and again until stopped.
pub struct Loop {
    current: Arc<Mutex<Option<Victim>>>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<LoopReport>,
}

impl Drop for Loop {
    /// A loop left running (a failed test) ends, and its process with it.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How a loop's runs ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopReport {
    pub runs: u32,
    pub failed: u32,
    pub killed: u32,
}

impl Launcher {
    /// Consumers of the queue at `connection` (hosts and chroot) delivering to `url`, their
    /// spans exported to the OTLP receiver at `otlp` (see `spans`).
    pub fn new(connection: &str, (url, otlp): (&str, &str), scratch: &Scratch) -> Self {
        let timeout = HTTP_TIMEOUT.as_millis() as u64;
        let routes = serde_json::json!({
            "routes": {
                (crate::producer::LIMITED_TYPE): {
                    "sink": "http", "url": url, "timeout_ms": timeout,
                    "max_in_flight": LIMITED_MAX_IN_FLIGHT,
                    "rate": format!("{LIMITED_RATE_PER_S}/s"),
                },
                (crate::producer::TENANT_TYPE): {
                    "sink": "http", "url": url, "timeout_ms": timeout,
                    "per_key": {"max_in_flight": TENANT_MAX_PER_KEY},
                }
            },
            "default": {"sink": "http", "url": url, "timeout_ms": timeout},
        });
        let env = vec![
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            ("ZOOKEEPER_CONNECTION_STRING", connection.to_string()),
            ("LEASE_TIMEOUT_MS", millis(crate::tree::LEASE_TIMEOUT)),
            (
                "ZOOKEEPER_SESSION_TIMEOUT_MS",
                millis(crate::tree::SESSION_TIMEOUT),
            ),
            ("ROUTES", routes.to_string()),
            ("BACKOFF_BASE_MS", millis(BACKOFF_BASE)),
            ("BACKOFF_MAX_MS", millis(BACKOFF_MAX)),
            ("MAX_ATTEMPTS", MAX_ATTEMPTS.to_string()),
            ("MAX_TASKS_PER_RUN", MAX_TASKS_PER_RUN.to_string()),
            ("DRAIN_CONCURRENCY", DRAIN_CONCURRENCY.to_string()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.to_string()),
            ("OTEL_SERVICE_NAME", "chaos".to_string()),
            // Completion records, with the receiver's answers as results (`results`).
            ("KEEP_DONE", crate::results::KEEP_DONE.to_string()),
            ("RUST_LOG", RUST_LOG.to_string()),
        ];
        Launcher {
            binary: harness::binary("event-bridge"),
            env,
            dir: scratch.path().to_path_buf(),
        }
    }

    /// The run's environment without the variables `names`, for a program started apart.
    pub fn env_without(&self, names: &[&str]) -> Vec<(&'static str, String)> {
        (self.env.iter())
            .filter(|(name, _)| !names.contains(name))
            .cloned()
            .collect()
    }

    /// Where the consumers' logs go.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `event-bridge <args>`.
    pub fn event_bridge(&self, args: &[&str]) -> Program {
        Program {
            binary: self.binary.clone(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
        }
    }

    /// Starts `event-bridge <args>`, as [`Launcher::spawn_program`] does.
    fn spawn(&self, name: &str, args: &[&str]) -> (Child, Victim) {
        self.spawn_program(name, &self.event_bridge(args))
    }

    /// Starts `program`, its stderr appended to `<name>.log`, stdout to `<name>.out`; the
    /// environment is the run's only (nothing inherited but `PATH`), with the program's own.
    fn spawn_program(&self, name: &str, program: &Program) -> (Child, Victim) {
        let log = self.dir.join(format!("{name}.log"));
        let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
        let child = Command::new(&program.binary)
            .args(&program.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(program.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(append(&self.dir.join(format!("{name}.out"))))
            .stderr(append(&log))
            .kill_on_drop(true)
            .spawn()
            .expect("start event-bridge");
        let pid = child.id().expect("a running child has a pid");
        (child, Victim { pid, log, offset })
    }

    /// Runs `event-bridge <args>` to its end (an operator's command), logging as `name`;
    /// its exit status and stdout. A hang guard of a minute.
    pub async fn run(&self, name: &str, args: &[&str]) -> (Option<ExitStatus>, String) {
        let out = self.dir.join(format!("{name}.out"));
        let before = std::fs::metadata(&out).map_or(0, |m| m.len() as usize);
        let (mut child, _) = self.spawn(name, args);
        let status = match tokio::time::timeout(STOP_GUARD, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.kill().await;
                None
            }
        };
        let text = std::fs::read(&out).unwrap_or_default();
        let text = String::from_utf8_lossy(text.get(before..).unwrap_or_default()).into_owned();
        (status, text)
    }

    /// Every log file of the consumers.
    pub fn logs(&self) -> Vec<PathBuf> {
        let entries = std::fs::read_dir(&self.dir).expect("read the scratch directory");
        let mut logs: Vec<_> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs
    }
}

impl Victim {
    /// The consumer id this process claims tasks as, once it has claimed one.
    pub fn consumer_id(&self) -> Option<String> {
        let text = std::fs::read(&self.log).ok()?;
        let start = usize::try_from(self.offset).ok()?;
        let text = String::from_utf8_lossy(text.get(start..)?).into_owned();
        text.lines()
            .filter(|line| line.contains("task claimed"))
            .find_map(|line| {
                let line: serde_json::Value = serde_json::from_str(line).ok()?;
                Some(line.get("consumer")?.as_str()?.to_string())
            })
    }
}

impl WorkerSlot {
    /// Starts worker `index`.
    pub fn start(launcher: &Launcher, index: usize) -> Self {
        let slot = WorkerSlot {
            name: format!("worker-{index}"),
            args: vec!["worker", "--concurrency", WORKER_CONCURRENCY],
            running: tokio::sync::Mutex::new(None),
        };
        *slot.running.try_lock().expect("a new slot is free") =
            Some(launcher.spawn(&slot.name, &slot.args));
        slot
    }

    pub async fn victim(&self) -> Option<Victim> {
        let running = self.running.lock().await;
        running.as_ref().map(|(_, victim)| victim.clone())
    }

    /// SIGKILLs the worker and reaps it.
    pub async fn kill(&self) {
        if let Some((mut child, _)) = self.running.lock().await.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the worker again (after a kill).
    pub async fn restart(&self, launcher: &Launcher) {
        *self.running.lock().await = Some(launcher.spawn(&self.name, &self.args));
    }

    /// SIGTERM, then waits for it to finish what it holds; SIGKILL after the guard.
    pub async fn stop(&self) -> Option<ExitStatus> {
        let (mut child, victim) = self.running.lock().await.take()?;
        signal(victim.pid, "TERM");
        match tokio::time::timeout(STOP_GUARD, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.kill().await;
                None
            }
        }
    }
}

impl Loop {
    /// A drain loop: `process --drain --max-tasks 200`, again and again.
    pub fn drain(launcher: Arc<Launcher>, index: usize) -> Self {
        let program =
            launcher.event_bridge(&["process", "--drain", "--max-tasks", DRAIN_MAX_TASKS]);
        Self::start(launcher, format!("drain-{index}"), program, DRAIN_PAUSE)
    }

    /// The scheduled-run loop: `process` (no `--drain`) every second.
    pub fn scheduled(launcher: Arc<Launcher>) -> Self {
        let program = launcher.event_bridge(&["process"]);
        Self::start(launcher, "scheduled".into(), program, SCHEDULED_PAUSE)
    }

    /// The reap loop: `reap` every second.
    pub fn reap(launcher: Arc<Launcher>) -> Self {
        let program = launcher.event_bridge(&["reap"]);
        Self::start(launcher, "reap".into(), program, REAP_PAUSE)
    }

    /// A loop running `program` as `name` again and again, `pause` apart.
    pub fn program(launcher: Arc<Launcher>, name: &str, program: Program, pause: Duration) -> Self {
        Self::start(launcher, name.to_string(), program, pause)
    }

    fn start(launcher: Arc<Launcher>, name: String, program: Program, pause: Duration) -> Self {
        let current: Arc<Mutex<Option<Victim>>> = Arc::default();
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::clone(&current);
        let task = tokio::spawn(async move {
            let mut report = LoopReport::default();
            while !*stopped.borrow() {
                let (mut child, victim) = launcher.spawn_program(&name, &program);
                *shared.lock().expect("loop lock") = Some(victim);
                let status = child.wait().await;
                *shared.lock().expect("loop lock") = None;
                report.count(status.ok());
                let mut stopped = stopped.clone();
                let _ = tokio::time::timeout(pause, stopped.wait_for(|s| *s)).await;
            }
            report
        });
        Loop {
            current,
            stop,
            task,
        }
    }

    /// The process the loop runs now, if one runs.
    pub fn victim(&self) -> Option<Victim> {
        self.current.lock().expect("loop lock").clone()
    }

    /// Sends `signal` to the loop's process if `victim` is still the one running; says
    /// whether it was.
    pub fn signal(&self, victim: &Victim, name: &str) -> bool {
        let current = self.current.lock().expect("loop lock");
        let running = current.as_ref().is_some_and(|c| c.pid == victim.pid);
        if running {
            signal(victim.pid, name);
        }
        running
    }

    /// Lets the run in progress end by itself, starts no other; fails after the guard (the
    /// loop's process is then killed as the loop is dropped).
    pub async fn stop(&mut self) -> LoopReport {
        let _ = self.stop.send(true);
        match tokio::time::timeout(STOP_GUARD, &mut self.task).await {
            Ok(report) => report.expect("loop task"),
            Err(_) => panic!("a consumer loop did not stop within {STOP_GUARD:?}"),
        }
    }
}

impl LoopReport {
    fn count(&mut self, status: Option<ExitStatus>) {
        use std::os::unix::process::ExitStatusExt;
        self.runs += 1;
        match status {
            Some(s) if s.success() => {}
            Some(s) if s.signal().is_some() => self.killed += 1,
            _ => self.failed += 1,
        }
    }
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`, `TERM`) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

fn append(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a log file")
}

fn millis(duration: Duration) -> String {
    duration.as_millis().to_string()
}
