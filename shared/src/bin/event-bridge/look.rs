//! Looking into the queue: `init`'s answer, `list`, `peek`, `status`, `explain`, `stats`.

use std::io::Write;

use event_bridge::inspect::{self, Status};
use event_bridge::{Config, Queue};
use serde_json::json;

use crate::Failure;
use crate::show::{describe, print_json, print_stats, print_table};

/// What `init` created: the root, its base paths, and whose they are.
pub(crate) fn init(config: &Config, queue: &Queue) -> Result<(), Failure> {
    let acl = if config.zookeeper_auth.is_some() {
        "creator"
    } else {
        "open"
    };
    print_json(&json!({ "root": config.root, "paths": queue.base_paths(), "acl": acl }))
}

pub(crate) async fn list(queue: &Queue, limit: usize, json: bool) -> Result<(), Failure> {
    let tasks = inspect::pending(queue, &queue.server_time().await?, limit).await?;
    if json {
        print_json(&tasks)
    } else {
        print_table(&tasks)
    }
}

pub(crate) async fn peek(queue: &Queue, count: usize) -> Result<(), Failure> {
    let tasks = inspect::pending(queue, &queue.server_time().await?, count).await?;
    print_json(&tasks)
}

/// Prints where a task is; the exit code is 3 when it is nowhere.
pub(crate) async fn status(
    config: &Config,
    queue: &Queue,
    task: &str,
    json: bool,
) -> Result<i32, Failure> {
    let status = inspect::status(queue, &queue.server_time().await?, task).await?;
    if json {
        print_json(&status)?;
    } else {
        out!("{}", describe(&status));
    }
    if status == Status::NotFound {
        eprintln!("event-bridge: no task {task} under {}", config.root);
        return Ok(3);
    }
    Ok(0)
}

/// Prints why a task is where it is; the exit code is 3 when it is nowhere.
pub(crate) async fn explain(
    config: &Config,
    queue: &Queue,
    task: &str,
    json: bool,
) -> Result<i32, Failure> {
    let explained = inspect::explain(queue, &queue.server_time().await?, task).await?;
    if json {
        print_json(&explained)?;
    } else {
        out!("{}", explained.text());
    }
    if explained.reasons == [inspect::Reason::NotFound] {
        eprintln!("event-bridge: no task {task} under {}", config.root);
        return Ok(3);
    }
    Ok(0)
}

pub(crate) async fn stats(
    config: &Config,
    queue: &Queue,
    json: bool,
    full: bool,
) -> Result<(), Failure> {
    let stats = inspect::detailed_stats(queue, &queue.server_time().await?, full).await?;
    if json {
        print_json(&stats)
    } else {
        print_stats(config, &stats)
    }
}
