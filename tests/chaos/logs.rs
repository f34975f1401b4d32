//! What the consumers' logs say: any panic (a failure of the run), how often each warning
//! came up (the figures of what the faults caused: leases reaped, handlers cancelled, …), and
//! the lines the judgements read: claims, admissions, handlers' ends, tasks released to resume
//! in another run, runs cut at their deadline, redriven tasks suspended again.

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
    /// Tasks given back to resume at once in another run (`released to resume in another
    /// run`).
    pub released: Vec<Released>,
    /// Tasks cut at a run's deadline (`cut at the run's deadline`).
    pub cuts: Vec<Cut>,
    /// Tasks claimed before the sleep or wait their record is in ended, suspended in it again
    /// (`back before its sleep or wait ended`).
    pub back_early: usize,
    /// Steps of stepped tasks that started (`step ran`, the stepper's).
    pub steps_ran: Vec<StepRan>,
}

/// Where a line is: its log (`worker-0`, …) and its number there (one process writes a log at
/// a time, so in one log a higher number is a later event).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct At {
    pub log: String,
    pub line: usize,
}

/// A task given back in place to resume at once, for another run than `run`, with the steps
/// its record holds.
#[derive(Clone, Debug)]
pub struct Released {
    pub at: At,
    pub at_ms: i64,
    pub task: String,
    pub run: String,
    pub steps_done: u64,
}

/// A step of a stepped task that started to run (`chaos-stepper`'s `step ran`): its number.
#[derive(Clone, Debug)]
pub struct StepRan {
    pub at: At,
    pub task: String,
    pub step: u64,
}

/// A task whose handler a run's deadline stopped: whether that run made progress with it, the
/// interruptions in a row it counts now, and the steps its record holds.
#[derive(Clone, Debug)]
pub struct Cut {
    pub at: At,
    pub task: String,
    pub run: String,
    pub progressed: bool,
    pub interruptions: u64,
    pub steps_done: u64,
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
    /// The run that claimed it, and where the line is.
    pub run: String,
    pub at: At,
}

pub fn scan(logs: &[PathBuf]) -> LogScan {
    let mut scan = LogScan::default();
    for path in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let name = path
            .file_stem()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        for (n, line) in text.lines().enumerate() {
            let at = At {
                log: name.clone(),
                line: n,
            };
            scan.read(&at, line);
        }
    }
    scan
}

impl LogScan {
    fn read(&mut self, at: &At, line: &str) {
        let file = at.log.as_str();
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
                    run: event["run"].as_str().unwrap_or("?").to_string(),
                    at: at.clone(),
                });
            }
        }
        self.read_resumes(at, at_ms, &event);
        if matches!(event["level"].as_str(), Some("WARN" | "ERROR")) {
            let mut message = event["message"].as_str().unwrap_or("?").to_string();
            if let Some(outcome) = event["outcome"].as_str() {
                message = format!("{message} (outcome {outcome})");
            }
            *self.warnings.entry(message).or_default() += 1;
        }
    }
}

impl LogScan {
    /// The lines of resumable tasks given back: released to another run, cut at a deadline,
    /// suspended again; and the stepper's steps.
    fn read_resumes(&mut self, at: &At, at_ms: Option<i64>, event: &serde_json::Value) {
        if event["message"] == "step ran"
            && let (Some(task), Some(step)) = (event["task"].as_str(), event["step"].as_u64())
        {
            let (at, task) = (at.clone(), task.to_string());
            self.steps_ran.push(StepRan { at, task, step });
        }
        let (task, run) = (event["task"].as_str(), event["run"].as_str());
        let (Some(task), Some(run)) = (task, run) else {
            return;
        };
        let (task, run) = (task.to_string(), run.to_string());
        match event["message"].as_str() {
            Some("released to resume in another run") => self.released.push(Released {
                at: at.clone(),
                at_ms: at_ms.unwrap_or_default(),
                task,
                run,
                steps_done: event["steps_done"].as_u64().unwrap_or(0),
            }),
            Some("cut at the run's deadline") => self.cuts.push(Cut {
                at: at.clone(),
                task,
                run,
                progressed: event["progressed"].as_bool().unwrap_or(false),
                interruptions: event["interruptions"].as_u64().unwrap_or(0),
                steps_done: event["steps_done"].as_u64().unwrap_or(0),
            }),
            Some(m) if m.starts_with("back before its sleep or wait ended") => {
                self.back_early += 1;
            }
            _ => {}
        }
    }
}

/// A bare line, without what varies from one to the next (the address list, ids).
fn bare(line: &str) -> String {
    line.chars().take(90).collect()
}
