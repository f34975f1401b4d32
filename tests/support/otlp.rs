//! An OTLP/HTTP receiver of spans for the tests: `otlp_receiver.py` (the official
//! `opentelemetry-proto` definitions, from PyPI: `make tools`) as a child process, and the
//! spans it decoded so far, each as the JSON line it printed (service, name, kind, ids, links,
//! attributes, status).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The receiver, and the spans it decoded so far.
pub struct Otlp {
    _child: Child,
    port: u16,
    spans: Arc<Mutex<Vec<Value>>>,
    /// How many marks (`GET /mark`) the receiver printed so far.
    marks: tokio::sync::watch::Receiver<usize>,
}

impl Otlp {
    pub async fn start() -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/otlp_receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 with opentelemetry-proto (`make tools`)");
        let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        let first = (lines.next_line().await.ok().flatten())
            .expect("the receiver's port: python3 with opentelemetry-proto (`make tools`)");
        let port = (first.trim_start_matches("listening ").parse())
            .expect("the receiver says its port first");
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (marked, marks) = tokio::sync::watch::channel(0);
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let span: Value = serde_json::from_str(&line).expect("a span as a JSON line");
                match span.get("mark") {
                    Some(_) => marked.send_modify(|n| *n += 1),
                    None => kept.lock().expect("spans lock").push(span),
                }
            }
        });
        Otlp {
            _child: child,
            port,
            spans,
            marks,
        }
    }

    /// Every span of the exports answered so far: a mark asked for, and its line waited for
    /// (30 s at most: a hang guard).
    pub async fn all(&self) -> Vec<Value> {
        use tokio::io::AsyncWriteExt;
        let mut marks = self.marks.clone();
        let seen = *marks.borrow_and_update();
        let address = format!("127.0.0.1:{}", self.port);
        let mut stream =
            (tokio::net::TcpStream::connect(&address).await).expect("the span receiver answers");
        (stream.write_all(b"GET /mark HTTP/1.0\r\n\r\n").await).expect("a mark asked for");
        let marked = marks.wait_for(|n| *n > seen);
        (tokio::time::timeout(Duration::from_secs(30), marked).await)
            .expect("the mark within 30 s")
            .expect("the span receiver's reader");
        self.received()
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is to say.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans, once `n` arrived or 10 s passed (the receiver prints each before it answers
    /// the export, so they are on their way once the exporting process exited).
    pub async fn spans(&self, n: usize) -> Vec<Value> {
        let mut tries = crate::Tries::within(Duration::from_secs(10));
        loop {
            let spans = self.received();
            if spans.len() >= n || !tries.again().await {
                return spans;
            }
        }
    }

    /// The spans received so far.
    pub fn received(&self) -> Vec<Value> {
        self.spans.lock().expect("spans lock").clone()
    }
}
