//! The queue every dashboard test looks at: five pending tasks of two types (one of them held
//! by a consumer), and two dead letters cancelled from a third type.

use event_bridge::Envelope;
use event_bridge::cancel::{Cancelled, cancel};
use event_bridge::queue::ClaimOutcome;
use harness::TestQueue;
use serde_json::json;

/// What the scene holds.
pub struct Scene {
    /// The dead letters, oldest first.
    pub dead: Vec<String>,
    /// Who holds the held task.
    pub holder: String,
}

pub async fn build(t: &TestQueue) -> Scene {
    let doomed: Vec<Envelope> = (0..2)
        .map(|i| Envelope::new("invoice.send", json!({ "n": i })))
        .collect();
    let doomed = t.queue.publish_many(&doomed).await.unwrap();
    let mut dead = Vec::new();
    for name in &doomed {
        match cancel(&t.queue, name).await.unwrap() {
            Cancelled::Cancelled { name } => dead.push(name),
            other => panic!("not cancelled: {other:?}"),
        }
    }
    let mut pending: Vec<Envelope> = (0..3)
        .map(|i| Envelope::new("mail.send", json!({ "n": i })))
        .collect();
    pending.extend((0..2).map(|i| Envelope::new("report.export", json!({ "n": i }))));
    let names = t.queue.publish_many(&pending).await.unwrap();
    let holder = t.consumer("holder").await;
    match holder.claim(&names[0], &t.now().await).await.unwrap() {
        ClaimOutcome::Claimed(_) => {}
        other => panic!("not claimed: {other:?}"),
    }
    Scene {
        dead,
        holder: holder.consumer_id().to_string(),
    }
}
