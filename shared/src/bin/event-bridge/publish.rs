//! `publish`: one task from arguments, or many from JSON lines, pipelined.

use std::io::{IsTerminal, Write};

use event_bridge::{Envelope, Queue};
use serde_json::{Value, json};

use crate::lines::read_lines;
use crate::{Failure, Publish};

pub(crate) async fn publish(queue: &Queue, args: Publish) -> Result<(), Failure> {
    if args.raw {
        let body = args.payload.unwrap_or_default();
        let name = queue.publish_raw(body.as_bytes()).await?;
        out!("{}", json!({ "task": name }));
        return Ok(());
    }
    let mut envelopes = match &args.input {
        Some(path) => read_lines(path, &args.event_type)?,
        None => {
            let payload: Value = serde_json::from_str(args.payload.as_deref().unwrap_or("{}"))
                .map_err(|e| format!("--payload is not JSON: {e}"))?;
            let mut envelope = Envelope::new(&args.event_type, payload);
            envelope.idempotency_key = args.idempotency_key.clone();
            vec![envelope]
        }
    };
    let retry_at = match args.delay {
        Some(delay) => Some(queue.server_time().await?.now_ms() + delay.as_millis() as i64),
        None => None,
    };
    for envelope in &mut envelopes {
        envelope.group = envelope.group.take().or_else(|| args.group.clone());
        envelope.retry_at = retry_at;
    }
    let bar = progress_bar(envelopes.len());
    let mut stdout = std::io::stdout().lock();
    for chunk in envelopes.chunks(1_000) {
        let names = queue.publish_many(chunk).await?;
        for (name, envelope) in names.iter().zip(chunk) {
            writeln!(stdout, "{}", json!({ "task": name, "id": envelope.id }))?;
        }
        if let Some(bar) = &bar {
            bar.inc(chunk.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_with_message("published");
    }
    Ok(())
}

/// A progress bar on stderr for bulk input, only when stderr is a terminal.
fn progress_bar(len: usize) -> Option<indicatif::ProgressBar> {
    (len > 1 && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(len as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} tasks {per_sec} {msg}")
                .expect("static template"),
        );
        bar
    })
}
