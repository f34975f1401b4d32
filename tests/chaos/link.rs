//! A link from a publisher to the ensemble that catches a publish mid-flight, whatever the
//! machine's speed: its first connection goes to one server and lets a set number of task
//! writes through (sequential creates: a path ending in a lane's prefix, `-` or `.`; and
//! multi-ops), then holds every request (they never reach the server); the server's replies
//! are held from an earlier write on (they never reach the publisher). So when that server is
//! killed, some creates landed with their answers lost, and the ones after them never left.
//! Later connections go to the first server of the ensemble that accepts, untouched.
//!
//! Pings are answered all along: the client drops a connection that stays silent for its
//! connection timeout, and the server a session that does, so without them the connection's
//! end would depend on how soon the kill comes. The link answers each ping itself at once (a
//! reply with xid −2) and passes it on to the server, whose ping replies it drops: a server
//! slow to answer (a leader whose disk is busy answers a ping only after the writes queued
//! before it) cannot make the client drop the connection before the kill, however slow the
//! machine.
//!
//! [`Tap`] is a proxy to the test ZooKeeper (standalone) that does one thing to one chosen
//! request, for the tests that need a fault at an exact step: lose its reply (the request is
//! applied, the connection drops), lose it (the connection drops, nothing applied), refuse it
//! as a throttled server does, or hold it (and every request after it) until released.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The opcodes of ZooKeeper's create requests (`create`, `create2`), and of a multi-op.
const CREATES: [i32; 2] = [1, 15];
const MULTI: i32 = 14;
/// The xid of a ping and of its reply.
const PING_XID: i32 = -2;
/// A ping's reply: its length (16), xid −2, zxid 0 (a client takes no zxid from a ping's reply)
/// and no error.
const PING_REPLY: [u8; 20] = [
    0, 0, 0, 16, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

pub struct Link {
    pub address: String,
    state: Arc<State>,
}

struct State {
    /// The server of the first connection, and every server, by client port.
    first: u16,
    all: Vec<u16>,
    /// Task creates the first connection lets through before it holds every request.
    pass: usize,
    /// From this task create on, the first connection holds the server's replies.
    hold_replies_from: usize,
    creates: AtomicUsize,
    replies_held: AtomicBool,
    /// Requests held (never sent on), and whether the server ended the first connection.
    requests_held: AtomicUsize,
    server_ended: AtomicBool,
    used: AtomicBool,
    passed: Notify,
}

impl Link {
    /// A link whose first connection goes to the server on port `first` (`all`: every server's
    /// port, for later connections) and lets `pass` task creates through, holding replies from
    /// the `hold_replies_from`th on.
    pub async fn start(first: u16, all: Vec<u16>, pass: usize, hold_replies_from: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the link");
        let address = listener.local_addr().expect("its address").to_string();
        let state = Arc::new(State {
            first,
            all,
            pass,
            hold_replies_from,
            creates: AtomicUsize::new(0),
            replies_held: AtomicBool::new(false),
            requests_held: AtomicUsize::new(0),
            server_ended: AtomicBool::new(false),
            used: AtomicBool::new(false),
            passed: Notify::new(),
        });
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let first = !shared.used.swap(true, Ordering::SeqCst);
                tokio::spawn(relay(inbound, shared.clone(), first));
            }
        });
        Link { address, state }
    }

    /// Returns once the first connection let its last task create through.
    pub async fn passed(&self) {
        let notified = self.state.passed.notified();
        if self.state.creates.load(Ordering::SeqCst) >= self.state.pass {
            return;
        }
        notified.await;
    }

    /// Requests the first connection held back.
    pub fn requests_held(&self) -> usize {
        self.state.requests_held.load(Ordering::SeqCst)
    }

    /// Whether the server ended the first connection (rather than the command).
    pub fn server_ended(&self) -> bool {
        self.state.server_ended.load(Ordering::SeqCst)
    }
}

async fn relay(mut inbound: TcpStream, state: Arc<State>, first: bool) {
    if !first {
        for port in &state.all {
            if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", *port)).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                return;
            }
        }
        return;
    }
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", state.first)).await else {
        return;
    };
    let (mut client_read, client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let client_write = tokio::sync::Mutex::new(client_write);
    let requests = async {
        let mut frames = Frames::default();
        let mut connect = true;
        let mut holding = false;
        while let Some(frame) = frames.next(&mut client_read).await {
            // Pings are answered here, and go on while the rest is held.
            let ping = !connect && is_ping(&frame);
            if ping
                && client_write
                    .lock()
                    .await
                    .write_all(&PING_REPLY)
                    .await
                    .is_err()
            {
                return;
            }
            if holding && !ping {
                state.requests_held.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            // The first frame is the session's connect request, with no opcode.
            if !std::mem::take(&mut connect) && is_task_create(&frame) {
                let n = state.creates.fetch_add(1, Ordering::SeqCst) + 1;
                if n >= state.hold_replies_from {
                    state.replies_held.store(true, Ordering::SeqCst);
                }
                holding = n >= state.pass;
            }
            if server_write.write_all(&frame).await.is_err() {
                return;
            }
            if holding {
                state.passed.notify_waiters();
            }
        }
    };
    let replies = async {
        let mut frames = Frames::default();
        // The first frame is the connect response, with no xid.
        let mut connect = true;
        while let Some(frame) = frames.next(&mut server_read).await {
            // The server's ping replies are dropped: the link answered each ping already.
            let ping = !std::mem::take(&mut connect) && is_ping(&frame);
            if ping || state.replies_held.load(Ordering::SeqCst) {
                continue;
            }
            if client_write.lock().await.write_all(&frame).await.is_err() {
                return;
            }
        }
        state.server_ended.store(true, Ordering::SeqCst);
    };
    tokio::select! { _ = requests => {}, _ = replies => {} }
}

/// Whether `frame` (a request after the connect, or a reply after the connect response) is a
/// ping or a ping's reply: both carry xid −2 first.
fn is_ping(frame: &[u8]) -> bool {
    let xid: Option<[u8; 4]> = frame.get(4..8).and_then(|b| b.try_into().ok());
    xid.map(i32::from_be_bytes) == Some(PING_XID)
}

/// The whole frames of a stream, read as they come.
#[derive(Default)]
struct Frames {
    pending: Vec<u8>,
    buf: Vec<u8>,
}

impl Frames {
    /// The next whole frame of `read`; `None` once it ends (or fails).
    async fn next(&mut self, read: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
        if self.buf.is_empty() {
            self.buf = vec![0; 64 * 1024];
        }
        loop {
            if let Some(frame) = take_frame(&mut self.pending) {
                return Some(frame);
            }
            match read.read(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.pending.extend_from_slice(&self.buf[..n]),
            }
        }
    }
}

/// The first whole frame of `pending` (its 4-byte length and body), taken off it.
fn take_frame(pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    let length: [u8; 4] = pending.get(..4)?.try_into().ok()?;
    let end = 4 + i32::from_be_bytes(length).max(0) as usize;
    if pending.len() < end {
        return None;
    }
    Some(pending.drain(..end).collect())
}

/// Whether `frame` (a request after the connect) writes tasks: a create whose path ends in a
/// lane's prefix (`task-`, `high-`, `low-`, a key lane's `key.<key>.`), which ZooKeeper
/// numbers, or a multi-op.
fn is_task_create(frame: &[u8]) -> bool {
    let int = |at: usize| {
        let bytes: Option<[u8; 4]> = frame.get(at..at + 4).and_then(|b| b.try_into().ok());
        bytes.map(i32::from_be_bytes)
    };
    // Length, xid, opcode, then the path (its length and bytes).
    let (Some(opcode), Some(length)) = (int(8), int(12)) else {
        return false;
    };
    if opcode == MULTI {
        return true;
    }
    let path = frame
        .get(16..16 + length.max(0) as usize)
        .unwrap_or_default();
    CREATES.contains(&opcode) && (path.ends_with(b"-") || path.ends_with(b"."))
}

/// What a [`Tap`] does to the request it is armed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Passes it on, and drops the connection instead of delivering its reply: applied, its
    /// answer lost.
    LoseReply,
    /// Drops the connection instead of passing it on: never applied.
    LoseRequest,
    /// Answers it as a throttled server does (`ZTHROTTLEDOP`, −127) without passing it on.
    Throttle,
    /// Holds it, and every request after it on its connection, until [`Tap::release`]; then
    /// the fault armed by then, if it is aimed at it.
    Hold,
}

/// Which request a [`Tap`] is armed for: of an opcode (any, when `None`), carrying `bytes`
/// (a path, or part of one) anywhere in it (any, when empty); the `skip` first such are let
/// through.
#[derive(Clone, Debug, Default)]
pub struct Aim {
    pub opcode: Option<i32>,
    pub bytes: Vec<u8>,
    pub skip: usize,
}

impl Aim {
    /// A create (`create`, `create2`) whose path ends in a lane's prefix (`task-`, …).
    pub fn create() -> Self {
        Aim {
            opcode: Some(15),
            ..Aim::default()
        }
    }

    /// A multi-op (a write of several znodes at once).
    pub fn multi() -> Self {
        Aim {
            opcode: Some(MULTI),
            ..Aim::default()
        }
    }

    /// Any request naming `path` (or a path holding it).
    pub fn naming(path: &str) -> Self {
        Aim {
            bytes: path.as_bytes().to_vec(),
            ..Aim::default()
        }
    }

    fn hits(&self, frame: &[u8]) -> bool {
        let opcode: Option<[u8; 4]> = frame.get(8..12).and_then(|b| b.try_into().ok());
        let opcode = opcode.map(i32::from_be_bytes);
        let opcode_ok = match self.opcode {
            None => opcode != Some(11),
            // `create` and `create2` alike.
            Some(15) => matches!(opcode, Some(1 | 15)),
            Some(code) => opcode == Some(code),
        };
        opcode_ok
            && (self.bytes.is_empty() || frame.windows(self.bytes.len()).any(|w| w == self.bytes))
    }
}

/// A proxy in front of the test ZooKeeper that does a [`Fault`] to one request (see the module
/// documentation), and can refuse new connections for a while.
pub struct Tap {
    pub address: String,
    state: Arc<TapState>,
}

#[derive(Default)]
struct TapState {
    /// The armed fault and its aim, until it fires.
    armed: std::sync::Mutex<Option<(Aim, Fault)>>,
    fired: AtomicBool,
    fired_now: Notify,
    released: AtomicBool,
    release: Notify,
    refusing: AtomicBool,
}

impl Tap {
    /// A tap in front of the ZooKeeper at `target`, doing nothing until armed.
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the tap");
        let address = listener.local_addr().expect("its address").to_string();
        let state = Arc::new(TapState::default());
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if shared.refusing.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                tokio::spawn(tap_relay(inbound, target.clone(), shared.clone()));
            }
        });
        Tap { address, state }
    }

    /// Arms `fault` for the next request `aim` hits.
    pub fn arm(&self, aim: Aim, fault: Fault) {
        self.state.fired.store(false, Ordering::SeqCst);
        self.state.released.store(false, Ordering::SeqCst);
        *self.state.armed.lock().expect("tap lock") = Some((aim, fault));
    }

    /// Returns once the armed fault fired.
    pub async fn fired(&self) {
        loop {
            let notified = self.state.fired_now.notified();
            if self.state.fired.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Whether the armed fault fired.
    pub fn has_fired(&self) -> bool {
        self.state.fired.load(Ordering::SeqCst)
    }

    /// Lets a held request (and those after it) go on.
    pub fn release(&self) {
        self.state.released.store(true, Ordering::SeqCst);
        self.state.release.notify_waiters();
    }

    /// Refuses new connections (true: each is closed at once) or accepts them again.
    pub fn refuse(&self, refusing: bool) {
        self.state.refusing.store(refusing, Ordering::SeqCst);
    }
}

impl TapState {
    /// The fault `frame` (a request after the connect) meets, taking it off the tap.
    fn fault_for(&self, frame: &[u8]) -> Option<Fault> {
        let mut armed = self.armed.lock().expect("tap lock");
        let (aim, fault) = armed.as_mut()?;
        if !aim.hits(frame) {
            return None;
        }
        if aim.skip > 0 {
            aim.skip -= 1;
            return None;
        }
        let fault = *fault;
        *armed = None;
        self.fired.store(true, Ordering::SeqCst);
        self.fired_now.notify_waiters();
        Some(fault)
    }

    async fn released(&self) {
        loop {
            let notified = self.release.notified();
            if self.released.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

async fn tap_relay(inbound: TcpStream, target: String, state: Arc<TapState>) {
    let Ok(outbound) = TcpStream::connect(&target).await else {
        return;
    };
    let (mut client_read, client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let client_write = tokio::sync::Mutex::new(client_write);
    // The xid whose reply is to be lost, once its request went.
    let lose_xid = std::sync::Mutex::new(None::<i32>);
    let requests = async {
        let mut frames = Frames::default();
        let mut connect = true;
        while let Some(frame) = frames.next(&mut client_read).await {
            let mut fault = match std::mem::take(&mut connect) {
                true => None,
                false => state.fault_for(&frame),
            };
            // Held until released; then whatever fault is armed for it by then.
            while fault == Some(Fault::Hold) {
                state.released().await;
                fault = state.fault_for(&frame);
            }
            let xid: [u8; 4] = frame[4..8].try_into().unwrap_or_default();
            match fault {
                None | Some(Fault::Hold) => {}
                Some(Fault::LoseRequest) => return,
                Some(Fault::LoseReply) => {
                    *lose_xid.lock().expect("xid lock") = Some(i32::from_be_bytes(xid));
                }
                Some(Fault::Throttle) => {
                    // Length, xid, zxid, err: ZTHROTTLEDOP.
                    let mut reply = Vec::with_capacity(20);
                    reply.extend_from_slice(&16i32.to_be_bytes());
                    reply.extend_from_slice(&xid);
                    reply.extend_from_slice(&0i64.to_be_bytes());
                    reply.extend_from_slice(&(-127i32).to_be_bytes());
                    if client_write.lock().await.write_all(&reply).await.is_err() {
                        return;
                    }
                    continue;
                }
            }
            if server_write.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let replies = async {
        let mut frames = Frames::default();
        let mut connect = true;
        while let Some(frame) = frames.next(&mut server_read).await {
            if !std::mem::take(&mut connect) {
                let xid: Option<[u8; 4]> = frame.get(4..8).and_then(|b| b.try_into().ok());
                let lose = *lose_xid.lock().expect("xid lock");
                if lose.is_some() && xid.map(i32::from_be_bytes) == lose {
                    // Applied, its answer never delivered: the connection drops instead.
                    return;
                }
            }
            if client_write.lock().await.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    tokio::select! { _ = requests => {}, _ = replies => {} }
}
