//! The producer: the library's `Queue` on a session of its own, publishing envelopes of type
//! `chaos` with distinct ids at a steady rate (`publish_many` every tick, for the tasks due by
//! then), riding out leader changes. A batch that fails is published again whole: some of it
//! may have landed before the link dropped, so those envelopes may exist twice (their ids are
//! kept as uncertain, and allowed for when duplicates and token order are judged).

use std::collections::HashSet;
use std::time::Duration;

use event_bridge::{Config, Envelope, Queue};
use serde_json::json;
use tokio::time::Instant;

const TICK: Duration = Duration::from_millis(100);

/// What was published.
pub struct Published {
    pub ids: Vec<String>,
    /// Failed `publish_many` calls, each sent again.
    pub retries: usize,
    /// Envelopes in those failed calls: each may have landed twice.
    pub resent: usize,
    /// Their ids.
    pub uncertain: HashSet<String>,
    /// From the first tick to the last envelope published.
    pub took: Duration,
}

/// Publishes `total` envelopes at `rate` a second from `start`.
pub async fn publish(config: &Config, total: usize, rate: f64, start: Instant) -> Published {
    let envelopes: Vec<_> = (0..total)
        .map(|n| Envelope::new("chaos", json!({ "n": n })))
        .collect();
    let mut producer = Producer::connect(config).await;
    let mut sent = 0;
    while sent < total {
        tokio::time::sleep(TICK).await;
        let due = ((start.elapsed().as_secs_f64() * rate) as usize).clamp(sent, total);
        producer.publish(&envelopes[sent..due]).await;
        sent = due;
    }
    Published {
        ids: envelopes.into_iter().map(|e| e.id).collect(),
        retries: producer.retries,
        resent: producer.resent,
        uncertain: producer.uncertain,
        took: start.elapsed(),
    }
}

struct Producer {
    config: Config,
    queue: Queue,
    retries: usize,
    resent: usize,
    uncertain: HashSet<String>,
}

impl Producer {
    async fn connect(config: &Config) -> Self {
        Producer {
            config: config.clone(),
            queue: new_queue(config).await.expect("the producer's session"),
            retries: 0,
            resent: 0,
            uncertain: HashSet::new(),
        }
    }

    /// Publishes `batch`, again until it works (on a new session when the old one is over);
    /// gives up after a minute of failures (a hang guard).
    async fn publish(&mut self, batch: &[Envelope]) {
        if batch.is_empty() {
            return;
        }
        for _ in 0..300 {
            let Err(e) = self.queue.publish_many(batch).await else {
                return;
            };
            self.retries += 1;
            self.resent += batch.len();
            self.uncertain.extend(batch.iter().map(|e| e.id.clone()));
            eprintln!(
                "chaos: publishing {} tasks failed ({e}); again",
                batch.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            if self.queue.session_over()
                && let Ok(queue) = new_queue(&self.config).await
            {
                self.queue = queue;
            }
        }
        panic!("publishing kept failing for a minute");
    }
}

async fn new_queue(config: &Config) -> event_bridge::Result<Queue> {
    let client = event_bridge::session::connect(config).await?;
    Ok(Queue::new(
        client,
        config,
        Queue::new_consumer_id("chaos-producer"),
    ))
}
