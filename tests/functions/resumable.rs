//! A resumable task longer than its function: ten steps of about a second each, drained by
//! `process_events`' run (`process_events::run_with`, what a Rust user's own function binary
//! calls) with a 3 s budget per invocation, finishes across several invocations. Each step's
//! side effect happens once, and the task's result is that of one uninterrupted run (the
//! same handler on a second queue, with a minute to run).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::handler::FnHandler;
use event_bridge::{Envelope, Task};
use platform::trigger::Trigger;
use process_events::App;
use serde_json::json;

use harness::TestQueue;

const STEPS: u64 = 10;

/// Side effects by task id and step, and each task's final result.
#[derive(Default)]
struct Seen {
    effects: Mutex<Vec<(String, u64)>>,
    results: Mutex<HashMap<String, u64>>,
}

/// Ten steps of about a second, each folding its number into the last one's result.
fn ten_steps(
    seen: Arc<Seen>,
) -> FnHandler<
    impl Fn(Task) -> futures::future::BoxFuture<'static, Result<(), event_bridge::HandlerError>>,
> {
    FnHandler(move |task: Task| {
        let seen = seen.clone();
        Box::pin(async move {
            let mut acc = 7u64;
            for i in 0..STEPS {
                let seen = &seen;
                let id = task.envelope.id.clone();
                acc = task
                    .steps
                    .step(&format!("part-{i}"), async move {
                        harness::real_time(Duration::from_secs(1), "a step's second of work").await;
                        seen.effects.lock().unwrap().push((id, i));
                        Ok(acc.wrapping_mul(31).wrapping_add(i))
                    })
                    .await?;
            }
            seen.results
                .lock()
                .unwrap()
                .insert(task.envelope.id.clone(), acc);
            Ok(())
        }) as futures::future::BoxFuture<'static, _>
    })
}

async fn publish(tq: &TestQueue) -> String {
    let envelope = Envelope::new("export", json!({}));
    let id = envelope.id.clone();
    tq.queue.publish_many(&[envelope]).await.unwrap();
    id
}

#[tokio::test]
async fn a_task_of_ten_one_second_steps_finishes_across_three_second_invocations() {
    let (short, long) = (TestQueue::new().await, TestQueue::new().await);
    let (id, reference) = (publish(&short).await, publish(&long).await);
    let seen = Arc::new(Seen::default());
    let handler = ten_steps(seen.clone());
    let (app, other) = (
        App::open(short.config.clone(), "test").await.expect("app"),
        App::open(long.config.clone(), "test").await.expect("app"),
    );
    let drain = Trigger::Drain { max_tasks: None };
    let uninterrupted =
        process_events::run_with(&other.session, &handler, drain, Duration::from_secs(60));
    let resumed = async {
        let mut invocations = 0;
        while !short.children("tasks").await.is_empty() {
            invocations += 1;
            assert!(
                invocations <= 2 * STEPS,
                "no end after {invocations} invocations"
            );
            let report =
                process_events::run_with(&app.session, &handler, drain, Duration::from_secs(3))
                    .await
                    .expect("an invocation");
            assert_eq!(report.dead_lettered + report.leases_lost, 0, "{report:?}");
        }
        invocations
    };
    let (uninterrupted, invocations) = tokio::join!(uninterrupted, resumed);
    assert_eq!(uninterrupted.expect("the uninterrupted run").completed, 1);
    assert!(invocations >= 4, "finished in {invocations} invocations");
    let effects = seen.effects.lock().unwrap().clone();
    let ours: Vec<u64> = effects
        .iter()
        .filter(|(t, _)| *t == id)
        .map(|(_, i)| *i)
        .collect();
    assert_eq!(
        ours,
        (0..STEPS).collect::<Vec<_>>(),
        "each step once, in order"
    );
    let results = seen.results.lock().unwrap().clone();
    assert_eq!(results.get(&id), results.get(&reference), "{results:?}");
    assert!(results.contains_key(&id));
}
