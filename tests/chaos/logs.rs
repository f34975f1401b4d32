//! What the consumers' logs say: any panic (a failure of the run), and how often each warning
//! came up (the figures of what the faults caused: leases reaped, handlers cancelled, …).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// The logs, read.
#[derive(Default)]
pub struct LogScan {
    /// `file: line` of every line that mentions a panic.
    pub panics: Vec<String>,
    /// Warning and error messages, with how often each came.
    pub warnings: BTreeMap<String, usize>,
    /// Claims per log (`worker-0`, `drain-1`, …).
    pub claims: BTreeMap<String, usize>,
    /// Every claim as logged (`task claimed`, right after the claim committed).
    pub claimed: Vec<Claim>,
    /// Every admission through a rate's gate: the gate, and the bucket's moment (ZooKeeper ms)
    /// it was admitted at (`admitted through a rate`).
    pub admitted: Vec<(String, i64)>,
    /// When each claim's handler ended, by task and fencing token (wall clock, ms): the sender
    /// of its request had given up on it by then (`handler ended`, logged before its places
    /// in gates are freed).
    pub ended: HashMap<(String, i64), i64>,
}

/// One claim: when it was logged (wall clock, ms), the task, its fencing token, and who
/// claimed it (the log's role and the consumer id).
#[derive(Clone, Debug)]
pub struct Claim {
    pub at_ms: i64,
    pub task: String,
    pub token: i64,
    pub by: String,
    pub consumer: String,
}

pub fn scan(logs: &[PathBuf]) -> LogScan {
    let mut scan = LogScan::default();
    for path in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let name = path
            .file_stem()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        for line in text.lines() {
            scan.read(&name, line);
        }
    }
    scan
}

impl LogScan {
    fn read(&mut self, file: &str, line: &str) {
        if line.contains("panicked") {
            self.panics.push(format!("{file}: {line}"));
        }
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            // Not a log event: a bare line (e.g. "event-bridge: …" before exiting 1).
            *self.warnings.entry(bare(line)).or_default() += 1;
            return;
        };
        if event["message"] == "admitted through a rate"
            && let (Some(gate), Some(at_ms)) = (event["gate"].as_str(), event["bucket_ms"].as_i64())
        {
            self.admitted.push((gate.to_string(), at_ms));
        }
        let at_ms = (event["timestamp"].as_str())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_millis());
        if event["message"] == "handler ended"
            && let (Some(at_ms), Some(task), Some(token)) = (
                at_ms,
                event["task"].as_str(),
                event["fencing_token"].as_i64(),
            )
        {
            self.ended.insert((task.to_string(), token), at_ms);
        }
        if event["message"] == "task claimed" {
            *self.claims.entry(file.to_string()).or_default() += 1;
            if let (Some(at_ms), Some(task), Some(token)) = (
                at_ms,
                event["task"].as_str(),
                event["fencing_token"].as_i64(),
            ) {
                let consumer = event["consumer"].as_str().unwrap_or("?");
                self.claimed.push(Claim {
                    at_ms,
                    task: task.to_string(),
                    token,
                    by: format!("{file} {consumer}"),
                    consumer: consumer.to_string(),
                });
            }
        }
        if matches!(event["level"].as_str(), Some("WARN" | "ERROR")) {
            let mut message = event["message"].as_str().unwrap_or("?").to_string();
            if let Some(outcome) = event["outcome"].as_str() {
                message = format!("{message} (outcome {outcome})");
            }
            *self.warnings.entry(message).or_default() += 1;
        }
    }
}

/// A bare line, without what varies from one to the next (the address list, ids).
fn bare(line: &str) -> String {
    line.chars().take(90).collect()
}
