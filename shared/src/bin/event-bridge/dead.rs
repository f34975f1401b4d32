//! `dead`: list, show, redrive and purge the dead letters.

use std::io::{IsTerminal, Write};

use event_bridge::{Queue, dead};
use serde_json::{Value, json};

use crate::show::print_json;
use crate::{DeadCommand, Failure};

pub(crate) async fn dead_command(queue: &Queue, command: DeadCommand) -> Result<(), Failure> {
    match command {
        DeadCommand::List { json } => {
            let records = dead::list(queue).await?;
            if json {
                let list: Vec<Value> = records
                    .into_iter()
                    .map(|(name, record)| json!({"name": name, "record": record}))
                    .collect();
                print_json(&list)?;
            } else {
                for (name, r) in records {
                    let last = r["last_error"].as_str().unwrap_or("-");
                    out!(
                        "{name}  attempts={}  reason={}  last_error={last}",
                        r["attempts"],
                        r["reason"]
                    );
                }
            }
        }
        DeadCommand::Show { name } => match dead::show(queue, &name).await? {
            Some(record) => print_json(&record)?,
            None => {
                return Err(format!(
                    "no dead letter {name}: run `event-bridge dead list` for their names"
                )
                .into());
            }
        },
        DeadCommand::Redrive { all, names, yes } => {
            let names = chosen(queue, all, names).await?;
            confirm(&format!("redrive {} dead letter(s)", names.len()), yes)?;
            let report = dead::redrive(queue, &names).await?;
            for skipped in &report.skipped {
                eprintln!(
                    "event-bridge: {} not redriven: {}",
                    skipped.dead, skipped.reason
                );
            }
            print_json(&report)?;
        }
        DeadCommand::Purge { all, names, yes } => {
            let names = chosen(queue, all, names).await?;
            confirm(
                &format!("delete {} dead letter(s) for good", names.len()),
                yes,
            )?;
            print_json(&json!({ "purged": dead::purge(queue, &names).await? }))?;
        }
    }
    Ok(())
}

async fn chosen(queue: &Queue, all: bool, names: Vec<String>) -> Result<Vec<String>, Failure> {
    match (all, names.is_empty()) {
        (true, _) => Ok(dead::names(queue).await?),
        (false, false) => Ok(names),
        (false, true) => Err("name the dead letters, or pass --all".into()),
    }
}

/// Asks on the terminal; refuses when nobody can answer and --yes was not given.
fn confirm(action: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "refusing to {action} without --yes (stdin is not a terminal): pass --yes"
        )
        .into());
    }
    eprint!("{action}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err("not confirmed, nothing changed: answer y, or pass --yes".into())
    }
}
