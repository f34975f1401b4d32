//! Publishing: sequential creates in the task's lane (`tasks/` for normal) (with an idempotency key, together with the
//! key: see [`super::keys`]).

use zookeeper_client as zk;

use super::Queue;
use super::keys::Published;
use crate::error::{Error, Result};
use crate::lane::Lane;
use crate::task::{self, Envelope};

/// Publishes a bulk publish keeps in flight.
const PUBLISH_WINDOW: usize = 1_000;

impl Queue {
    /// Publishes `envelopes` pipelined, in order. An envelope with an idempotency key is
    /// created together with its key in one multi-op, or not at all when the key is taken
    /// (pending, held, or completed within `DEDUP_WINDOW_MS`).
    pub async fn publish_all(&self, envelopes: &[Envelope]) -> Result<Vec<Published>> {
        let envelopes = &*self.with_due_times(envelopes).await?;
        self.check_batches(envelopes).await?;
        super::parents::check_order(envelopes)?;
        let mut published = Vec::with_capacity(envelopes.len());
        // Runs of tasks without parents go pipelined; a task with parents goes alone, after
        // them, naming those of this publish by the task names they got. So does a grouped
        // debounced task: its place must land between the tasks around it, and its write
        // needs a read first, which pipelined creates would pass.
        let mut names = std::collections::HashMap::new();
        let mut rest = envelopes;
        while !rest.is_empty() {
            let alone =
                |e: &Envelope| !e.after.is_empty() || e.group.is_some() && e.debounce.is_some();
            let run = rest.iter().take_while(|e| !alone(e)).count();
            let (plain, after) = rest.split_at(run);
            for window in plain.chunks(PUBLISH_WINDOW) {
                let done = self.publish_window(window).await?;
                names.extend(done.iter().filter_map(|p| match p {
                    Published::Created { id, task } => Some((id.clone(), task.clone())),
                    _ => None,
                }));
                published.extend(done);
            }
            if let Some((child, tail)) = after.split_first() {
                let mut child = child.clone();
                for parent in &mut child.after {
                    if let Some(name) = names.get(parent) {
                        *parent = name.clone();
                    }
                }
                let one = match child.after.is_empty() {
                    true => self.publish_one(&child).await?,
                    false => self.publish_child(&child).await?,
                };
                if let Published::Created { id, task } = &one {
                    names.insert(id.clone(), task.clone());
                }
                published.push(one);
                rest = tail;
            } else {
                rest = after;
            }
        }
        Ok(published)
    }

    /// Publishes one envelope; returns the task's name. With an idempotency key that is
    /// taken, nothing is created and the name is that of the task that has the key
    /// ([`Queue::publish_all`] says which happened).
    pub async fn publish(&self, envelope: &Envelope) -> Result<String> {
        let mut names = self.publish_many(std::slice::from_ref(envelope)).await?;
        Ok(names.remove(0))
    }

    /// Publishes a body as it is (any producer's JSON) in the normal lane, as a 000 producer
    /// does; returns the task's name.
    pub async fn publish_raw(&self, body: &[u8]) -> Result<String> {
        self.publish_in(&Lane::NORMAL, body).await
    }

    /// Publishes a body at the tail of `lane` (made already); returns the task's name.
    pub(crate) async fn publish_in(&self, lane: &Lane, body: &[u8]) -> Result<String> {
        task::check_size(body)?;
        let prefix = self.layout().lane_prefix(lane);
        let mut created = self
            .client()
            .create(&prefix, body, &self.sequential())
            .await;
        if matches!(lane, Lane::Key(_)) && created == Err(zk::Error::NoNode) {
            // A key lane deleted by hand since this process made it: made again.
            self.forget_key_lane(lane);
            self.ensure_lanes(std::slice::from_ref(lane)).await?;
            created = self
                .client()
                .create(&prefix, body, &self.sequential())
                .await;
        }
        let (_, seq) = created.map_err(|e| Error::zk("create", &prefix, e))?;
        Ok(format!("{}{seq}", lane.prefix()))
    }

    /// Publishes many envelopes pipelined, keeping their order; returns the task names (for a
    /// taken idempotency key, that of the task that has it).
    pub async fn publish_many(&self, envelopes: &[Envelope]) -> Result<Vec<String>> {
        let published = self.publish_all(envelopes).await?;
        published
            .into_iter()
            .map(|p| match p {
                Published::Created { task, .. } => Ok(task),
                Published::Existing {
                    task: Some(task), ..
                } => Ok(task),
                Published::Debounced { key, .. } => Ok(format!("debounce/{key}")),
                Published::Blocked { id, .. } => Ok(format!("after/{id}")),
                Published::Buried { dead_letter, .. } => Ok(format!("dead/{dead_letter}")),
                Published::Existing { id, task: None, .. } => Err(Error::Unreadable {
                    path: id,
                    problem: "its idempotency key is taken by a task whose name was never written"
                        .into(),
                }),
            })
            .collect()
    }

    /// `envelopes` with the delays they ask for (`delay_ms`) made due times (`retry_at`, by
    /// ZooKeeper's clock read once); as they are when none asks.
    pub(crate) async fn with_due_times<'e>(
        &self,
        envelopes: &'e [Envelope],
    ) -> Result<std::borrow::Cow<'e, [Envelope]>> {
        if envelopes.iter().all(|e| e.delay_ms.is_none()) {
            return Ok(std::borrow::Cow::Borrowed(envelopes));
        }
        let now = self.server_time().await?.now_ms();
        let due = envelopes.iter().map(|e| {
            let mut e = e.clone();
            if let Some(delay) = e.delay_ms.take() {
                e.retry_at = Some(e.retry_at.unwrap_or(0).max(now + delay as i64));
            }
            e
        });
        Ok(std::borrow::Cow::Owned(due.collect()))
    }
}
