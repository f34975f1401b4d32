//! Kicks: with `EVENT_BRIDGE_KICK=on` and no worker, cron tick or drain loop, a published task
//! still runs. On a queue root of its own in the same ensemble, under the same leader kills, the
//! only consumer is process_events' Vercel build served locally (`process_events_vercel`, as the
//! function), started by the kicks of library publishes; beside it a reap loop frees the
//! leases of a function that died. Its tasks go to a receiver of their own, which fails a share
//! of the requests as the main one does (retries go to `delayed/`, where only the reaper moves
//! them back and only a kick runs them again).
//!
//! Publishers: bursts of 1 to 6 concurrent library publishes every [`EVERY`], from three
//! queues, each kicking as users' publishes do (`KICK_WAIT_MS` at its default, so a publish
//! returns while its drain goes on). The function is SIGKILLed twice mid-run and down for
//! [`DOWN`] each time (kicks sent then fail and the node stands, to be taken over once older
//! than `KICK_STALE_MS`); a kick with a forged secret is sent too. Once the traffic is over,
//! a closing publish each [`CLOSE_EVERY`] until the root is empty: its kick (or a takeover)
//! is what runs what the faults left.
//!
//! Judged: every task published there was answered 200, and its root is empty, with kicked
//! invocations as its only consumers; every invocation came from a kick, so there are no
//! more of them than publishes; the forged kick was refused and ran nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use event_bridge::config::KickConfig;
use event_bridge::{Config, Envelope, Queue, Secret};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::consumers::{HTTP_TIMEOUT, Launcher, Loop};
use crate::receiver::{LimitedRoute, Receiver};

/// The kicked tasks' event type.
const KICKED_TYPE: &str = "chaos.kicked";
/// A burst of publishes every this long, the `n`th of `1 + n % 6` tasks.
const EVERY: Duration = Duration::from_secs(2);
const BURST: usize = 6;
/// The publishers' queues.
const PUBLISHERS: usize = 3;
/// The function's kills: at these fractions of the traffic, down this long each time.
const KILLS: [f64; 2] = [0.3, 0.65];
const DOWN: Duration = Duration::from_secs(4);
/// A kick node older than this is a lost kick (`KICK_STALE_MS`).
const STALE: Duration = Duration::from_secs(3);
/// A kicked drain lingers this long (`KICK_LINGER_MS`).
const LINGER: Duration = Duration::from_millis(500);
/// Between two closing publishes, and how long they may take in all (a hang guard).
const CLOSE_EVERY: Duration = Duration::from_secs(1);
const CLOSE_GUARD: Duration = Duration::from_secs(150);
/// The kicks' secret (`CRON_SECRET`).
const SECRET: &str = "chaos-kick-secret";
/// What the function's log says once per invocation (its summary event).
const SUMMARY: &str = "process_events finished";

/// The function's log: its role.
pub const LOG: &str = "kicked";

/// The kicked root's queue: the run's, at a root of its own, with kicks on to `port`.
pub fn config(main: &Config, port: u16) -> Config {
    let mut config = main.clone();
    config.root = format!("{}-kicked", main.root);
    config.cron_secret = Some(Secret::new(SECRET));
    config.kick = Some(KickConfig {
        url: trigger_url(port),
        lambda_endpoint: None,
        stale_after: STALE,
        wait: Duration::from_secs(1),
        linger: LINGER,
    });
    config
}

fn trigger_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/api/process_events_vercel?drain=1")
}

/// The kicked root's parts: the function (restarted after each kill), its receiver, and a
/// reap loop.
pub struct Kicked {
    pub config: Config,
    pub receiver: Receiver,
    function: tokio::sync::Mutex<Function>,
    reaper: tokio::sync::Mutex<Loop>,
}

/// process_events' Vercel build, listening on a port of its own.
struct Function {
    port: u16,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
    child: Option<Child>,
    kills: u32,
}

impl Function {
    async fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the function's log");
        let child = Command::new(harness::binary("process_events_vercel"))
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start process_events_vercel");
        self.child = Some(child);
        let address = format!("127.0.0.1:{}", self.port);
        let mut tries = harness::Tries::within(Duration::from_secs(60));
        while tries.again().await {
            if tokio::net::TcpStream::connect(&address).await.is_ok() {
                return;
            }
        }
        panic!("process_events_vercel did not listen on {address}");
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
            self.kills += 1;
        }
    }
}

impl Kicked {
    /// Starts the function and the reap loop of the kicked root of `main`'s run.
    pub async fn start(launcher: Arc<Launcher>, main: &Config) -> Self {
        let port = harness::vercel::free_port();
        let config = config(main, port);
        let receiver = Receiver::start(LimitedRoute {
            event_type: "chaos.none".into(),
            max_in_flight: 1,
            timeout: HTTP_TIMEOUT,
            tenant_type: "chaos.none".into(),
            per_key: 1,
        })
        .await;
        let routes = serde_json::json!({
            "default": {
                "sink": "http", "url": receiver.url(),
                "timeout_ms": HTTP_TIMEOUT.as_millis() as u64,
            },
        });
        let root = ("EVENT_BRIDGE_ROOT", config.root.clone());
        let mut env = launcher.env_without(&["ROUTES", "OTEL_EXPORTER_OTLP_ENDPOINT"]);
        env.extend([
            root.clone(),
            ("ROUTES", routes.to_string()),
            ("VERCEL_DEV_PORT", port.to_string()),
            ("CRON_SECRET", SECRET.to_string()),
            ("EVENT_BRIDGE_KICK", "on".to_string()),
            ("EVENT_BRIDGE_KICK_URL", trigger_url(port)),
            ("KICK_STALE_MS", STALE.as_millis().to_string()),
            ("KICK_LINGER_MS", LINGER.as_millis().to_string()),
            ("TIME_BUDGET_MS", "10000".to_string()),
            (
                "RUST_LOG",
                format!(
                    "{},process_events=info,event_bridge::process=info",
                    crate::consumers::RUST_LOG
                ),
            ),
        ]);
        let mut function = Function {
            port,
            env,
            log: launcher.dir().join(format!("{LOG}.log")),
            child: None,
            kills: 0,
        };
        function.start().await;
        let mut reap = launcher.event_bridge(&["reap"]);
        reap.env.push(root);
        let reaper = Loop::program(launcher, "reap-kicked", reap, Duration::from_secs(1));
        Kicked {
            config,
            receiver,
            function: tokio::sync::Mutex::new(function),
            reaper: tokio::sync::Mutex::new(reaper),
        }
    }

    /// Publishes a burst every [`EVERY`] from `start` for `length`, kills the function at
    /// [`KILLS`] and sends the forged kick halfway; the ids published, and the forged kick's
    /// answer.
    pub async fn traffic(&self, start: Instant, length: Duration) -> (Vec<String>, Option<u16>) {
        let (ids, (), forged) = tokio::join!(
            self.publish(start, length),
            self.faults(start, length),
            async {
                harness::real_time(start + length / 2, "the forged kick's moment").await;
                self.forged_kick().await
            },
        );
        (ids, forged)
    }

    async fn publish(&self, start: Instant, length: Duration) -> Vec<String> {
        let mut queues = Vec::new();
        for _ in 0..PUBLISHERS {
            queues.push(self.connect().await);
        }
        queues[0]
            .ensure_paths()
            .await
            .expect("the kicked root's paths");
        let mut ids = Vec::new();
        let bursts = (length.as_secs_f64() / EVERY.as_secs_f64()) as usize;
        for n in 0..bursts {
            harness::real_time(start + EVERY * n as u32, "a burst a tick").await;
            let envelopes: Vec<Envelope> = (0..1 + n % BURST)
                .map(|i| Envelope::new(KICKED_TYPE, serde_json::json!({ "burst": n, "i": i })))
                .collect();
            let sends = envelopes
                .iter()
                .enumerate()
                .map(|(i, e)| self.publish_one(queues[i % PUBLISHERS].clone(), e));
            futures::future::join_all(sends).await;
            ids.extend(envelopes.into_iter().map(|e| e.id));
        }
        ids
    }

    /// Publishes `envelope` through `queue` (kicking when a kick is due), on a new session
    /// when the one it had expired.
    async fn publish_one(&self, mut queue: Queue, envelope: &Envelope) {
        let mut tries =
            harness::Tries::every(Duration::from_secs(60), crate::producer::RETRY_PAUSE);
        while tries.again().await {
            match queue.publish(envelope).await {
                Ok(_) => return,
                Err(_) if queue.session_over() => queue = self.connect().await,
                Err(_) => {}
            }
        }
        panic!("kicked task {} not published within a minute", envelope.id);
    }

    async fn connect(&self) -> Queue {
        let queue = crate::producer::new_queue(&self.config, "kicker")
            .await
            .expect("a session on the kicked root");
        event_bridge::kick::attach(queue, &self.config)
    }

    async fn faults(&self, start: Instant, length: Duration) {
        for at in KILLS {
            harness::real_time(start + length.mul_f64(at), "the function's kill").await;
            self.function.lock().await.kill().await;
            harness::real_time(Instant::now() + DOWN, "the function stays down").await;
            self.function.lock().await.start().await;
        }
    }

    /// A kick with a wrong secret: its answer's status.
    async fn forged_kick(&self) -> Option<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let port = self.function.lock().await.port;
        let request = concat!(
            "POST /api/process_events_vercel?drain=1 HTTP/1.1\r\nhost: 127.0.0.1\r\n",
            "authorization: Bearer not-the-secret\r\ncontent-length: 0\r\n",
            "connection: close\r\n\r\n"
        );
        let answer = async {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await.ok()?;
            let answer = String::from_utf8_lossy(&answer);
            answer.split_whitespace().nth(1)?.parse().ok()
        };
        tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .ok()
            .flatten()
    }

    /// Once the traffic is over: a closing publish each [`CLOSE_EVERY`] until every one of
    /// `ids` (and of the closers) was answered 200 and the root is empty. The closers' ids, and
    /// whether the root was empty at the end.
    pub async fn close(&self, ids: &[String]) -> (Vec<String>, bool) {
        let queue = self.connect().await;
        let mut closers = Vec::new();
        let mut tries = harness::Tries::every(CLOSE_GUARD, CLOSE_EVERY);
        while tries.again().await {
            let all: Vec<String> = ids.iter().chain(&closers).cloned().collect();
            if self.receiver.succeeded(&all) == all.len() && self.empty(&queue).await {
                return (closers, true);
            }
            let n = closers.len();
            let closer = Envelope::new(KICKED_TYPE, serde_json::json!({ "closer": n }));
            self.publish_one(queue.clone(), &closer).await;
            closers.push(closer.id);
        }
        let empty = self.empty(&queue).await;
        (closers, empty)
    }

    /// Whether nothing is pending, held or waiting on the kicked root.
    async fn empty(&self, queue: &Queue) -> bool {
        let Ok(now) = queue.server_time().await else {
            return false;
        };
        match event_bridge::stats::collect(queue, &now).await {
            Ok(stats) => stats.depth == 0 && stats.leased == 0 && stats.delayed == 0,
            Err(_) => false,
        }
    }

    /// Stops the function and the reap loop; the invocations its log counts, and its kills.
    pub async fn stop(&self) -> (usize, u32) {
        self.reaper.lock().await.stop().await;
        let mut function = self.function.lock().await;
        function.kill().await;
        let kills = function.kills - 1;
        let log = std::fs::read_to_string(&function.log).unwrap_or_default();
        (log.matches(SUMMARY).count(), kills)
    }
}

/// What the kicked root's run came to.
#[derive(Debug)]
pub struct Verdict {
    pub published: usize,
    pub closers: usize,
    pub answered: usize,
    pub empty: bool,
    pub invocations: usize,
    pub kills: u32,
    pub forged: Option<u16>,
}

impl Verdict {
    /// The figures' line, and what broke the contract.
    pub fn judge(&self) -> (String, Vec<String>) {
        let all = self.published + self.closers;
        let line = format!(
            "kicks: {} published + {} closing, {} answered 200, {} invocations ({:.1} per 100 \
             tasks), {} function kills, forged kick answered {:?}",
            self.published,
            self.closers,
            self.answered,
            self.invocations,
            100.0 * self.invocations as f64 / all.max(1) as f64,
            self.kills,
            self.forged,
        );
        let mut broken = Vec::new();
        if self.answered < all {
            broken.push(format!(
                "kicks: {} of {all} kicked tasks never answered 200",
                all - self.answered
            ));
        }
        if !self.empty {
            broken.push("kicks: the kicked root is not empty".into());
        }
        if self.invocations == 0 || self.invocations > all {
            broken.push(format!(
                "kicks: {} invocations for {all} publishes (each comes from a kick: at least \
                 one, at most one a publish)",
                self.invocations
            ));
        }
        if self.forged != Some(401) {
            broken.push(format!(
                "kicks: a kick with a forged secret answered {:?}, not 401",
                self.forged
            ));
        }
        (line, broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Verdict {
        Verdict {
            published: 100,
            closers: 3,
            answered: 103,
            empty: true,
            invocations: 40,
            kills: 2,
            forged: Some(401),
        }
    }

    #[test]
    fn a_run_that_kept_the_contract_breaks_nothing() {
        assert!(kept().judge().1.is_empty());
    }

    #[test]
    fn a_lost_task_an_invocation_storm_or_a_forged_kick_that_ran_is_seen() {
        let lost = Verdict {
            answered: 102,
            ..kept()
        };
        let storm = Verdict {
            invocations: 104,
            ..kept()
        };
        let none = Verdict {
            invocations: 0,
            ..kept()
        };
        let forged = Verdict {
            forged: Some(200),
            ..kept()
        };
        let left = Verdict {
            empty: false,
            ..kept()
        };
        for broken in [lost, storm, none, forged, left] {
            assert_eq!(broken.judge().1.len(), 1, "{broken:?}");
        }
    }
}
