//! A Lambda Runtime API on loopback, for running a Lambda binary (`bootstrap`) as Lambda would:
//! `invocation/next` hands out the given events in order, and never answers once they are
//! gone (the runtime waits, as on Lambda); posts of responses and errors are accepted. Every
//! request the runtime makes is reported with the time it arrived.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The path a runtime asks for its next event on.
pub const NEXT: &str = "/2018-06-01/runtime/invocation/next";
/// The start of the paths a runtime posts an invocation's response or error to.
pub const INVOCATION: &str = "/2018-06-01/runtime/invocation/";

/// One HTTP request the runtime made.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    /// When its head had arrived.
    pub at: Instant,
}

impl Request {
    /// Whether it asks for the next event.
    pub fn is_next(&self) -> bool {
        self.method == "GET" && self.path == NEXT
    }

    /// Whether it posts an invocation's response or error.
    pub fn is_post(&self) -> bool {
        self.method == "POST" && self.path.starts_with(INVOCATION)
    }
}

/// A Runtime API serving on loopback until dropped.
pub struct RuntimeApi {
    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub address: String,
    /// The requests, in the order they arrived.
    pub requests: mpsc::UnboundedReceiver<Request>,
    server: JoinHandle<()>,
}

impl RuntimeApi {
    /// Serves `events` (request id, payload) in order.
    pub async fn start(events: Vec<(&str, Value)>) -> std::io::Result<Self> {
        Self::start_gated(events, 1).await
    }

    /// As [`RuntimeApi::start`], answering no `next` until `outstanding` of them have arrived
    /// (the invocations Lambda Managed Instances hands out at once). A runtime that asks for
    /// fewer at a time is never answered.
    pub async fn start_gated(
        events: Vec<(&str, Value)>,
        outstanding: usize,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let events = events
            .into_iter()
            .map(|(id, event)| (id.to_string(), event))
            .collect();
        let (seen, requests) = mpsc::unbounded_channel();
        let gate = Gate {
            asked: watch::Sender::new(0),
            outstanding,
        };
        let shared = Shared {
            events: Arc::new(Mutex::new(events)),
            gate: Arc::new(gate),
        };
        let server = tokio::spawn(serve(listener, shared, seen));
        Ok(RuntimeApi {
            address,
            requests,
            server,
        })
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The environment Lambda gives a function besides `AWS_LAMBDA_RUNTIME_API`.
pub fn function_env(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_LAMBDA_FUNCTION_NAME", name.to_string()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".into()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}")),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "test".into()),
    ]
}

/// The built function `name` as Lambda starts it against `api`: a clean environment with the
/// Runtime API's address, Lambda's own variables ([`function_env`]) and the ZooKeeper and root
/// of `config`; the caller adds the rest and spawns it.
pub fn function_command(
    name: &str,
    api: &RuntimeApi,
    config: &event_bridge::Config,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(crate::binary(name));
    command
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api.address)
        .envs(function_env(name))
        .env("ZOOKEEPER_CONNECTION_STRING", &config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &config.root);
    command
}

/// Copies the tiny Lambda function of `tests/deploy/panic_probe` (it echoes its event, or
/// panics on request) to `dir` with the workspace's Cargo.lock, so it links the same
/// `lambda_runtime` and tokio as the functions; `edit` may change its manifest first.
pub fn copy_probe(dir: &Path, edit: impl FnOnce(String) -> String) -> std::io::Result<()> {
    let root = crate::workspace_root();
    let probe = root.join("tests/deploy/panic_probe");
    std::fs::create_dir_all(dir.join("src"))?;
    let manifest = std::fs::read_to_string(probe.join("Cargo.toml"))?;
    std::fs::write(dir.join("Cargo.toml"), edit(manifest))?;
    std::fs::copy(probe.join("src/main.rs"), dir.join("src/main.rs"))?;
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    Ok(())
}

/// The `next` calls asked so far, and how many must be asked before any is answered.
struct Gate {
    asked: watch::Sender<usize>,
    outstanding: usize,
}

impl Gate {
    /// Counts one `next` and waits until `outstanding` have been asked.
    async fn pass(&self) {
        self.asked.send_modify(|asked| *asked += 1);
        let mut asked = self.asked.subscribe();
        let _ = asked.wait_for(|asked| *asked >= self.outstanding).await;
    }
}

/// What every connection shares: the events left, and the gate.
#[derive(Clone)]
struct Shared {
    events: Arc<Mutex<VecDeque<(String, Value)>>>,
    gate: Arc<Gate>,
}

async fn serve(listener: TcpListener, shared: Shared, seen: mpsc::UnboundedSender<Request>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(connection(stream, shared.clone(), seen.clone()));
    }
}

/// One keep-alive connection of the runtime's HTTP client.
async fn connection(stream: TcpStream, shared: Shared, seen: mpsc::UnboundedSender<Request>) {
    let mut stream = BufReader::new(stream);
    while let Some(request) = read_request(&mut stream).await {
        let (next, posted) = (request.is_next(), request.is_post());
        let _ = seen.send(request);
        let reply = if next {
            shared.gate.pass().await;
            let event = shared.events.lock().unwrap().pop_front();
            let Some((id, event)) = event else {
                std::future::pending::<()>().await;
                return;
            };
            event_reply(&id, &event)
        } else if posted {
            let body = r#"{"status":"OK"}"#;
            format!(
                "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        } else {
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string()
        };
        if stream.get_mut().write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The answer to `next`: the event, with the headers Lambda sends (30 s to run it).
fn event_reply(id: &str, event: &Value) -> String {
    let body = event.to_string();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 30_000;
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
         Lambda-Runtime-Aws-Request-Id: {id}\r\n\
         Lambda-Runtime-Deadline-Ms: {deadline}\r\n\
         Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:probe\r\n\
         Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one HTTP/1.1 request (a body by Content-Length or chunked); `None` at end of stream.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let at = Instant::now();
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let (length, chunked) = read_headers(stream).await?;
    let body = match chunked {
        true => read_chunked(stream).await?,
        false => {
            let mut body = vec![0; length];
            stream.read_exact(&mut body).await.ok()?;
            body
        }
    };
    Some(Request {
        method,
        path,
        body,
        at,
    })
}

/// The headers up to the blank line: the body's length, and whether it is chunked.
async fn read_headers(stream: &mut BufReader<TcpStream>) -> Option<(usize, bool)> {
    let (mut length, mut chunked) = (0, false);
    loop {
        let mut header = String::new();
        if stream.read_line(&mut header).await.ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            return Some((length, chunked));
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
}

async fn read_chunked(stream: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        stream.read_line(&mut size).await.ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0; size + 2];
        stream.read_exact(&mut chunk).await.ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}
