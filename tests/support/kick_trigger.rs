//! A kick's target served on loopback: process_events' HTTP trigger as a real local HTTP
//! server that checks the bearer secret, counts the requests it admits, and answers each once
//! the drain it runs (the caller's) has ended. A client may leave at any moment (a publisher
//! stops waiting for the answer after `KICK_WAIT_MS`): a request cut short before its head is
//! not admitted, and the answer to a client gone is dropped; neither fails the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// What an admitted request runs before it is answered.
pub type Drain = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The trigger: bound first (its URL goes into the configuration), served after.
pub struct KickTrigger {
    /// `http://127.0.0.1:<port>/api/process_events?drain=1`.
    pub url: String,
    secret: String,
    requests: Arc<AtomicUsize>,
    listener: Option<TcpListener>,
    /// Connections that fill the accept queue until [`KickTrigger::serve`] (see
    /// [`KickTrigger::bind_backed_up`]).
    fillers: Vec<TcpStream>,
}

impl KickTrigger {
    /// Binds a free port; requests must carry `Authorization: Bearer <secret>`.
    pub async fn bind(secret: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        KickTrigger {
            url: format!("http://127.0.0.1:{port}/api/process_events?drain=1"),
            secret: secret.to_string(),
            requests: Arc::default(),
            listener: Some(listener),
            fillers: Vec::new(),
        }
    }

    /// As [`KickTrigger::bind`], with its accept queue full until [`KickTrigger::serve`]: a
    /// client's connect cannot complete before then, however fast the machine (Linux drops its
    /// SYN, and the client sends it again a second later). The queue holds one connection more
    /// than the backlog: listening with a backlog of 0, one connection fills it.
    pub async fn bind_backed_up(secret: &str) -> Self {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind(([127, 0, 0, 1], 0).into()).expect("bind");
        let listener = socket.listen(0).expect("listen");
        let address = listener.local_addr().expect("address");
        let filler = TcpStream::connect(address)
            .await
            .expect("fill the accept queue");
        KickTrigger {
            url: format!("http://{address}/api/process_events?drain=1"),
            secret: secret.to_string(),
            requests: Arc::default(),
            listener: Some(listener),
            fillers: vec![filler],
        }
    }

    /// Serves requests, each answered after `drain` (when given) ran.
    pub fn serve(&mut self, drain: Option<Drain>) {
        let listener = self.listener.take().expect("served once");
        // Once accepted, a filler reads as a request cut short: not admitted.
        self.fillers.clear();
        let (requests, secret) = (self.requests.clone(), self.secret.clone());
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.expect("accept");
                let (requests, drain) = (requests.clone(), drain.clone());
                tokio::spawn(answer(stream, secret.clone(), requests, drain));
            }
        });
    }

    /// Requests admitted so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn answer(
    mut stream: TcpStream,
    secret: String,
    requests: Arc<AtomicUsize>,
    drain: Option<Drain>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            // Cut short (the client closed, or reset, before its head was whole): not a
            // request, not admitted. A kick lost so shows as a drain that never ran.
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let authorized =
        head.starts_with("post ") && head.contains(&format!("authorization: bearer {secret}"));
    let status = match authorized {
        false => "401 Unauthorized",
        true => {
            requests.fetch_add(1, Ordering::SeqCst);
            if let Some(drain) = drain {
                drain().await;
            }
            "200 OK"
        }
    };
    let reply = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    // A client that stopped waiting (after its `KICK_WAIT_MS`) is gone: its answer is dropped.
    let _ = stream.write_all(reply.as_bytes()).await;
}
