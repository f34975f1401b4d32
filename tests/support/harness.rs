//! The test harness every test target shares: a fresh chroot per test, consumers on their own
//! sessions, helpers to publish and to read the tree, the binaries Cargo built, and a TCP proxy
//! that can cut the link to ZooKeeper.
//!
//! Each test target needs the ZooKeeper `make test` starts (`make zk-up`, address in
//! `ZK_TEST_ADDRESS`, default 127.0.0.1:2181); the failure message says so when it is missing.
//!
//! A test that runs a blocking command (`std::process`: a producer in another language, the
//! CLI) while it holds a ZooKeeper session runs on the multi-thread runtime
//! (`#[tokio::test(flavor = "multi_thread")]`). On the current-thread one the command blocks
//! the session's connection task too: on a busy machine a few slow commands in a row outlast
//! the client's connection timeout, and it drops the connection under the test.

pub mod kick_trigger;
pub mod lambda_api;
pub mod lambda_invoke;
pub mod otlp;
pub mod prometheus;
pub mod vercel;
pub mod wait;

pub use wait::{Tries, eventually, poll, real_time};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::{Config, Envelope, Handler, ProcessReport, Queue, RunOptions, process};
use serde_json::json;
use tokio::time::Instant;
use zookeeper_client as zk;

/// The ZooKeeper the tests use.
pub fn zk_address() -> String {
    std::env::var("ZK_TEST_ADDRESS").unwrap_or_else(|_| "127.0.0.1:2181".into())
}

/// One test's own corner of ZooKeeper.
pub struct TestQueue {
    /// Connection string with the chroot, for anything that connects by itself.
    pub config: Config,
    /// A queue on the test's first session.
    pub queue: Queue,
    /// A raw client inside the chroot, for looking at and writing the tree directly.
    pub raw: zk::Client,
}

impl TestQueue {
    /// A fresh chroot with the default layout created.
    pub async fn new() -> Self {
        Self::with(|_| {}).await
    }

    /// As [`TestQueue::new`], with config changes (lease timeout, attempts, …).
    pub async fn with(change: impl FnOnce(&mut Config)) -> Self {
        let chroot = format!("/eb-tests/{}", uuid_like());
        let root = raw_client(&zk_address()).await;
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        root.mkdir(&chroot, &options).await.expect("create chroot");
        let mut config = Config::default();
        config.zookeeper = format!("{}{chroot}", zk_address());
        change(&mut config);
        let queue = consumer(&config, "test").await;
        queue.ensure_paths().await.expect("base paths");
        // On a session of its own, with the test's credentials when it sets any.
        let raw = event_bridge::session::connect(&config)
            .await
            .expect("raw client");
        TestQueue { config, queue, raw }
    }

    /// Another consumer on a session of its own.
    pub async fn consumer(&self, name: &str) -> Queue {
        consumer(&self.config, name).await
    }

    /// Publishes `n` envelopes of type `test` with payload `{"n": i}`.
    pub async fn publish(&self, n: usize) -> Vec<String> {
        let envelopes: Vec<_> = (0..n)
            .map(|i| Envelope::new("test", json!({ "n": i })))
            .collect();
        self.queue.publish_many(&envelopes).await.expect("publish")
    }

    /// Children of `ROOT/<dir>`, sorted.
    pub async fn children(&self, dir: &str) -> Vec<String> {
        let path = format!("{}/{dir}", self.config.root)
            .trim_end_matches('/')
            .to_string();
        let mut names = self.raw.list_children(&path).await.expect("list");
        names.sort();
        names
    }

    /// Tasks waiting under `delayed/`, as paths below the root (`delayed/<bucket>/<node>`).
    pub async fn waiting(&self) -> Vec<String> {
        let mut waiting = Vec::new();
        for bucket in self.children("delayed").await {
            for node in self.children(&format!("delayed/{bucket}")).await {
                waiting.push(format!("delayed/{bucket}/{node}"));
            }
        }
        waiting
    }

    /// Where task `name` is now, as a path below the root: `tasks/<name>`, or its waiting node
    /// under `delayed/` when it waits out a backoff.
    pub async fn find_task(&self, name: &str) -> String {
        let path = format!("{}/tasks/{name}", self.config.root);
        if self.raw.check_stat(&path).await.unwrap().is_some() {
            return format!("tasks/{name}");
        }
        let suffix = format!("~{name}");
        self.waiting()
            .await
            .into_iter()
            .find(|w| w.ends_with(&suffix))
            .unwrap_or_else(|| panic!("task {name} is neither pending nor waiting"))
    }

    /// The JSON in `ROOT/<path>`.
    pub async fn read_json(&self, path: &str) -> serde_json::Value {
        let full = format!("{}/{path}", self.config.root);
        let (data, _) = self.raw.get_data(&full).await.expect("get");
        // Records of deeply nested bodies nest past serde_json's own limit.
        event_bridge::task::json::parse(std::str::from_utf8(&data).expect("utf-8")).expect("json")
    }

    /// ZooKeeper's time now.
    pub async fn now(&self) -> ZkTime {
        self.queue.server_time().await.expect("clock")
    }

    /// A moment by ZooKeeper's clock, driven by the test and standing still: 1 ms after the
    /// lease of task `name` expires (its last write's `mtime` plus the lease timeout). A reaper
    /// judging at it frees that lease, and no lease written later, without the test waiting.
    pub async fn past_lease_of(&self, name: &str) -> ZkTime {
        let path = format!("{}/leases/{name}", self.config.root);
        let (_, stat) = self.raw.get_data(&path).await.expect("the lease");
        let timeout = self.config.lease_timeout.as_millis() as i64;
        ZkTime::at(stat.mtime + timeout + 1)
    }
}

/// Ends a session on the server, as an expiry does: a second client joins the session and
/// closes it (dropping a client closes its session). The session's own client learns it when
/// it next talks to the server.
pub async fn end_session(session: &zk::SessionInfo) {
    let twin = zk::Client::connector()
        .with_session(session.clone())
        .connect(&zk_address())
        .await
        .expect("join the session");
    drop(twin);
    // The close is sent by the dropped client's task: wait until the server has it, by
    // joining once more, which then fails.
    eventually("the session to end", || async {
        let again = zk::Client::connector()
            .with_session(session.clone())
            .with_connection_timeout(Duration::from_millis(500))
            .connect(&zk_address())
            .await;
        again.is_err()
    })
    .await;
}

/// A queue for `config` on a new session (with its kicks when `config` has them on).
pub async fn consumer(config: &Config, name: &str) -> Queue {
    let client = event_bridge::session::connect(config)
        .await
        .expect("connect");
    event_bridge::kick::attach(
        Queue::new(client, config, Queue::new_consumer_id(name)),
        config,
    )
}

/// Run options with no deadline to speak of.
pub fn options(max_tasks: u32, concurrency: usize) -> RunOptions {
    RunOptions {
        max_tasks,
        concurrency,
        deadline: Instant::now() + Duration::from_secs(120),
        margin: Duration::from_secs(1),
    }
}

/// Runs `process_events`' work once.
pub async fn run<H: Handler>(queue: &Queue, handler: &H, max_tasks: u32) -> ProcessReport {
    process::run(queue, handler, &options(max_tasks, 16))
        .await
        .expect("run")
}

/// A handler that records every task it sees and succeeds.
#[derive(Clone, Default)]
pub struct Recorder {
    pub seen: Arc<Mutex<Vec<event_bridge::Task>>>,
}

impl Recorder {
    pub fn names(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Handler for Recorder {
    async fn handle(&self, task: &event_bridge::Task) -> Result<(), event_bridge::HandlerError> {
        self.seen.lock().unwrap().push(task.clone());
        Ok(())
    }
}

/// A name no other test run uses.
pub fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t{nanos:x}{:04x}", fastrand::u16(..))
}

/// The workspace's root directory.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A client of ZooKeeper at `address` (a chroot included), for writing and reading the tree
/// directly. Fails saying what to start when ZooKeeper does not answer.
pub async fn raw_client(address: &str) -> zk::Client {
    match zk::Client::connect(address).await {
        Ok(client) => client,
        Err(e) => panic!(
            "these tests need a ZooKeeper at {address} ({e}): run `make zk-up` (make test does), \
             or point ZK_TEST_ADDRESS at one"
        ),
    }
}

/// The path of workspace binary `bin`, as `cargo build --workspace --all-targets` left it beside the
/// test executables (`target/<profile>/`). Tests never build it themselves: a missing binary
/// fails the test saying how to build it.
pub fn binary(bin: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<bin>
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target directory");
    let path = dir.join(bin);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first with `cargo build --workspace --all-targets` \
         (make test does)",
        path.display()
    );
    path
}

/// A TCP proxy in front of the test ZooKeeper that a test can disturb, as networks do:
///
/// - [`Proxy::set_cut`]: closes every connection and refuses new ones (a partition);
/// - [`Proxy::set_stalled`]: holds the server's replies back until released (a slow link:
///   requests still reach the server and are applied);
/// - [`Proxy::lose_next_reply`]: the next reply the server sends is never delivered: the
///   connection drops instead (the request was applied, its answer lost);
/// - [`Proxy::lose_next_request`]: the next request the client sends never reaches the
///   server: the connection drops instead (nothing applied, the client told the link died);
/// - [`Proxy::hold_delete_of`]: the client's delete of a path (and what it sends after it) is
///   held back until [`Proxy::release`] (a request late on a slow link, at a set point);
/// - [`Proxy::hold_next_multi`]: the same for the client's next multi-op (a write decided on
///   what it read, sent late).
pub struct Proxy {
    pub address: String,
    state: Arc<ProxyState>,
}

struct ProxyState {
    /// Whether the link is cut and whether replies are held: every relay waits on changes.
    link: tokio::sync::watch::Sender<Link>,
    lose_next: std::sync::atomic::AtomicBool,
    lose_next_request: std::sync::atomic::AtomicBool,
    /// Replies whose connection was dropped instead.
    lost: std::sync::atomic::AtomicUsize,
    /// Connections refused while the link was cut.
    refused: std::sync::atomic::AtomicUsize,
    /// A path whose delete request is held back, and whether one is held now.
    hold: tokio::sync::watch::Sender<Hold>,
}

/// The request [`Proxy::hold_delete_of`] or [`Proxy::hold_next_multi`] waits for.
#[derive(Clone, Default)]
struct Hold {
    /// The path whose request of `opcode` is held (wire form: after the chroot).
    path: Option<String>,
    /// The opcode held at `path`: a plain delete (2) or a `setData` (5).
    opcode: [u8; 4],
    /// Whether the next multi-op (opcode 14) is held.
    multi: bool,
    /// A matching request arrived and waits.
    holding: bool,
}

impl Hold {
    /// Whether a request is to be held, or is held.
    fn armed(&self) -> bool {
        self.path.is_some() || self.multi
    }
}

#[derive(Clone, Copy, Default)]
struct Link {
    cut: bool,
    stalled: bool,
}

impl Proxy {
    pub async fn start() -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let state = Arc::new(ProxyState {
            link: tokio::sync::watch::Sender::new(Link::default()),
            lose_next: Default::default(),
            lose_next_request: Default::default(),
            lost: Default::default(),
            refused: Default::default(),
            hold: tokio::sync::watch::Sender::new(Hold::default()),
        });
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if shared.link.borrow().cut {
                    shared.refused.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                tokio::spawn(relay(inbound, shared.clone()));
            }
        });
        Proxy { address, state }
    }

    /// `t`'s config (its chroot), connecting through this proxy.
    pub fn config_for(&self, t: &TestQueue) -> Config {
        let chroot = t.config.zookeeper.split_once('/').map(|(_, c)| c);
        let mut config = t.config.clone();
        config.zookeeper = format!("{}/{}", self.address, chroot.expect("a chroot"));
        config
    }

    /// Cuts or restores the link.
    pub fn set_cut(&self, cut: bool) {
        self.state.link.send_modify(|link| link.cut = cut);
    }

    /// Holds the server's replies back (true) or lets them through, held ones first (false).
    pub fn set_stalled(&self, stalled: bool) {
        self.state.link.send_modify(|link| link.stalled = stalled);
    }

    /// Drops the connection instead of delivering the server's next reply.
    pub fn lose_next_reply(&self) {
        self.state
            .lose_next
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Drops the connection instead of passing the client's next request on.
    pub fn lose_next_request(&self) {
        self.state
            .lose_next_request
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds back the client's next plain delete of a path ending in `path` (and everything
    /// the client sends after it on that connection) until [`Proxy::release`].
    pub fn hold_delete_of(&self, path: &str) {
        self.state.hold.send_replace(Hold {
            path: Some(path.to_string()),
            opcode: [0, 0, 0, 2],
            ..Hold::default()
        });
    }

    /// Holds back the client's next `setData` of a path ending in `path` (and everything the
    /// client sends after it on that connection) until [`Proxy::release`].
    pub fn hold_set_data_of(&self, path: &str) {
        self.state.hold.send_replace(Hold {
            path: Some(path.to_string()),
            opcode: [0, 0, 0, 5],
            ..Hold::default()
        });
    }

    /// Holds back the client's next multi-op (and everything the client sends after it on
    /// that connection) until [`Proxy::release`].
    pub fn hold_next_multi(&self) {
        self.state.hold.send_replace(Hold {
            multi: true,
            ..Hold::default()
        });
    }

    /// Waits until the request [`Proxy::hold_delete_of`] or [`Proxy::hold_next_multi`] names
    /// arrived and is held.
    pub async fn holding(&self) {
        let mut hold = self.state.hold.subscribe();
        hold.wait_for(|h| h.holding)
            .await
            .expect("the proxy's state");
    }

    /// Lets the held request (and what came after it) through.
    pub fn release(&self) {
        self.state.hold.send_replace(Hold::default());
    }

    /// How many replies (and requests) were lost so far.
    pub fn replies_lost(&self) -> usize {
        self.state.lost.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many connections were refused while the link was cut.
    pub fn refused(&self) -> usize {
        self.state.refused.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Relays one connection both ways until either side closes, the link is cut, or a reply is
/// to be lost.
async fn relay(inbound: tokio::net::TcpStream, state: Arc<ProxyState>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(outbound) = tokio::net::TcpStream::connect(zk_address()).await else {
        return;
    };
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let requests = async {
        let mut buf = vec![0; 64 * 1024];
        let mut frames = Frames::default();
        while let Ok(n) = client_read.read(&mut buf).await {
            if n > 0 && state.lose_next_request.swap(false, Ordering::SeqCst) {
                state.lost.fetch_add(1, Ordering::SeqCst);
                break;
            }
            if n == 0 {
                break;
            }
            for frame in frames.push(&buf[..n]) {
                hold_if_asked(&state, &frame).await;
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    };
    let replies = async {
        let mut link = state.link.subscribe();
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if state.lose_next.swap(false, Ordering::SeqCst) {
                state.lost.fetch_add(1, Ordering::SeqCst);
                break;
            }
            // Held while stalled (a cut ends the relay below).
            if link.wait_for(|l| !l.stalled || l.cut).await.is_err() {
                break;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let mut link = state.link.subscribe();
    let cut = link.wait_for(|l| l.cut);
    tokio::select! { _ = requests => {}, _ = replies => {}, _ = cut => {} }
}

/// Waits while `frame` is the request [`Proxy::hold_delete_of`] or [`Proxy::hold_next_multi`]
/// asked to hold, until released.
async fn hold_if_asked(state: &ProxyState, frame: &[u8]) {
    let hold = state.hold.borrow().clone();
    let asked = hold
        .path
        .is_some_and(|p| is_request_of(frame, hold.opcode, &p))
        || (hold.multi && !hold.holding && opcode_of(frame) == Some([0, 0, 0, 14]));
    if !asked {
        return;
    }
    state.hold.send_modify(|h| h.holding = true);
    let mut hold = state.hold.subscribe();
    let _ = hold.wait_for(|h| !h.armed()).await;
}

/// The opcode of request `frame` (length prefix included; header: xid, opcode).
fn opcode_of(frame: &[u8]) -> Option<[u8; 4]> {
    frame.get(8..12)?.try_into().ok()
}

/// Whether `frame` (length prefix included) is a request of `opcode` (header: xid, opcode;
/// then the path) on a path ending in `path`.
fn is_request_of(frame: &[u8], opcode_wanted: [u8; 4], path: &str) -> bool {
    let Some(body) = frame.get(4..) else {
        return false;
    };
    let (Some(opcode), Some(len)) = (body.get(4..8), body.get(8..12)) else {
        return false;
    };
    let len = u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
    opcode == opcode_wanted
        && (body.get(12..12 + len)).is_some_and(|p| p.ends_with(path.as_bytes()))
}

/// The client's byte stream cut into its frames (a 4-byte length, then that many bytes).
#[derive(Default)]
struct Frames {
    pending: Vec<u8>,
}

impl Frames {
    /// Takes `bytes` in; returns the frames now whole.
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(bytes);
        let mut whole = Vec::new();
        while let Some(len) = self.pending.get(..4) {
            let len = 4 + u32::from_be_bytes(len.try_into().expect("four bytes")) as usize;
            if self.pending.len() < len {
                break;
            }
            whole.push(self.pending.drain(..len).collect());
        }
        whole
    }
}

/// Restraints whose default route limits each concurrency key with `per_key` (and the route
/// itself with `route`).
pub fn per_key_restraints(
    route: event_bridge::limit::Limit,
    per_key: event_bridge::limit::KeyLimit,
) -> event_bridge::queue::Restraints {
    event_bridge::queue::Restraints {
        limits: event_bridge::limit::RouteLimits {
            default: event_bridge::limit::Limit {
                per_key: Some(per_key),
                ..route
            },
            ..Default::default()
        },
        ..Default::default()
    }
}
