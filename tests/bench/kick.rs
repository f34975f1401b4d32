//! Kicks (`EVENT_BRIDGE_KICK=on`): how soon a task published with no server running is done,
//! and how many invocations its publishes cause.
//!
//! The trigger is process_events' drain behind a real local HTTP server
//! (`harness::kick_trigger`), in this process, with the `noop` handler.
//!
//! - Latency: one publisher publishes one task at a time with `KICK_WAIT_MS` long, so the publish
//!   returns once the drain it kicked has answered: publish to done, an upper bound of publish
//!   to start. Without kicks a task waits for the cron tick (0 to 60 s, 30 s on average): that
//!   row is the schedule's arithmetic, not measured.
//!   Kicked drains do not linger here (`KICK_LINGER_MS=0`): a lingering drain answers its
//!   trigger only when it ends, after the task ran.
//! - Invocations: four publishers publish single tasks as fast as they can, with the default
//!   `KICK_WAIT_MS` (1 s); the trigger's requests are the invocations, per 1 000 tasks, with
//!   kicked drains that do not linger and with the default `KICK_LINGER_MS` (1 s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use event_bridge::config::{HandlerKind, KickConfig};
use event_bridge::{Config, Envelope, Secret, Session};
use harness::kick_trigger::{Drain, KickTrigger};
use platform::trigger::Trigger;
use process_events::App;
use serde_json::json;

use crate::Result;
use crate::server::{close, delete_tree, fresh_chroot};

const SECRET: &str = "bench-kick";

/// Publishers of the invocations row.
const PUBLISHERS: usize = 4;

/// `KICK_LINGER_MS`'s default, for the invocations row beside no lingering.
const LINGER: Duration = Duration::from_secs(1);

/// Both rows: latency over 50 tasks (5 in the smoke run), invocations over 10 000 (200).
pub async fn section(addr: &str, smoke: bool) -> Result<()> {
    let (tasks, burst) = if smoke { (5, 200) } else { (50, 10_000) };
    let mut took = latency(addr, tasks).await?;
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    println!();
    println!(
        "kicks: publish to done, one task at a time, no worker, KICK_LINGER_MS=0 ({tasks} tasks):"
    );
    println!(
        "  with kicks     p50 {:>7.1} ms  p99 {:>7.1} ms",
        ms(at(0.5)),
        ms(at(0.99))
    );
    println!("  without kicks  the cron tick: 0 to 60 s, 30 s on average (not measured)");
    for linger in [Duration::ZERO, LINGER] {
        let (kicks, seconds) = invocations(addr, burst, linger).await?;
        println!(
            "kicks: {burst} single publishes from {PUBLISHERS} publishers in {seconds:.2} s \
             ({:.0} tasks/s), KICK_LINGER_MS={}: {kicks} invocations, {:.2} per 1 000 tasks",
            burst as f64 / seconds,
            linger.as_millis(),
            kicks as f64 * 1_000.0 / burst as f64
        );
    }
    Ok(())
}

/// Each publish's time, from the call to its return after the drain it kicked answered.
async fn latency(addr: &str, tasks: usize) -> Result<Vec<Duration>> {
    let (admin, chroot, config, mut trigger) =
        kicking(addr, Duration::from_secs(60), Duration::ZERO).await?;
    let app = Arc::new(App::open(config.clone(), "bench").await?);
    trigger.serve(Some(draining(app)));
    let queue = Session::open(config, "bench-publisher", None)
        .await?
        .queue();
    let mut took = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let start = Instant::now();
        queue
            .publish(&Envelope::new("bench", json!({"i": i})))
            .await?;
        took.push(start.elapsed());
    }
    assert_eq!(
        trigger.requests(),
        tasks,
        "one kick per publish, each after a drain began"
    );
    drop(queue);
    delete_tree(&admin, &chroot).await?;
    close(admin).await;
    Ok(took)
}

/// The trigger's requests while `burst` tasks are published, and the publishing's seconds.
async fn invocations(addr: &str, burst: usize, linger: Duration) -> Result<(usize, f64)> {
    let (admin, chroot, config, mut trigger) =
        kicking(addr, Duration::from_secs(1), linger).await?;
    let app = Arc::new(App::open(config.clone(), "bench").await?);
    trigger.serve(Some(draining(app.clone())));
    let start = Instant::now();
    let mut publishers = Vec::new();
    for p in 0..PUBLISHERS {
        let queue = Session::open(config.clone(), "bench-publisher", None)
            .await?
            .queue();
        publishers.push(tokio::spawn(async move {
            for i in (p..burst).step_by(PUBLISHERS) {
                let envelope = Envelope::new("bench", json!({"i": i}));
                queue.publish(&envelope).await.expect("publish");
            }
        }));
    }
    for publisher in publishers {
        publisher.await?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let kicks = trigger.requests();
    // What the kicked drains left, drained before the tree goes.
    let rest = Trigger::Drain { max_tasks: None };
    process_events::run(&app, rest, Duration::from_secs(120)).await?;
    delete_tree(&admin, &chroot).await?;
    close(admin).await;
    Ok((kicks, seconds))
}

/// A fresh chroot whose config has kicks on (waiting `wait` for the trigger, kicked drains
/// lingering `linger`), the noop handler, and the trigger bound.
async fn kicking(
    addr: &str,
    wait: Duration,
    linger: Duration,
) -> Result<(zookeeper_client::Client, String, Config, KickTrigger)> {
    let (admin, chroot, mut config) = fresh_chroot(addr).await?;
    let trigger = KickTrigger::bind(SECRET).await;
    config.handler = HandlerKind::Noop;
    config.cron_secret = Some(Secret::new(SECRET));
    config.kick = Some(KickConfig {
        url: trigger.url.clone(),
        lambda_endpoint: None,
        stale_after: Duration::from_secs(30),
        wait,
        linger,
    });
    Ok((admin, chroot, config, trigger))
}

/// process_events' drain on `app`, as the trigger runs it; a drain cut short by the tree's
/// deletion at the end is of no account.
fn draining(app: Arc<App>) -> Drain {
    Arc::new(move || {
        let app = app.clone();
        Box::pin(async move {
            let drain = Trigger::Drain { max_tasks: None };
            let _ = process_events::run(&app, drain, Duration::from_secs(120)).await;
        })
    })
}
