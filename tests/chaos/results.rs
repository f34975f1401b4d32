//! Results kept under faults: every consumer keeps completion records (`KEEP_DONE`), and the
//! receiver answers each `200` with JSON naming the request's task and fencing token. Once the
//! queue settled, a sample of the ids answered `200` is looked up (by id, as `status` does):
//! each must have a record whose `result` is exactly the answer the receiver gave to the claim
//! that completed it (its `task` and `fencing_token`), and that answer must be a `200` in the
//! ledger. A record missing, a result missing or another claim's, is a violation.
//!
//! Progress is not checked here: the consumers are the `event-bridge` binary delivering to a
//! webhook, and a webhook has no way to report progress (only a handler of one's own does).

use std::collections::HashSet;

use event_bridge::queue::DoneRecord;
use serde_json::json;

use crate::receiver::{Answer, Ledger};
use crate::tree::Tree;

/// How long the consumers keep records: past the run.
pub const KEEP_DONE: &str = "1h";
/// Ids looked up, at most (every k-th of those answered `200`, so the sample spans the run).
const SAMPLE: usize = 300;

/// What the receiver answers a `200` with: the result the task's record must keep.
pub fn answer(task: &str, token: i64) -> String {
    json!({"task": task, "token": token}).to_string()
}

#[derive(Debug, Default)]
pub struct ResultFigures {
    /// Ids answered `200`, and those looked up.
    pub succeeded: usize,
    pub sampled: usize,
    /// Ids whose record (or its result) could not be found, and records whose result is not
    /// the answer to the claim that completed them.
    pub missing: Vec<String>,
    pub wrong: Vec<String>,
}

/// The `200`s of the ledger as (id, task, token), and every k-th id of them to look up.
pub fn sample(ledger: &Ledger) -> (HashSet<(String, String, i64)>, Vec<String>) {
    let ok: HashSet<(String, String, i64)> = (ledger.deliveries.iter())
        .filter(|d| d.answer == Answer::Ok)
        .map(|d| (d.id.clone(), d.task.clone(), d.token))
        .collect();
    let mut ids: Vec<String> = ok.iter().map(|(id, _, _)| id.clone()).collect();
    ids.sort();
    ids.dedup();
    let step = ids.len().div_ceil(SAMPLE).max(1);
    let sampled = ids.into_iter().step_by(step).collect();
    (ok, sampled)
}

/// Looks up each sampled id's completion record and judges its result against the `200`s
/// (`ok`, `ids`: [`sample`]'s).
pub async fn check(
    tree: &Tree,
    (ok, ids): (HashSet<(String, String, i64)>, Vec<String>),
) -> ResultFigures {
    let queue = harness::consumer(&tree.config, "results").await;
    let mut f = ResultFigures {
        succeeded: ok.iter().map(|(id, _, _)| id).collect::<HashSet<_>>().len(),
        sampled: ids.len(),
        ..ResultFigures::default()
    };
    for id in ids {
        match event_bridge::inspect::find_done(&queue, &id).await {
            Ok(Some(record)) => judge(&id, &record, &ok, &mut f),
            Ok(None) => f.missing.push(format!("{id}: no completion record")),
            Err(e) => f.missing.push(format!("{id}: {e}")),
        }
    }
    f
}

fn judge(
    id: &str,
    record: &DoneRecord,
    ok: &HashSet<(String, String, i64)>,
    f: &mut ResultFigures,
) {
    let Some(result) = &record.result else {
        f.missing.push(format!("{id} ({}): no result", record.task));
        return;
    };
    let expected: serde_json::Value =
        serde_json::from_str(&answer(&record.task, record.fencing_token)).expect("JSON");
    let answered = ok.contains(&(id.to_string(), record.task.clone(), record.fencing_token));
    if *result != expected || !answered {
        f.wrong.push(format!(
            "{id} ({}, token {}): result {result}, answered 200 to that claim: {answered}",
            record.task, record.fencing_token
        ));
    }
}
