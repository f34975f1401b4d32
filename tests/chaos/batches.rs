//! Batches under mixed traffic: a share of the plain tasks join one batch, opened before the
//! first publish and sealed after the last. Its callbacks (on_complete, and on_success: no
//! member may die here) must each be delivered, once, after every member's first success, and
//! the batch's counts must match what was published and delivered.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use event_bridge::Queue;
use event_bridge::batch::{self, BatchStatus, Open};
use serde_json::{Value, json};

use crate::checks::Inputs;
use crate::receiver::{Answer, Delivery};

pub const BATCH: &str = "chaos-batch";
pub const ON_COMPLETE: &str = "chaos.batch.done";
pub const ON_SUCCESS: &str = "chaos.batch.ok";

/// Whether plain task number `n` joins the batch.
pub fn joins(n: usize) -> bool {
    n % 40 == 5
}

/// Opens the batch (before the first publish).
pub async fn open(queue: &Queue) {
    let open = Open {
        on_complete: ON_COMPLETE.into(),
        on_success: Some(ON_SUCCESS.into()),
        payload: json!({ "chaos": true }),
    };
    batch::open(queue, BATCH, open)
        .await
        .expect("open the batch");
}

/// Seals the batch (after the last publish), again on a failed link until it answers; a
/// seal whose reply was lost finds it sealed already.
pub async fn seal(queue: &Queue) {
    let mut tries = harness::Tries::within(Duration::from_secs(60));
    while tries.again().await {
        match batch::seal(queue, BATCH).await {
            Ok(_) => return,
            Err(e) if e.to_string().contains("sealed already") => return,
            Err(e) => eprintln!("chaos: sealing the batch failed ({e}); again"),
        }
    }
    panic!("sealing the batch kept failing for a minute");
}

/// The batch at the end, read on the checker's own session.
pub async fn read(config: &event_bridge::Config) -> Option<BatchStatus> {
    let queue = crate::producer::new_queue(config, "chaos-batch-reader")
        .await
        .ok()?;
    batch::status(&queue, BATCH).await.ok()
}

#[derive(Default)]
pub struct BatchFigures {
    pub members: usize,
    pub status: Option<Value>,
    /// The callbacks' ids, for the stranger check.
    pub callback_ids: HashSet<String>,
    pub violations: Vec<String>,
}

pub fn judge(input: &Inputs, by_id: &HashMap<&str, Vec<&Delivery>>) -> BatchFigures {
    let mut f = BatchFigures::default();
    let published = input.published;
    let members: Vec<&str> = (published.sent.iter())
        .filter(|s| s.batch)
        .map(|s| s.id.as_str())
        .collect();
    f.members = members.len();
    let Some(status) = input.batch else {
        f.violations
            .push("the batch could not be read at the end".into());
        return f;
    };
    f.status = serde_json::to_value(status).ok();
    let resent = members
        .iter()
        .filter(|id| published.uncertain.contains(**id))
        .count();
    let counts_fit = (status.total as usize) >= members.len()
        && (status.total as usize) <= members.len() + resent;
    if !counts_fit || !status.sealed || status.pending != 0 || status.dead != 0 {
        f.violations.push(format!(
            "batch counts off: {} members published ({} maybe twice), status {status:?}",
            members.len(),
            resent
        ));
    }
    let first_ok = |id: &str| {
        (by_id.get(id)?.iter())
            .find(|d| d.answer == Answer::Ok)
            .map(|d| d.arrived)
    };
    let last_member = members.iter().filter_map(|id| first_ok(id)).max();
    for (kind, id) in [
        ("on_complete", &status.callback_id),
        ("on_success", &status.success_callback_id),
    ] {
        let Some(id) = id else {
            f.violations
                .push(format!("no {kind} callback was published: {status:?}"));
            continue;
        };
        f.callback_ids.insert(id.clone());
        let Some(first) = first_ok(id) else {
            f.violations
                .push(format!("the {kind} callback {id} was never delivered"));
            continue;
        };
        if last_member.is_some_and(|last| first < last) {
            f.violations.push(format!(
                "the {kind} callback {id} came before a member's first success"
            ));
        }
    }
    // Exactly one callback of each type: no other id of theirs delivered.
    for d in (by_id.values().flatten())
        .filter(|d| d.event_type == ON_COMPLETE || d.event_type == ON_SUCCESS)
        .filter(|d| !f.callback_ids.contains(&d.id))
    {
        f.violations.push(format!(
            "a second {} callback {} delivered",
            d.event_type, d.id
        ));
    }
    f
}
