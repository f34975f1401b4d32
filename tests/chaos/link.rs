//! A link from a publisher to the ensemble that catches a publish mid-flight, whatever the
//! machine's speed: its first connection goes to one server and lets a set number of task
//! writes through (sequential creates: a path ending in a lane's prefix, `-` or `.`; and
//! multi-ops), then holds every request (they never reach the server); the server's replies
//! are held from an earlier write on (they never reach the publisher). So when that server is killed, some
//! creates landed with their answers lost, and the ones after them never left. Later
//! connections go to the first server of the ensemble that accepts, untouched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The opcodes of ZooKeeper's create requests (`create`, `create2`), and of a multi-op.
const CREATES: [i32; 2] = [1, 15];
const MULTI: i32 = 14;

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
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let requests = async {
        let mut pending = Vec::new();
        let mut buf = vec![0; 64 * 1024];
        let mut connect = true;
        let mut holding = false;
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(frame) = take_frame(&mut pending) {
                if holding {
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
        }
    };
    let replies = async {
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    state.server_ended.store(true, Ordering::SeqCst);
                    return;
                }
                Ok(n) => n,
            };
            if state.replies_held.load(Ordering::SeqCst) {
                continue;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! { _ = requests => {}, _ = replies => {} }
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
