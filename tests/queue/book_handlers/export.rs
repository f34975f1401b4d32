//! The book's second handler (integrations/rust-handler.md includes the ANCHOR part): an
//! export in ten parts with progress, answering a result.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The example's export store: the parts written for each export id.
#[derive(Default)]
pub struct ExportStore {
    pub parts: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl ExportStore {
    pub async fn write_part(&self, id: &str, part: u8) {
        let mut parts = self.parts.lock().unwrap();
        parts.entry(id.to_string()).or_default().push(part);
    }

    pub fn url(&self, id: &str) -> String {
        format!("https://exports.example/{id}.csv")
    }
}

// ANCHOR: export
use event_bridge::handler::Delivered;
use event_bridge::{Handler, HandlerError, Task, TaskResult};

/// Exports a report in ten parts, reporting progress after each, and answers where the
/// export is: with KEEP_DONE, the answer is kept in the task's completion record.
pub struct ExportReport {
    pub store: ExportStore,
}

impl Handler for ExportReport {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.handle_delivered(task).await.map(drop)
    }

    async fn handle_delivered(&self, task: &Task) -> Result<Delivered, HandlerError> {
        for part in 0..10u8 {
            self.store.write_part(&task.envelope.id, part).await;
            // Kept in memory; the lease's next extension writes it (no write of its own).
            task.progress
                .report(part * 10 + 10, &format!("part {} of 10", part + 1))
                .ok();
        }
        let answer = serde_json::json!({"url": self.store.url(&task.envelope.id)});
        let result =
            TaskResult::json(answer).map_err(|e| HandlerError::Permanent(e.to_string()))?;
        Ok(Delivered::with_result(result))
    }
}
// ANCHOR_END: export
