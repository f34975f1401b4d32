//! The webhook receiver the HTTP sink delivers to: a small HTTP/1.1 server on loopback
//! (keep-alive, `Content-Length` bodies) that fails a share of the requests on purpose and
//! records every one of them.
//!
//! Answers: about 10% `500`, 3% `503` with `Retry-After: 1`, 2% never answered (it waits until
//! the sink gives up at its route's timeout and closes the connection: a timeout), the rest
//! `200` after a short random delay (5–30 ms; about 1% of requests 0.3–1 s, so that kills
//! catch consumers holding tasks; the limited route 20–60 ms, so that its `max_in_flight`
//! binds), whose body is JSON naming the request's task and fencing token (the task's result,
//! which the completion record keeps). Every request goes into the ledger: envelope id, task name, type, group and
//! sequence number (payload `seq`), idempotency key, schedule slot, attempt (the sink's
//! `X-Event-Bridge-Attempt`), fencing token, arrival, answer and when it was answered.
//!
//! Two things are judged as the requests come, as a careful downstream system would: a
//! request whose fencing token is lower than one already seen for its id (a holder whose
//! lease had passed on) is a violation, and the limited route's requests open at once are
//! counted (the most ever open is its in-flight figure).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Shares of the answers, in percent of requests.
const FAIL_500: u32 = 10;
const FAIL_503: u32 = 3;
const HANG: u32 = 2;

/// What the receiver answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// `500`.
    Error,
    /// `503` with `Retry-After: 1`.
    Busy,
    /// Never answered: the sink closed the connection (its timeout).
    TimedOut,
    /// The answer could not be written, or the sender closed the connection well before its
    /// timeout: the sender was gone (killed).
    Dropped,
}

impl Answer {
    /// An answer after which the sink retries (with its backoff).
    pub fn failed(self) -> bool {
        matches!(self, Answer::Error | Answer::Busy | Answer::TimedOut)
    }
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub id: String,
    pub task: String,
    pub event_type: String,
    pub group: Option<String>,
    pub seq: Option<u64>,
    /// The envelope's idempotency key.
    pub key: Option<String>,
    /// For a schedule's task, its slot (the envelope's `time`, ms).
    pub slot_ms: Option<i64>,
    pub attempt: u32,
    pub token: i64,
    pub arrived: Instant,
    /// Wall clock of the arrival, ms since the epoch (to set beside logs and ZooKeeper time).
    pub arrived_ms: i64,
    pub answer: Answer,
    /// When the answer was written (or the sink gave up).
    pub answered: Instant,
    /// For a resumable task: the step its checkpoint says, and how its wait ended.
    pub resume: Option<crate::resumable::Resumed>,
}

/// A request sent by a holder whose lease had passed on.
#[derive(Clone, Debug)]
pub struct Violation {
    pub id: String,
    pub task: String,
    pub token: i64,
    pub highest: i64,
    /// When it arrived, by the wall clock (to set beside the consumers' logs).
    pub at_ms: i64,
}

impl Violation {
    /// The arrival time as the logs write it: `HH:MM:SS.mmm` UTC.
    pub fn arrived(&self) -> String {
        clock(self.at_ms)
    }
}

/// `HH:MM:SS.mmm` UTC of a wall-clock time in ms.
pub fn clock(ms: i64) -> String {
    let (secs, ms) = (ms.div_euclid(1000) % 86_400, ms.rem_euclid(1000));
    format!(
        "{:02}:{:02}:{:02}.{ms:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The limited route, as the receiver watches it, and the routes' HTTP timeout (a request
/// left unanswered that the sender closes well before it was closed because its sender died,
/// not because the sink gave up).
#[derive(Clone, Debug)]
pub struct LimitedRoute {
    pub event_type: String,
    pub max_in_flight: usize,
    pub timeout: Duration,
    /// The tenants' route, and the most of one concurrency key it lets run at once.
    pub tenant_type: String,
    pub per_key: usize,
}

impl LimitedRoute {
    /// Whether a request of `event_type` is answered as the limited routes' are (20–60 ms, so
    /// that their caps bind).
    fn is_limited(&self, event_type: &str) -> bool {
        event_type == self.event_type || event_type == self.tenant_type
    }
}

#[derive(Default)]
pub struct Ledger {
    pub deliveries: Vec<Delivery>,
    /// The highest fencing token delivered, per id.
    highest: HashMap<String, i64>,
    pub violations: Vec<Violation>,
    /// Requests without a JSON body with an `id`, without the sink's headers, or whose
    /// `Idempotency-Key` is neither the envelope's key nor its id.
    pub malformed: u64,
    /// The limited route's requests open now (task and fencing token: one claim), and the
    /// most ever open.
    open: std::collections::BTreeSet<(String, i64)>,
    pub most_open: usize,
    /// Moments (wall ms) at which more than `max_in_flight` were open, with the open ones.
    pub over_limit: Vec<(i64, Vec<(String, i64)>)>,
    /// The tenants' requests open now, per concurrency key, and the most of one key ever open.
    open_per_key: BTreeMap<String, BTreeSet<(String, i64)>>,
    pub most_open_per_key: usize,
    /// Moments (wall ms) at which one key had more than its cap open, with its open ones.
    pub over_key_limit: Vec<(i64, Vec<(String, i64)>)>,
}

pub struct Receiver {
    address: String,
    ledger: Arc<Mutex<Ledger>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(limited: LimitedRoute) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let address = listener.local_addr().expect("receiver address").to_string();
        let ledger: Arc<Mutex<Ledger>> = Arc::default();
        let shared = Arc::clone(&ledger);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared), limited.clone()));
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

    /// Runs `f` on the ledger as it is now.
    pub fn with<T>(&self, f: impl FnOnce(&Ledger) -> T) -> T {
        f(&self.ledger.lock().expect("ledger lock"))
    }

    /// How many of `ids` were answered `200` at least once.
    pub fn succeeded(&self, ids: &[String]) -> usize {
        self.with(|ledger| {
            let ok: std::collections::HashSet<&str> = (ledger.deliveries.iter())
                .filter(|d| d.answer == Answer::Ok)
                .map(|d| d.id.as_str())
                .collect();
            ids.iter().filter(|id| ok.contains(id.as_str())).count()
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// What one request says, before it is answered.
struct Parsed {
    id: String,
    task: String,
    event_type: String,
    group: Option<String>,
    seq: Option<u64>,
    key: Option<String>,
    concurrency_key: Option<String>,
    slot_ms: Option<i64>,
    attempt: u32,
    token: i64,
    /// No longer counted open.
    closed: bool,
    resume: Option<crate::resumable::Resumed>,
    /// A resumable task's pair's signal key.
    signal_key: Option<String>,
}

impl Ledger {
    /// Checks the request's token and counts it open; `None` for a malformed request.
    fn arrive(&mut self, request: &Request, limited: &LimitedRoute) -> Option<Parsed> {
        let Some(parsed) = request.parse() else {
            self.malformed += 1;
            return None;
        };
        let expected_key = parsed.key.as_deref().unwrap_or(&parsed.id);
        if request.header("idempotency-key") != expected_key {
            self.malformed += 1; // the sink sends the envelope's key, else its id
        }
        let highest = self.highest.entry(parsed.id.clone()).or_insert(i64::MIN);
        if parsed.token < *highest {
            self.violations.push(Violation {
                id: parsed.id.clone(),
                task: parsed.task.clone(),
                token: parsed.token,
                highest: *highest,
                at_ms: wall_ms(),
            });
        } else {
            *highest = parsed.token;
        }
        if parsed.event_type == limited.event_type {
            self.open.insert((parsed.task.clone(), parsed.token));
            self.most_open = self.most_open.max(self.open.len());
            if self.open.len() > limited.max_in_flight {
                let open = self.open.iter().cloned().collect();
                self.over_limit.push((wall_ms(), open));
            }
        }
        if let (true, Some(key)) = (
            parsed.event_type == limited.tenant_type,
            &parsed.concurrency_key,
        ) {
            let open = self.open_per_key.entry(key.clone()).or_default();
            open.insert((parsed.task.clone(), parsed.token));
            self.most_open_per_key = self.most_open_per_key.max(open.len());
            if open.len() > limited.per_key {
                let open = open.iter().cloned().collect();
                self.over_key_limit.push((wall_ms(), open));
            }
        }
        Some(parsed)
    }

    /// The request is no longer open (its answer is about to be written, or never will be).
    fn close(&mut self, parsed: &Parsed, limited: &LimitedRoute) {
        if parsed.event_type == limited.event_type && !parsed.closed {
            self.open.remove(&(parsed.task.clone(), parsed.token));
        }
        if let (false, Some(key)) = (parsed.closed, &parsed.concurrency_key)
            && let Some(open) = self.open_per_key.get_mut(key)
        {
            open.remove(&(parsed.task.clone(), parsed.token));
        }
    }

    /// Records a request once answered (closing it first if it still was open).
    fn answered(
        &mut self,
        parsed: Parsed,
        limited: &LimitedRoute,
        arrived: (Instant, i64),
        answer: Answer,
        answered: Instant,
    ) {
        self.close(&parsed, limited);
        self.deliveries.push(Delivery {
            id: parsed.id,
            task: parsed.task,
            event_type: parsed.event_type,
            group: parsed.group,
            seq: parsed.seq,
            key: parsed.key,
            slot_ms: parsed.slot_ms,
            attempt: parsed.attempt,
            token: parsed.token,
            arrived: arrived.0,
            arrived_ms: arrived.1,
            answer,
            answered,
            resume: parsed.resume,
        });
    }
}

/// How to answer one request.
enum Plan {
    Ok(Duration),
    Error,
    Busy,
    Hang,
}

fn plan(limited: bool) -> Plan {
    let roll = fastrand::u32(..100);
    if roll < FAIL_500 {
        Plan::Error
    } else if roll < FAIL_500 + FAIL_503 {
        Plan::Busy
    } else if roll < FAIL_500 + FAIL_503 + HANG {
        Plan::Hang
    } else if limited {
        Plan::Ok(Duration::from_millis(fastrand::u64(20..=60)))
    } else if fastrand::u32(..100) < 1 {
        Plan::Ok(Duration::from_millis(fastrand::u64(300..=1_000)))
    } else {
        Plan::Ok(Duration::from_millis(fastrand::u64(5..=30)))
    }
}

/// Longest a request that is never answered waits for the sink to give up (far beyond any
/// route's timeout: a hang guard).
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Answers the requests of one connection until the client closes it. The ledger's order is
/// the order of the answers; the arrival is kept with each.
async fn serve(stream: TcpStream, ledger: Arc<Mutex<Ledger>>, limited: LimitedRoute) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(request) = read_request(&mut read).await {
        let arrived = (Instant::now(), wall_ms());
        let parsed = ledger
            .lock()
            .expect("ledger lock")
            .arrive(&request, &limited);
        let is_limited = parsed
            .as_ref()
            .is_some_and(|p| limited.is_limited(&p.event_type));
        let flood = (parsed.as_ref()).is_some_and(|p| p.event_type == crate::producer::FLOOD_TYPE);
        let plan = match flood {
            // The flood's burst is answered at once: it is there to stand in front of the
            // trickle, not to load the run for longer than it takes to drain.
            true => Plan::Ok(Duration::from_millis(fastrand::u64(0..=5))),
            false => plan(is_limited),
        };
        let (reply, answer): (String, Answer) = match plan {
            Plan::Ok(delay) => {
                harness::real_time(delay, "a receiver that takes its time to answer").await;
                (ok(parsed.as_ref()), Answer::Ok)
            }
            Plan::Error => (
                "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops".into(),
                Answer::Error,
            ),
            Plan::Busy => (
                "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 4\r\n\r\nbusy".into(),
                Answer::Busy,
            ),
            Plan::Hang => {
                // Nothing more comes on this connection until the sink gives up and closes it.
                let mut scrap = [0u8; 64];
                let closed = tokio::time::timeout(HANG_GUARD, read.read(&mut scrap)).await;
                if matches!(closed, Ok(Ok(0) | Err(_))) {
                    // Closed well before the route's timeout: the sender died, it did not give up.
                    let waited = arrived.0.elapsed() + Duration::from_millis(250);
                    let answer = match waited >= limited.timeout {
                        true => Answer::TimedOut,
                        false => Answer::Dropped,
                    };
                    if let Some(parsed) = parsed {
                        let mut ledger = ledger.lock().expect("ledger lock");
                        ledger.answered(parsed, &limited, arrived, answer, Instant::now());
                    }
                    return;
                }
                // Not closed within the guard: answer after all, as a failure.
                (
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nslow".into(),
                    Answer::Error,
                )
            }
        };
        // Closed before the answer goes out: the sink frees its slot only once it has read it.
        let mut parsed = parsed;
        if let Some(p) = parsed.as_mut() {
            ledger.lock().expect("ledger lock").close(p, &limited);
            p.closed = true;
        }
        let record = |answer: Answer| {
            if let Some(parsed) = parsed {
                let mut ledger = ledger.lock().expect("ledger lock");
                ledger.answered(parsed, &limited, arrived, answer, Instant::now());
            }
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            record(Answer::Dropped);
            return;
        }
        record(answer);
    }
}

/// A `200` whose JSON body names the request's task and fencing token (the result the
/// completion record keeps: see `results`); empty for a request that said neither.
fn ok(parsed: Option<&Parsed>) -> String {
    if let Some(p) = parsed
        && let (Some(resumed), Some(key)) = (&p.resume, &p.signal_key)
    {
        return crate::resumable::answer(resumed, &p.task, p.token, key);
    }
    let body = parsed.map_or(String::new(), |p| crate::results::answer(&p.task, p.token));
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
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

    /// The envelope's fields and the sink's headers; `None` when any is missing.
    fn parse(&self) -> Option<Parsed> {
        let envelope: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let scheduled = envelope.get("scheduled").is_some();
        let slot_ms = match scheduled {
            true => chrono::DateTime::parse_from_rfc3339(envelope.get("time")?.as_str()?)
                .ok()
                .map(|t| t.timestamp_millis()),
            false => None,
        };
        Some(Parsed {
            id: text(envelope.get("id")?)?,
            task: self.headers.get("x-event-bridge-task")?.clone(),
            event_type: text(envelope.get("type")?)?,
            group: envelope.get("group").and_then(text),
            seq: envelope.pointer("/payload/seq").and_then(|v| v.as_u64()),
            key: envelope.get("idempotency_key").and_then(text),
            concurrency_key: envelope.get("concurrency_key").and_then(text),
            slot_ms,
            attempt: self.header("x-event-bridge-attempt").parse().ok()?,
            token: self.header("x-event-bridge-fencing-token").parse().ok()?,
            closed: false,
            resume: crate::resumable::Resumed::of(&envelope),
            signal_key: crate::resumable::key_of(&envelope),
        })
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

/// The wall clock, ms since the epoch.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
