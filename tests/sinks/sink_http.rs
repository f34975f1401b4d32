//! The HTTP webhook sink on real tasks, delivering to a real receiver on 127.0.0.1: a small
//! HTTP/1.1 server written here, whose replies each test scripts and which records every
//! request. The receiver checks signatures with its own HMAC, not the crate's.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::Secret;
use event_bridge::clock::ZkTime;
use event_bridge::sink::http::{HttpSink, HttpSpec};
use event_bridge::{Envelope, Handler, HandlerError, ProcessReport, Task};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use harness::{TestQueue, run};

const SECRET: &str = "whsec_integration";

/// What the receiver answers to one request.
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    /// Waits this long before answering.
    delay: Duration,
}

impl Reply {
    pub(crate) fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    pub(crate) fn body(mut self, body: &str) -> Self {
        self.body = body.to_string();
        self
    }

    fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request as the receiver read it.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    method: String,
    pub(crate) target: String,
    /// Names lowercased.
    headers: HashMap<String, String>,
    pub(crate) body: Vec<u8>,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map_or("", String::as_str)
    }

    /// Checks `X-Event-Bridge-Signature` as a receiver in another language would.
    pub(crate) fn signed_with(&self, secret: &str) -> bool {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(self.header("X-Event-Bridge-Timestamp").as_bytes());
        mac.update(b".");
        mac.update(&self.body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        self.header("X-Event-Bridge-Signature") == expected
    }
}

/// The scripted HTTP/1.1 server. Replies go out in order, then 200s; connections are kept
/// alive as long as the client keeps them.
pub(crate) struct Receiver {
    address: String,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Request>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub(crate) async fn start(replies: impl IntoIterator<Item = Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let replies = Arc::new(Mutex::new(replies.into_iter().collect()));
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let (r, q) = (Arc::clone(&replies), Arc::clone(&requests));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, r.clone(), q.clone()));
            }
        });
        Receiver {
            address,
            replies,
            requests,
            accept,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn unused_replies(&self) -> usize {
        self.replies.lock().unwrap().len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Answers the requests of one connection until the client closes it.
async fn serve(
    stream: TcpStream,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Request>>>,
) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(request) = read_request(&mut read).await {
        requests.lock().unwrap().push(request);
        let reply = replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Reply::status(200));
        harness::real_time(reply.delay, "a receiver this slow to answer").await;
        let mut response = format!(
            "HTTP/1.1 {} Scripted\r\ncontent-length: {}\r\n",
            reply.status,
            reply.body.len()
        );
        for (name, value) in &reply.headers {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(&reply.body);
        if write.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one request with a `Content-Length` body; `None` when the connection ends.
pub(crate) async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    read: &mut R,
) -> Option<Request> {
    let mut line = String::new();
    if read.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
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
    assert!(
        !headers.contains_key("transfer-encoding"),
        "the sink sends a Content-Length body: {headers:?}"
    );
    let length = headers
        .get("content-length")
        .map_or(0, |v| v.parse().unwrap());
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

/// A handler that delivers through the sink and remembers the tasks it was given.
struct Webhook {
    sink: HttpSink,
    seen: Mutex<Vec<Task>>,
}

impl Webhook {
    fn new(url: String, timeout: Duration) -> Self {
        let spec = HttpSpec {
            url,
            secret: Some(Secret::new(SECRET)),
            signature: event_bridge::sink::route::SignatureScheme::Hmac,
            timeout,
        };
        Webhook {
            sink: HttpSink::new(spec).expect("valid spec"),
            seen: Mutex::default(),
        }
    }

    fn seen(&self) -> Vec<Task> {
        self.seen.lock().unwrap().clone()
    }
}

impl Handler for Webhook {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.seen.lock().unwrap().push(task.clone());
        self.sink.deliver(task).await.map(drop).map_err(Into::into)
    }
}

/// Fails a test that hangs, long after any sane run.
async fn within<T>(work: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("hung for a minute")
}

/// How long after its release (the znode's mtime) a released task may run again.
async fn backoff_of(t: &TestQueue, name: &str) -> i64 {
    let found = t.find_task(name).await;
    let task = t.read_json(&found).await;
    let retry_at = task["retry_at"].as_i64().expect("retry_at set");
    let path = format!("{}/{found}", t.config.root);
    let (_, stat) = t.raw.get_data(&path).await.unwrap();
    retry_at - stat.mtime
}

/// One run judging the queue when `name`'s backoff is over, by ZooKeeper's clock.
async fn run_after_backoff<H: Handler>(t: &TestQueue, handler: &H, name: &str) -> ProcessReport {
    let task = t.read_json(&t.find_task(name).await).await;
    let retry_at = task["retry_at"].as_i64().expect("retry_at set");
    let over = ZkTime::at(retry_at.max(t.now().await.now_ms()) + 1);
    let options = harness::options(1, 16);
    event_bridge::process::run_at(&t.queue, handler, &options, &over)
        .await
        .expect("run")
}

#[tokio::test]
async fn a_task_is_posted_once_signed_and_completed() {
    let t = TestQueue::new().await;
    let receiver = Receiver::start([]).await;
    let mut envelope = Envelope::new("user.signup", json!({"user_id": 42}));
    envelope.idempotency_key = Some("signup-42".into());
    envelope.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
    let name = t.queue.publish(&envelope).await.unwrap();
    let hook = Webhook::new(receiver.url("/hooks/in?src=zk"), Duration::from_secs(10));

    let report = within(run(&t.queue, &hook, 5)).await;
    assert_eq!((report.claimed, report.completed), (1, 1), "{report:?}");
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "posted once: {requests:?}");
    let request = &requests[0];
    let task = hook.seen().remove(0);
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("POST", "/hooks/in?src=zk")
    );
    assert_eq!(request.header("Content-Type"), "application/json");
    assert_eq!(
        request.body,
        serde_json::to_vec(&task.envelope).unwrap(),
        "the body is the envelope, byte for byte"
    );
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(
        (
            &body["id"],
            &body["type"],
            &body["payload"],
            &body["attempts"]
        ),
        (
            &json!(envelope.id),
            &json!("user.signup"),
            &json!({"user_id": 42}),
            &json!(1)
        )
    );
    assert_eq!(request.header("Idempotency-Key"), "signup-42");
    assert_eq!(request.header("X-Event-Bridge-Task"), name);
    assert_eq!(
        request.header("X-Event-Bridge-Fencing-Token"),
        task.fencing_token.to_string()
    );
    assert_eq!(request.header("X-Event-Bridge-Attempt"), "1");
    assert_eq!(
        request.header("traceparent"),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
    let sent: i64 = request.header("X-Event-Bridge-Timestamp").parse().unwrap();
    let now = unix_now();
    assert!((now - sent).abs() < 300, "timestamp {sent}, now {now}");
    assert!(request.signed_with(SECRET), "signature: {request:?}");
    assert!(!request.signed_with("another secret"));
    assert!(
        request.headers.values().all(|v| !v.contains(SECRET)),
        "the secret itself is never sent: {:?}",
        request.headers
    );
}

/// Seconds since the Unix epoch, by this machine's clock.
fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.unwrap().as_secs() as i64
}

#[tokio::test]
async fn a_500_is_retried_after_the_backoff_with_the_same_idempotency_key() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(300)).await;
    let receiver = Receiver::start([Reply::status(500).body("database\n  is down")]).await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/hook"), Duration::from_secs(10));

    let first = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((first.claimed, first.retried), (1, 1), "{first:?}");
    let task = t.read_json(&t.find_task(&name).await).await;
    let expected = format!("HTTP 500 from {}: database is down", receiver.url("/hook"));
    assert_eq!(task["last_error"], json!(expected));
    assert_eq!(task["attempts"], 1);
    let wait = backoff_of(&t, &name).await;
    assert!(
        (200..=1_000).contains(&wait),
        "backoff of about 300 ms, got {wait} ms"
    );

    let completed = within(run_after_backoff(&t, &hook, &name)).await.completed;
    assert_eq!(completed, 1, "delivered once the backoff was over");
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());

    let requests = receiver.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let seen = hook.seen();
    let key = |r: &Request| r.header("Idempotency-Key").to_string();
    assert_eq!(key(&requests[0]), seen[0].envelope.id);
    assert_eq!(
        key(&requests[1]),
        key(&requests[0]),
        "same key on the retry"
    );
    let attempts: Vec<_> = requests
        .iter()
        .map(|r| r.header("X-Event-Bridge-Attempt").to_string())
        .collect();
    assert_eq!(attempts, ["1", "2"]);
    let tokens: Vec<i64> = requests
        .iter()
        .map(|r| r.header("X-Event-Bridge-Fencing-Token").parse().unwrap())
        .collect();
    assert!(
        tokens[1] > tokens[0],
        "a new claim, a higher token: {tokens:?}"
    );
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(
        second["last_error"],
        json!(expected),
        "the retry's body says why"
    );
    assert!(requests.iter().all(|r| r.signed_with(SECRET)));
}

#[tokio::test]
async fn a_429_with_retry_after_holds_the_task_back_that_long() {
    // A backoff far shorter than the 2 s asked for, so that only Retry-After explains the wait.
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(100)).await;
    let receiver = Receiver::start([Reply::status(429).header("Retry-After", "2")]).await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/hook"), Duration::from_secs(10));

    let report = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((report.claimed, report.retried), (1, 1), "{report:?}");
    let task = t.read_json(&t.find_task(&name).await).await;
    let last_error = task["last_error"].as_str().unwrap();
    assert!(
        last_error.starts_with("HTTP 429 from http://"),
        "{last_error}"
    );
    let wait = backoff_of(&t, &name).await;
    assert!(
        (1_800..=3_000).contains(&wait),
        "held back about the 2 s of Retry-After, got {wait} ms"
    );
    let early = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(early.claimed, 0, "{early:?}");
    assert_eq!(t.waiting().await.len(), 1, "it still waits");
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn a_400_goes_to_the_dead_letters_at_once() {
    let t = TestQueue::new().await;
    let receiver = Receiver::start([
        Reply::status(400).body(r#"{"error": "no such user"}"#),
        Reply::status(200),
    ])
    .await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/hook"), Duration::from_secs(10));

    let report = within(run(&t.queue, &hook, 5)).await;
    assert_eq!(
        (report.claimed, report.dead_lettered, report.retried),
        (1, 1, 0),
        "{report:?}"
    );
    let record = t.read_json(&format!("dead/{name}")).await;
    assert_eq!(record["reason"], "permanent failure");
    assert_eq!(record["attempts"], 1);
    assert_eq!(
        record["last_error"],
        json!(format!(
            "HTTP 400 from {}: {{\"error\": \"no such user\"}}",
            receiver.url("/hook")
        ))
    );
    assert!(t.children("tasks").await.is_empty() && t.children("leases").await.is_empty());
    assert_eq!(
        (receiver.requests().len(), receiver.unused_replies()),
        (1, 1)
    );
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_is_permanent() {
    let t = TestQueue::new().await;
    let receiver = Receiver::start([]).await;
    let elsewhere = receiver.url("/elsewhere");
    receiver
        .replies
        .lock()
        .unwrap()
        .push_back(Reply::status(307).header("Location", &elsewhere));
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/moved"), Duration::from_secs(10));

    let report = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((report.claimed, report.dead_lettered), (1, 1), "{report:?}");
    let targets: Vec<_> = receiver.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/moved"], "the Location was not followed");
    let record = t.read_json(&format!("dead/{name}")).await;
    let last_error = record["last_error"].as_str().unwrap();
    assert!(last_error.starts_with("HTTP 307 from "), "{last_error}");
}

#[tokio::test]
async fn a_receiver_slower_than_the_timeout_is_retried() {
    let t = TestQueue::with(|c| c.backoff_base = Duration::from_millis(300)).await;
    let slow = Reply::status(200).after(Duration::from_secs(3));
    let receiver = Receiver::start([slow]).await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/slow"), Duration::from_millis(500));

    let first = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(
        (first.claimed, first.retried, first.completed),
        (1, 1, 0),
        "{first:?}"
    );
    let task = t.read_json(&t.find_task(&name).await).await;
    assert_eq!(
        task["last_error"],
        json!(format!(
            "timed out after 500ms posting to {}",
            receiver.url("/slow")
        ))
    );

    // The next reply is immediate: the retry delivers.
    let completed = within(run_after_backoff(&t, &hook, &name)).await.completed;
    assert_eq!(completed, 1);
    assert_eq!(receiver.requests().len(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let t = TestQueue::new().await;
    // A port that was free a moment ago: nothing listens there now.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(format!("{url}?token=t0ps3cret"), Duration::from_secs(10));

    let report = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((report.claimed, report.retried), (1, 1), "{report:?}");
    let task = t.read_json(&t.find_task(&name).await).await;
    let last_error = task["last_error"].as_str().unwrap();
    assert!(
        last_error.starts_with(&format!("cannot connect to {url}: ")),
        "{last_error}"
    );
    assert!(!last_error.contains("t0ps3cret"), "{last_error}");
}

#[tokio::test]
async fn a_202_with_a_checkpoint_resumes_the_task_with_it_and_a_signal_it_waited_for() {
    let t = TestQueue::new().await;
    let waits = r#"{"checkpoint": {"rows": 200}, "wait_for": ["export-7"], "timeout": "1h"}"#;
    let receiver = Receiver::start([
        Reply::status(202).body(r#"{"checkpoint": {"rows": 100}}"#),
        Reply::status(202).body(waits),
        Reply::status(200).body(r#"{"rows": 300}"#),
    ])
    .await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    let first = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((first.suspended, first.retried), (1, 0), "{first:?}");
    let second = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(second.suspended, 1, "{second:?}");
    assert!(
        t.children("leases").await.is_empty(),
        "no lease while it waits"
    );
    let file = json!({"file": "f.csv"});
    let sent = t.queue.signals().signal("export-7", &file).await.unwrap();
    assert!(matches!(
        sent,
        event_bridge::queue::Signalled::Delivered { .. }
    ));
    let third = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(third.completed, 1, "{third:?}");

    let requests = receiver.requests();
    let bodies: Vec<Value> = (requests.iter())
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(bodies.len(), 3);
    assert!(bodies[0].get("resume").is_none(), "{}", bodies[0]);
    assert_eq!(bodies[1]["resume"]["checkpoint"], json!({"rows": 100}));
    assert_eq!(bodies[2]["resume"]["checkpoint"], json!({"rows": 200}));
    let waited = &bodies[2]["resume"]["done"][0];
    assert_eq!(waited["keys"], json!(["export-7"]), "{waited}");
    assert_eq!(
        waited["outcome"],
        json!({"by": "signal", "key": "export-7", "payload": {"file": "f.csv"}})
    );
    // No attempt counted for a suspension; the deadline is within the attempt's timeout.
    let attempts: Vec<&str> = requests
        .iter()
        .map(|r| r.header("X-Event-Bridge-Attempt"))
        .collect();
    assert_eq!(attempts, ["1", "1", "1"], "{name}");
    for request in &requests {
        let deadline: i64 = request.header("X-Event-Bridge-Deadline").parse().unwrap();
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let left = deadline - now_ms.unwrap().as_millis() as i64;
        assert!((0..=10_000).contains(&left), "deadline {left} ms away");
    }
}

/// A webhook that answers `202` with `resume_in` forty times keeps its task's record flat: each
/// sleep goes to a step znode once the next delivery ends it, so every delivery carries
/// `resume.done` of the one sleep it was in and a record of the same size, under a 1 024-byte
/// cap that forty sleeps in the envelope would pass (the previous version buried the task
/// after about twenty). Time is driven: each run is 10 s of ZooKeeper time after the last.
#[tokio::test]
async fn forty_202_sleeps_keep_the_record_flat_and_leave_no_step_znode() {
    const SLEEPS: usize = 40;
    let t = TestQueue::with(|c| c.checkpoint_max_bytes = 1024).await;
    let mut replies: Vec<Reply> = (0..SLEEPS)
        .map(|i| {
            let body = json!({"checkpoint": {"page": 1000 + i}, "resume_in": "1s"});
            Reply::status(202).body(&body.to_string())
        })
        .collect();
    replies.push(Reply::status(200).body("{}"));
    let receiver = Receiver::start(replies).await;
    let envelope = Envelope::new("export", json!({}));
    let id = envelope.id.clone();
    t.queue.publish_many(&[envelope]).await.unwrap();
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    let start = t.now().await.now_ms();
    for i in 0..=SLEEPS {
        let at = ZkTime::at(start + 10_000 * i as i64);
        let options = harness::options(1, 1);
        let report = within(event_bridge::process::run_at(
            &t.queue, &hook, &options, &at,
        ))
        .await
        .unwrap();
        let expected = if i < SLEEPS { (1, 0) } else { (0, 1) };
        assert_eq!(
            (report.suspended, report.completed),
            expected,
            "run {i}: {report:?}"
        );
    }
    let bodies: Vec<Value> = (receiver.requests().iter())
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(bodies.len(), SLEEPS + 1);
    let size = |i: usize| bodies[i]["resume"].to_string().len();
    for (i, body) in bodies.iter().enumerate().skip(2) {
        let resume = &body["resume"];
        assert_eq!(resume["stored"], json!(i - 1), "delivery {i}: {resume}");
        assert_eq!(resume["done"].as_array().map(Vec::len), Some(1), "{resume}");
        assert_eq!(resume["checkpoint"], json!({"page": 1000 + i - 1}));
    }
    assert!(
        size(SLEEPS) * 10 <= size(10) * 12,
        "the record as delivered: {} bytes at the 10th, {} at the last",
        size(10),
        size(SLEEPS)
    );
    let folder = t.queue.layout().steps_of(&id);
    assert!(
        t.raw.check_stat(&folder).await.unwrap().is_none(),
        "its step znodes went with it"
    );
}

#[tokio::test]
async fn a_malformed_202_suspension_goes_to_the_dead_letters_naming_its_problem() {
    let t = TestQueue::new().await;
    let bad = r#"{"checkpoint": 1, "resume_in": "soon"}"#;
    let receiver = Receiver::start([Reply::status(202).body(bad)]).await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    let report = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let record = t.read_json(&format!("dead/{name}")).await;
    let error = record["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("HTTP 202 from http://")
            && error.contains("resume_in \"soon\" is not a span"),
        "{record}"
    );
    // Any other 202 delivers, as before.
    let receiver = Receiver::start([Reply::status(202).body(r#"{"queued": true}"#)]).await;
    t.publish(1).await;
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    assert_eq!(within(run(&t.queue, &hook, 1)).await.completed, 1);
}

/// A `202`'s body is read up to `CHECKPOINT_MAX_BYTES`, not the 64 KiB of a result: a 300 KB
/// checkpoint under a 512 KiB cap suspends the task, and its next delivery carries it whole. A
/// `202` whose body is over the cap is never taken for a success: the task goes to the dead
/// letters, the reason naming the cap.
#[tokio::test]
async fn a_202_checkpoint_is_read_up_to_the_cap_and_one_over_it_never_completes() {
    let t = TestQueue::with(|c| c.checkpoint_max_bytes = 512 * 1024).await;
    let big = json!({"checkpoint": {"blob": "x".repeat(300_000)}}).to_string();
    let over = json!({"checkpoint": {"blob": "y".repeat(600_000)}}).to_string();
    let receiver = Receiver::start([
        Reply::status(202).body(&big),
        Reply::status(202).body(&over),
    ])
    .await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    let first = within(run(&t.queue, &hook, 1)).await;
    assert_eq!((first.suspended, first.completed), (1, 0), "{first:?}");
    let second = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(
        (second.completed, second.dead_lettered),
        (0, 1),
        "{second:?}"
    );
    let requests = receiver.requests();
    let resumed: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let carried = resumed["resume"]["checkpoint"]["blob"].as_str();
    assert_eq!(carried.map(str::len), Some(300_000), "the checkpoint whole");
    let record = t.read_json(&format!("dead/{name}")).await;
    let error = record["last_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("HTTP 202 from http://")
            && error.contains("over the 524288-byte cap (CHECKPOINT_MAX_BYTES)"),
        "{error}"
    );
}

/// With the default cap (64 KiB), a 100 KB checkpoint is over it: dead-lettered, not completed.
#[tokio::test]
async fn a_202_over_the_default_cap_goes_to_the_dead_letters_not_completed() {
    let t = TestQueue::new().await;
    let over = json!({"checkpoint": {"blob": "z".repeat(100_000)}}).to_string();
    let receiver = Receiver::start([Reply::status(202).body(&over)]).await;
    let name = t.publish(1).await.remove(0);
    let hook = Webhook::new(receiver.url("/export"), Duration::from_secs(10));
    let report = within(run(&t.queue, &hook, 1)).await;
    assert_eq!(
        (report.completed, report.dead_lettered),
        (0, 1),
        "{report:?}"
    );
    let record = t.read_json(&format!("dead/{name}")).await;
    let error = record["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("CHECKPOINT_MAX_BYTES"), "{error}");
}

/// A `202` whose body is cut off (the connection closed before its `Content-Length`) is not a
/// success either: the task is retried, not completed.
#[tokio::test]
async fn a_202_whose_body_is_cut_off_is_retried_not_completed() {
    let t = TestQueue::new().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/export", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        read_request(&mut read).await.expect("a request");
        let head = "HTTP/1.1 202 Accepted\r\ncontent-length: 1000\r\n\r\n";
        write.write_all(head.as_bytes()).await.unwrap();
        write.write_all(br#"{"checkpoint": {"rows"#).await.unwrap();
        // Dropped here: the body ends 978 bytes short.
    });
    t.publish(1).await;
    let hook = Webhook::new(url.clone(), Duration::from_secs(10));
    let report = within(run(&t.queue, &hook, 1)).await;
    server.await.unwrap();
    assert_eq!((report.completed, report.retried), (0, 1), "{report:?}");
}
