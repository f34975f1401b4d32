//! The webhook receiver the HTTP sink delivers to: a small HTTP/1.1 server on loopback
//! (keep-alive, `Content-Length` bodies) that answers every request 200 after a short random
//! delay (5–30 ms; about 2% of requests 1–3 s, so that kills catch consumers holding tasks).
//!
//! It keeps the ledger a careful downstream system would: per envelope id, how many
//! deliveries and the highest fencing token seen. A request whose token is lower than one
//! already seen for its id is a violation: it was sent by a holder after its lease had passed
//! on. Ids the producer may have published twice (a batch sent again after a dropped link) are
//! left out of that judgement: two task znodes of one id are two tasks, their claims unordered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A request sent by a holder whose lease had passed on.
#[derive(Clone, Debug)]
pub struct Violation {
    pub id: String,
    pub task: String,
    pub token: i64,
    pub highest: i64,
    /// When it arrived, by the wall clock (to set beside the consumers' logs).
    pub at: std::time::SystemTime,
}

impl Violation {
    /// The arrival time as the logs write it: `HH:MM:SS.mmm` UTC.
    pub fn arrived(&self) -> String {
        let since = (self.at.duration_since(std::time::UNIX_EPOCH)).unwrap_or_default();
        let (secs, ms) = (since.as_secs() % 86_400, since.subsec_millis());
        format!(
            "{:02}:{:02}:{:02}.{ms:03}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// What the receiver saw of one envelope id.
struct Seen {
    deliveries: u64,
    /// The highest fencing token delivered.
    highest: i64,
}

#[derive(Default)]
struct Ledger {
    ids: HashMap<String, Seen>,
    violations: Vec<Violation>,
    /// Requests without a JSON body with an `id`, without the sink's headers, or whose
    /// `Idempotency-Key` is not the id.
    malformed: u64,
}

/// The receiver's figures against the ids that were published.
pub struct Tally {
    pub delivered: usize,
    pub lost: Vec<String>,
    /// Deliveries beyond the first, summed over ids.
    pub duplicates: u64,
    pub violations: Vec<Violation>,
    /// Token inversions on ids the producer may have published twice: not judged.
    pub exempt: usize,
    pub malformed: u64,
    /// Ids delivered that were never published.
    pub strangers: usize,
}

pub struct Receiver {
    address: String,
    ledger: Arc<Mutex<Ledger>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let address = listener.local_addr().expect("receiver address").to_string();
        let ledger: Arc<Mutex<Ledger>> = Arc::default();
        let shared = Arc::clone(&ledger);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Receiver {
            address,
            ledger,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }

    /// How many of `ids` were delivered at least once.
    pub fn delivered(&self, ids: &[String]) -> usize {
        let ledger = self.ledger.lock().expect("ledger lock");
        ids.iter().filter(|id| ledger.ids.contains_key(*id)).count()
    }

    /// The figures against the published `ids`; token inversions on ids in `uncertain` (maybe
    /// published twice) are counted apart.
    pub fn tally(&self, ids: &[String], uncertain: &HashSet<String>) -> Tally {
        let ledger = self.ledger.lock().expect("ledger lock");
        let lost: Vec<String> = ids
            .iter()
            .filter(|id| !ledger.ids.contains_key(*id))
            .cloned()
            .collect();
        let published: HashSet<&String> = ids.iter().collect();
        let (exempt, violations): (Vec<_>, Vec<_>) =
            (ledger.violations.iter().cloned()).partition(|v| uncertain.contains(&v.id));
        Tally {
            delivered: ids.len() - lost.len(),
            lost,
            duplicates: ledger.ids.values().map(|s| s.deliveries - 1).sum(),
            violations,
            exempt: exempt.len(),
            malformed: ledger.malformed,
            strangers: (ledger.ids.keys())
                .filter(|id| !published.contains(id))
                .count(),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Ledger {
    fn record(&mut self, request: &Request) {
        let (Some(id), Some(token)) = (request.id(), request.token()) else {
            self.malformed += 1;
            return;
        };
        if request.header("idempotency-key") != id {
            self.malformed += 1; // no idempotency key was set: the sink sends the id
        }
        let seen = self.ids.entry(id.clone()).or_insert(Seen {
            deliveries: 0,
            highest: token,
        });
        seen.deliveries += 1;
        if token < seen.highest {
            self.violations.push(Violation {
                id,
                task: request.header("x-event-bridge-task").to_string(),
                token,
                highest: seen.highest,
                at: std::time::SystemTime::now(),
            });
        } else {
            seen.highest = token;
        }
    }
}

/// Answers the requests of one connection until the client closes it.
async fn serve(stream: TcpStream, ledger: Arc<Mutex<Ledger>>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(request) = read_request(&mut read).await {
        ledger.lock().expect("ledger lock").record(&request);
        tokio::time::sleep(reply_delay()).await;
        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Mostly 5–30 ms; about one request in fifty 1–3 s.
fn reply_delay() -> Duration {
    if fastrand::u32(..100) < 2 {
        Duration::from_millis(fastrand::u64(1_000..=3_000))
    } else {
        Duration::from_millis(fastrand::u64(5..=30))
    }
}

/// A request as read: lowercased header names, the raw body.
struct Request {
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    fn token(&self) -> Option<i64> {
        self.header("x-event-bridge-fencing-token").parse().ok()
    }

    /// The envelope's `id`.
    fn id(&self) -> Option<String> {
        let envelope: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        Some(envelope.get("id")?.as_str()?.to_string())
    }
}

/// Reads one request with a `Content-Length` body; `None` when the connection ends.
async fn read_request<R: AsyncBufRead + Unpin>(read: &mut R) -> Option<Request> {
    let mut line = String::new();
    if read.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
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
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some(Request { headers, body })
}
