//! A real three-server ZooKeeper ensemble on loopback, run from Debian's package
//! (`QuorumPeerMain`), on free ports chosen at start: each server with its `myid`, its config
//! and its log in the run's scratch directory. Servers can be killed (SIGKILL) and started
//! again on their data; every server is killed when the ensemble is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::scratch::Scratch;

const JAR: &str = "/usr/share/java/zookeeper.jar";
const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
const SERVERS: usize = 3;

/// The three servers.
pub struct Ensemble {
    servers: Vec<Server>,
}

struct Server {
    id: usize,
    client_port: u16,
    config: PathBuf,
    log: PathBuf,
    process: Mutex<Option<Child>>,
}

impl Ensemble {
    /// Writes the configs, starts the servers and waits until one leads and two follow.
    pub async fn start(scratch: &Scratch) -> Self {
        assert!(
            std::path::Path::new(JAR).is_file(),
            "{JAR} is missing: install Debian's zookeeper package (`make zk-up` does)"
        );
        let ports = free_ports(3 * SERVERS);
        let peers: String = (0..SERVERS)
            .map(|i| {
                let (peer, election) = (ports[SERVERS + i], ports[2 * SERVERS + i]);
                format!("server.{}=127.0.0.1:{peer}:{election}\n", i + 1)
            })
            .collect();
        let servers = (0..SERVERS)
            .map(|i| Server::prepare(scratch, i + 1, ports[i], &peers))
            .collect();
        let ensemble = Ensemble { servers };
        for index in 0..SERVERS {
            ensemble.restart(index);
        }
        ensemble.wait_serving(Duration::from_secs(60)).await;
        ensemble
    }

    /// The client addresses, comma-separated, as a connection string starts.
    pub fn hosts(&self) -> String {
        let hosts: Vec<_> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect();
        hosts.join(",")
    }

    /// What each server says it is (`leader`, `follower`), or `None` when it does not serve.
    pub async fn modes(&self) -> Vec<Option<String>> {
        let asked = self.servers.iter().map(|s| mode(s.client_port));
        futures::future::join_all(asked).await
    }

    /// The index of the server that leads, if one does.
    pub async fn leader(&self) -> Option<usize> {
        let modes = self.modes().await;
        modes.iter().position(|m| m.as_deref() == Some("leader"))
    }

    /// Waits until one server leads and the others follow; fails after `guard` (a hang guard),
    /// with the last lines of each server's log.
    pub async fn wait_serving(&self, guard: Duration) {
        let mut tries = harness::Tries::within(guard);
        let mut modes = Vec::new();
        while tries.again().await {
            modes = self.modes().await;
            let count = |want: &str| modes.iter().filter(|m| m.as_deref() == Some(want)).count();
            if count("leader") == 1 && count("follower") == SERVERS - 1 {
                return;
            }
        }
        panic!(
            "the ensemble did not form within {guard:?}: modes {modes:?}\n{}",
            self.log_tails()
        );
    }

    /// SIGKILLs server `index` and reaps it.
    pub fn kill(&self, index: usize) {
        let mut process = self.servers[index].process.lock().expect("server lock");
        if let Some(mut child) = process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts server `index` (again) on its data directory.
    pub fn restart(&self, index: usize) {
        let server = &self.servers[index];
        let child = server.spawn();
        *server.process.lock().expect("server lock") = Some(child);
    }

    /// How many sessions, over all servers, watch the znode at `path` (a full path, chroot
    /// included), by the four-letter word `wchp`.
    pub async fn watchers(&self, path: &str) -> usize {
        let asked = self
            .servers
            .iter()
            .map(|s| four_letters(s.client_port, "wchp"));
        let replies = futures::future::join_all(asked).await;
        replies
            .iter()
            .flatten()
            .map(|reply| sessions_under(reply, path))
            .sum()
    }

    /// Server `index`'s client port.
    pub fn port(&self, index: usize) -> u16 {
        self.servers[index].client_port
    }

    /// Every server's client port.
    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.client_port).collect()
    }

    /// Server `index`'s number in the ensemble (`myid`).
    pub fn id(&self, index: usize) -> usize {
        self.servers[index].id
    }

    fn log_tails(&self) -> String {
        let tail = |s: &Server| {
            let text = std::fs::read_to_string(&s.log).unwrap_or_default();
            let lines: Vec<_> = text.lines().rev().take(15).collect();
            let lines: Vec<_> = lines.into_iter().rev().collect();
            format!(
                "--- server {} ({}):\n{}",
                s.id,
                s.log.display(),
                lines.join("\n")
            )
        };
        self.servers.iter().map(tail).collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for index in 0..self.servers.len() {
            self.kill(index);
        }
    }
}

impl Server {
    /// Writes server `id`'s data directory, `myid` and config.
    fn prepare(scratch: &Scratch, id: usize, client_port: u16, peers: &str) -> Self {
        let dir = scratch.join(&format!("zk{id}"));
        let data = dir.join("data");
        std::fs::create_dir_all(&data).expect("create a server's data directory");
        std::fs::write(data.join("myid"), format!("{id}\n")).expect("write myid");
        let config = dir.join("zoo.cfg");
        let text = format!(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={client_port}\n\
             clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n\
             4lw.commands.whitelist=*\n{peers}",
            data.display()
        );
        std::fs::write(&config, text).expect("write zoo.cfg");
        Server {
            id,
            client_port,
            config,
            log: dir.join("zookeeper.log"),
            process: Mutex::new(None),
        }
    }

    fn spawn(&self) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open a server's log");
        Command::new("java")
            .args([
                "-Xmx256m",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                CLASSPATH,
            ])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("start java (Debian's zookeeper package needs a JRE)")
    }
}

/// The `Mode:` a server reports to the four-letter word `srvr`, if it answers.
async fn mode(port: u16) -> Option<String> {
    let reply = four_letters(port, "srvr").await?;
    let line = reply.lines().find_map(|l| l.strip_prefix("Mode: "))?;
    Some(line.trim().to_string())
}

/// A server's answer to a four-letter word, if it answers within two seconds.
async fn four_letters(port: u16, word: &str) -> Option<String> {
    let ask = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(word.as_bytes()).await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// The sessions listed under `path` in a `wchp` answer (a path line, then one indented
/// session id per line).
fn sessions_under(reply: &str, path: &str) -> usize {
    let mut lines = reply.lines().skip_while(|l| l.trim_end() != path).skip(1);
    let mut count = 0;
    while lines
        .next()
        .is_some_and(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
    {
        count += 1;
    }
    count
}

/// `n` ports free on loopback now (all bound at once, so they differ, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
}
