//! Running the functions' work here: `process`, the long-running `worker`, and `serve`.

use event_bridge::dashboard::{self, Options};
use event_bridge::sink::{Delivery, dead_letter_sink};
use event_bridge::worker::Worker;
use event_bridge::{Config, Queue, RunOptions, Session, process};

use crate::Failure;
use crate::show::print_json;

/// One `process_events` run: a scheduled batch, or a drain with `drain`.
pub(crate) async fn process(
    config: &Config,
    queue: &Queue,
    drain: bool,
    max_tasks: Option<u32>,
) -> Result<(), Failure> {
    let cap = max_tasks.unwrap_or(if drain {
        config.drain_max_tasks
    } else {
        config.max_tasks_per_run
    });
    let options = RunOptions {
        max_tasks: cap,
        concurrency: (cap as usize).clamp(1, config.drain_concurrency),
        deadline: tokio::time::Instant::now() + config.time_budget,
        margin: config.deadline_margin,
    };
    let delivery = Delivery::from_config(config).await?;
    print_json(&process::run(queue, &delivery, &options).await?)
}

/// Runs a worker until SIGTERM or SIGINT; prints its report.
pub(crate) async fn worker(config: &Config, concurrency: usize) -> Result<i32, Failure> {
    let delivery = Delivery::from_config(config).await?;
    let mut worker = Worker::new(config.clone(), delivery, concurrency);
    if let Some(sink) = dead_letter_sink(config).await? {
        worker = worker.with_dead_letters(sink);
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    print_json(&worker.run(stopped).await?)?;
    Ok(0)
}

/// Serves the dashboard until SIGTERM or SIGINT. Says where only once the address is bound
/// and ZooKeeper answers.
pub(crate) async fn serve(config: Config, options: Options) -> Result<i32, Failure> {
    // Refused before connecting: --admin with neither a token nor the opt-out, a port in use.
    let server = dashboard::Server::bind(options, &config).await?;
    let session = Session::open(config, "dashboard", None).await?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    eprintln!(
        "event-bridge: dashboard on http://{}/ ({})",
        server.address(),
        server.mode()
    );
    server.run(session, stopped).await?;
    Ok(0)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
