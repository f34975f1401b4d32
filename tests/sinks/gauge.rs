//! An HTTP receiver for limits: answers every request with 200 after a delay, and records when
//! each came and the most it had in hand at once, in all and per concurrency key. Requests of
//! one key may be held until the test lets them go.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::sink_http::{Request, read_request};

/// Requests in hand now and at most, per concurrency key (`""`: none).
#[derive(Default)]
struct PerKey {
    now: BTreeMap<String, usize>,
    most: BTreeMap<String, usize>,
}

pub(crate) struct Gauge {
    address: String,
    arrivals: Arc<Mutex<Vec<(Instant, Request)>>>,
    pub(crate) most: Arc<AtomicUsize>,
    per_key: Arc<Mutex<PerKey>>,
    release: watch::Sender<bool>,
}

/// The concurrency key of a request's envelope (`""` when it has none).
fn key_of(request: &Request) -> String {
    serde_json::from_slice::<Value>(&request.body)
        .ok()
        .and_then(|v| v["concurrency_key"].as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Gauge {
    pub(crate) async fn start(delay: Duration) -> Self {
        Gauge::holding(delay, None).await
    }

    /// As [`Gauge::start`], holding every request of concurrency key `held` until
    /// [`Gauge::release`].
    pub(crate) async fn holding(delay: Duration, held: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let arrivals: Arc<Mutex<Vec<(Instant, Request)>>> = Arc::default();
        let per_key: Arc<Mutex<PerKey>> = Arc::default();
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (release, released) = watch::channel(false);
        let held = held.map(str::to_string);
        let shared = (arrivals.clone(), now, most.clone(), per_key.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (a, n, m, k) = shared.clone();
                let (mut released, held) = (released.clone(), held.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    while let Some(request) = read_request(&mut read).await {
                        let key = key_of(&request);
                        let in_hand = n.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(in_hand, Ordering::SeqCst);
                        {
                            let mut k = k.lock().unwrap();
                            let now = k.now.entry(key.clone()).or_default();
                            *now += 1;
                            let now = *now;
                            let most = k.most.entry(key.clone()).or_default();
                            *most = (*most).max(now);
                        }
                        a.lock().unwrap().push((Instant::now(), request));
                        if held.as_deref() == Some(key.as_str()) {
                            let _ = released.wait_for(|r| *r).await;
                        }
                        harness::real_time(delay, "a receiver this slow to answer").await;
                        *k.lock().unwrap().now.get_mut(&key).unwrap() -= 1;
                        n.fetch_sub(1, Ordering::SeqCst);
                        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                        if write.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Gauge {
            address,
            arrivals,
            most,
            per_key,
            release,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }

    pub(crate) fn arrivals(&self) -> Vec<(Instant, Request)> {
        self.arrivals.lock().unwrap().clone()
    }

    /// Arrivals of concurrency key `key` so far.
    pub(crate) fn arrivals_of(&self, key: &str) -> usize {
        self.arrivals()
            .iter()
            .filter(|(_, r)| key_of(r) == key)
            .count()
    }

    /// When the requests of concurrency key `key` came, in order.
    pub(crate) fn times_of(&self, key: &str) -> Vec<Instant> {
        let arrivals = self.arrivals();
        let mut times: Vec<Instant> = (arrivals.iter())
            .filter(|(_, r)| key_of(r) == key)
            .map(|(at, _)| *at)
            .collect();
        times.sort();
        times
    }

    /// The most requests of each concurrency key in hand at once.
    pub(crate) fn most_per_key(&self) -> BTreeMap<String, usize> {
        self.per_key.lock().unwrap().most.clone()
    }

    /// Requests of concurrency key `key` in hand now.
    pub(crate) fn in_hand(&self, key: &str) -> usize {
        let k = self.per_key.lock().unwrap();
        k.now.get(key).copied().unwrap_or(0)
    }

    /// Lets the held requests go (and every later one of their key).
    pub(crate) fn release(&self) {
        let _ = self.release.send(true);
    }
}

/// The most of `times` within any one second that starts at one of them.
pub(crate) fn most_within_a_second(times: &[Instant]) -> usize {
    let second = Duration::from_secs(1);
    let within = |start: Instant| {
        let inside = times
            .iter()
            .filter(|t| **t >= start && **t < start + second);
        inside.count()
    };
    times.iter().map(|start| within(*start)).max().unwrap_or(0)
}
