//! Publishing: sequential creates in the task's lane (`tasks/` for normal) (with an idempotency key, together with the
//! key: see [`super::keys`]).

use super::Queue;
use super::keys::Published;
use crate::error::{Error, Result};
use crate::task::{self, Envelope, Priority};

impl Queue {
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
        self.publish_in(Priority::Normal, body).await
    }

    /// Publishes a body at the tail of `lane`; returns the task's name.
    pub(crate) async fn publish_in(&self, lane: Priority, body: &[u8]) -> Result<String> {
        task::check_size(body)?;
        let prefix = self.layout().lane_prefix(lane);
        let (_, seq) = self
            .client()
            .create(&prefix, body, &self.sequential())
            .await
            .map_err(|e| Error::zk("create", &prefix, e))?;
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
                Published::Existing { id, task: None, .. } => Err(Error::Unreadable {
                    path: id,
                    problem: "its idempotency key is taken by a task whose name was never written"
                        .into(),
                }),
            })
            .collect()
    }
}
