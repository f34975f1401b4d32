//! The queue every dashboard test looks at: five pending tasks of two types (one of them held
//! by a consumer, through its concurrency key's gate, which it fills), and two dead letters
//! cancelled from a third type.

use event_bridge::Envelope;
use event_bridge::cancel::{Cancelled, cancel};
use event_bridge::limit::{KeyLimit, Limit};
use event_bridge::queue::{Restraints, TaskOutcome};
use harness::TestQueue;
use serde_json::json;

/// What the scene holds.
/// The held task's progress message.
pub const PROGRESS: &str = "copied 4 of 10 files";

pub struct Scene {
    /// The dead letters, oldest first.
    pub dead: Vec<String>,
    /// Who holds the held task, on a session that lives as long as the scene (its key's slot
    /// is ephemeral).
    pub holder: event_bridge::Queue,
}

/// The concurrency key of the held task.
pub const KEY: &str = "tenant-1";
/// A batch with one member, dead.
pub const BATCH: &str = "invoices-nightly";

/// Restraints whose routes let each concurrency key run one task at a time.
fn one_per_key() -> Restraints {
    let one = KeyLimit {
        max_in_flight: Some(1),
        rate_per_ms: None,
    };
    harness::per_key_restraints(Limit::default(), one)
}

pub async fn build(t: &TestQueue) -> Scene {
    // The second joins a batch: once cancelled, the batch counts it dead.
    let open = event_bridge::batch::Open {
        on_complete: "invoices.done".into(),
        ..Default::default()
    };
    event_bridge::batch::open(&t.queue, BATCH, open)
        .await
        .unwrap();
    let mut doomed: Vec<Envelope> = (0..2)
        .map(|i| Envelope::new("invoice.send", json!({ "n": i })))
        .collect();
    doomed[1].batch = Some(BATCH.into());
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
    pending[0].concurrency_key = Some(KEY.into());
    pending.extend((0..2).map(|i| Envelope::new("report.export", json!({ "n": i }))));
    // One waits in the low lane.
    pending[4].priority = event_bridge::task::Priority::Low;
    let names = t.queue.publish_many(&pending).await.unwrap();
    let holder = t.consumer("holder").await;
    // Claimed through a route that lets its key run one task at a time: the key is at its cap.
    let (body, stat) = t
        .raw
        .get_data(&holder.layout().task(&names[0]))
        .await
        .unwrap();
    let restraints = one_per_key();
    let claimed = holder
        .claim_read(&names[0], &body, &stat, &t.now().await, &restraints)
        .await;
    let mut lease = match claimed.unwrap() {
        TaskOutcome::Claimed(lease) => *lease,
        other => panic!("not claimed: {other:?}"),
    };
    // Its handler reported progress, and an extension carried it.
    lease.task.progress.report(40, PROGRESS).unwrap();
    holder.extend(&mut lease).await.unwrap();
    Scene { dead, holder }
}
