//! The webhook the book's sessions deliver to: a small HTTP/1.1 server on 127.0.0.1, started by
//! the test, its address given to each command as `HOOK`. What it answers depends on the path,
//! as the pages that use it say:
//!
//! - `POST /ok/…`: `200`;
//! - `POST /down/…`: `503` (the HTTP sink retries it with backoff);
//! - `POST /gone/…`: `410` (the HTTP sink sends the task to the dead letters);
//! - `POST /hold/…`: `200`, once `GET /release` was asked (until then the task stays held);
//! - `POST /wait/KEY`: a `202` that suspends the task until the signal `KEY` comes, with the
//!   checkpoint `{"step": "asked"}`; a delivery that carries `resume` gets `200`;
//! - `GET /release`: lets every held request (and each later one) be answered;
//! - `GET /received`: a line per POST received so far, in order: its path, the envelope's
//!   `type` and `payload`, `X-Event-Bridge-Attempt`, and `resume` when the envelope has one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The running server; dropped, it stops accepting.
pub struct Hook {
    address: String,
    accept: tokio::task::JoinHandle<()>,
}

impl Hook {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the hook");
        let address = listener.local_addr().expect("its address").to_string();
        let state = Arc::new(State {
            received: Mutex::default(),
            released: watch::channel(false).0,
        });
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&state)));
            }
        });
        Hook { address, accept }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// What the hook keeps: the POSTs received, and whether held requests may be answered.
struct State {
    received: Mutex<Vec<String>>,
    released: watch::Sender<bool>,
}

/// One request: its method, path, headers (names lowercased) and body.
struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Answers the requests of one connection until the client closes it.
async fn serve(stream: TcpStream, state: Arc<State>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(request) = read_request(&mut read).await {
        if request.method == "POST" {
            state.received.lock().unwrap().push(line_of(&request));
        }
        if request.method == "POST" && request.path.starts_with("/hold/") {
            let mut released = state.released.subscribe();
            if released.wait_for(|released| *released).await.is_err() {
                return;
            }
        }
        let (status, body) = answer(&request, &state);
        let response = format!(
            "HTTP/1.1 {status} Book\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if write.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// What `GET /received` lists of a POST.
fn line_of(request: &Request) -> String {
    let envelope: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let attempt = request
        .headers
        .get("x-event-bridge-attempt")
        .map_or("-", String::as_str);
    let mut line = format!(
        "{} type={} payload={} attempt={attempt}",
        request.path, envelope["type"], envelope["payload"]
    );
    if let Some(resume) = envelope.get("resume") {
        line.push_str(&format!(" resume={resume}"));
    }
    line
}

/// The status and body for `request`.
fn answer(request: &Request, state: &State) -> (u16, String) {
    if request.method == "GET" && request.path == "/received" {
        let mut lines = state.received.lock().unwrap().join("\n");
        lines.push('\n');
        return (200, lines);
    }
    if request.method == "GET" && request.path == "/release" {
        state.released.send_replace(true);
        return (200, String::new());
    }
    let envelope: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let path = request.path.as_str();
    match path.split('/').nth(1) {
        Some("ok" | "hold") => (200, "{}".into()),
        Some("down") => (503, "{}".into()),
        Some("gone") => (410, "{}".into()),
        Some("wait") if envelope.get("resume").is_some() => (200, "{}".into()),
        Some("wait") => {
            let key = path.trim_start_matches("/wait/");
            let suspension =
                json!({"checkpoint": {"step": "asked"}, "wait_for": [key], "timeout": "1h"});
            (202, suspension.to_string())
        }
        _ => (404, "{}".into()),
    }
}

/// Reads one request with a `Content-Length` body (or none); `None` when the connection ends.
async fn read_request<R: AsyncBufRead + Unpin>(read: &mut R) -> Option<Request> {
    let mut line = String::new();
    if read.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break; // the blank line that ends the head
        };
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    let length = headers
        .get("content-length")
        .map_or(Some(0), |v| v.parse().ok())?;
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}
