//! Publishing: sequential creates under `tasks/` (with an idempotency key, together with the
//! key: see [`super::keys`]).

use super::Queue;
use super::keys::Published;
use crate::error::{Error, Result};
use crate::layout::TASK_PREFIX;
use crate::task::{self, Envelope};

impl Queue {
    /// Publishes one envelope; returns the task's name. With an idempotency key that is
    /// taken, nothing is created and the name is that of the task that has the key
    /// ([`Queue::publish_all`] says which happened).
    pub async fn publish(&self, envelope: &Envelope) -> Result<String> {
        let mut names = self.publish_many(std::slice::from_ref(envelope)).await?;
        Ok(names.remove(0))
    }

    /// Publishes a body as it is (any producer's JSON); returns the task's name.
    pub async fn publish_raw(&self, body: &[u8]) -> Result<String> {
        task::check_size(body)?;
        let prefix = self.layout().task_prefix();
        let (_, seq) = self
            .client()
            .create(&prefix, body, &self.sequential())
            .await
            .map_err(|e| Error::zk("create", &prefix, e))?;
        Ok(format!("{TASK_PREFIX}{seq}"))
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
                Published::Existing { id, task: None, .. } => Err(Error::Unreadable {
                    path: id,
                    problem: "its idempotency key is taken by a task whose name was never written"
                        .into(),
                }),
            })
            .collect()
    }
}
