//! Publishing: sequential creates under `tasks/`.

use super::Queue;
use crate::error::{Error, Result};
use crate::layout::TASK_PREFIX;
use crate::task::{self, Envelope};

/// How many creates a bulk publish keeps in flight.
const PUBLISH_WINDOW: usize = 1_000;

impl Queue {
    /// Publishes one envelope; returns the task's name.
    pub async fn publish(&self, envelope: &Envelope) -> Result<String> {
        self.publish_raw(&envelope.to_bytes()?).await
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

    /// Publishes many envelopes pipelined, keeping their order; returns the task names.
    pub async fn publish_many(&self, envelopes: &[Envelope]) -> Result<Vec<String>> {
        let bodies = envelopes
            .iter()
            .map(Envelope::to_bytes)
            .collect::<Result<Vec<_>>>()?;
        let prefix = self.layout().task_prefix();
        let mut names = Vec::with_capacity(bodies.len());
        for window in bodies.chunks(PUBLISH_WINDOW) {
            let creates: Vec<_> = window
                .iter()
                .map(|b| self.client().create(&prefix, b, &self.sequential()))
                .collect();
            for created in futures::future::join_all(creates).await {
                let (_, seq) = created.map_err(|e| Error::zk("create", &prefix, e))?;
                names.push(format!("{TASK_PREFIX}{seq}"));
            }
        }
        Ok(names)
    }
}
