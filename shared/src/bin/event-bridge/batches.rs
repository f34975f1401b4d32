//! `batch`: opening, sealing and looking at batches (see `event_bridge::batch`).

use event_bridge::Queue;
use event_bridge::batch::{self, BatchStatus, Open};
use event_bridge::error::Error;

use crate::show::print_json;
use crate::{BatchCommand, Failure};

/// Runs one `batch` command; the exit code is 3 when the named batch does not exist.
pub(crate) async fn command(queue: &Queue, command: BatchCommand) -> Result<i32, Failure> {
    let done = match command {
        BatchCommand::Open {
            name,
            on_complete,
            on_success,
            payload,
        } => {
            let payload = serde_json::from_str(&payload)
                .map_err(|e| format!("--payload is not JSON: {e}"))?;
            let open = Open {
                on_complete,
                on_success,
                payload,
            };
            batch::open(queue, &name, open).await
        }
        BatchCommand::Seal { name } => batch::seal(queue, &name).await,
        BatchCommand::Status { name, json } => {
            let status = batch::status(queue, &name).await;
            if let (Ok(status), false) = (&status, json) {
                print_text(status);
                return Ok(0);
            }
            status
        }
    };
    match done {
        Ok(status) => print_json(&status).map(|()| 0),
        Err(Error::Batch { name, problem }) if problem.starts_with("no such batch") => {
            eprintln!("event-bridge: batch {name}: {problem}");
            Ok(3)
        }
        Err(e) => Err(e.into()),
    }
}

fn print_text(s: &BatchStatus) {
    println!(
        "{}: {} members, {} pending, {} completed, {} dead; {}; callback {}",
        s.name,
        s.total,
        s.pending,
        s.completed,
        s.dead,
        if s.sealed { "sealed" } else { "open" },
        s.callback.as_deref().unwrap_or("not yet"),
    );
    for dead in &s.dead_members {
        println!("  dead: {dead}");
    }
}
