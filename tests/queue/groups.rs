//! Ordered groups: tasks of one group run one at a time, in publish order, across consumers,
//! retries and crashes; a group whose task died goes on, or stays paused when asked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::handler::FnHandler;
use event_bridge::limit::{Limit, RouteLimits};
use event_bridge::queue::{Lease, Restraints, TaskOutcome};
use event_bridge::task::OnDead;
use event_bridge::{Envelope, HandlerError, Task, reap};
use serde_json::json;
use zookeeper_client as zk;

use harness::{TestQueue, options};

fn grouped(group: &str, seq: usize) -> Envelope {
    let mut envelope = Envelope::new("ordered", json!({ "group": group, "seq": seq }));
    envelope.group = Some(group.to_string());
    envelope
}

/// What a handler saw: per group, the sequence numbers that succeeded, in the order they did.
#[derive(Clone, Default)]
struct Log {
    done: Arc<Mutex<HashMap<String, Vec<u64>>>>,
    running: Arc<Mutex<HashMap<String, usize>>>,
    overlaps: Arc<Mutex<usize>>,
}

impl Log {
    fn start(&self, group: &str) {
        let mut running = self.running.lock().unwrap();
        let n = running.entry(group.to_string()).or_default();
        *n += 1;
        if *n > 1 {
            *self.overlaps.lock().unwrap() += 1;
        }
    }

    fn end(&self, group: &str, seq: u64, ok: bool) {
        *self.running.lock().unwrap().get_mut(group).unwrap() -= 1;
        if ok {
            self.done
                .lock()
                .unwrap()
                .entry(group.into())
                .or_default()
                .push(seq);
        }
    }

    fn done(&self, group: &str) -> Vec<u64> {
        self.done
            .lock()
            .unwrap()
            .get(group)
            .cloned()
            .unwrap_or_default()
    }

    fn total(&self) -> usize {
        self.done.lock().unwrap().values().map(Vec::len).sum()
    }
}

fn group_and_seq(task: &Task) -> (String, u64) {
    let payload = &task.envelope.payload;
    (
        payload["group"].as_str().unwrap().to_string(),
        payload["seq"].as_u64().unwrap(),
    )
}

/// A recording handler that takes a few milliseconds and fails retryably the attempts
/// `fails` picks.
fn failing_when<F>(log: &Log, fails: F) -> impl event_bridge::Handler + use<F>
where
    F: Fn(&Task) -> bool + Send + Sync + Clone + 'static,
{
    let seen = log.clone();
    FnHandler(move |task: Task| {
        let (log, fails) = (seen.clone(), fails.clone());
        async move {
            let (group, seq) = group_and_seq(&task);
            log.start(&group);
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..4))).await;
            let fail = fails(&task);
            log.end(&group, seq, !fail);
            match fail {
                true => Err(HandlerError::Retryable("injected".into())),
                false => Ok(()),
            }
        }
    })
}

/// 8 consumers, 40 groups of 50 tasks, random handler delays and one attempt in ten failing
/// retryably: every group's successes come in publish order, one at a time, each task once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_consumers_run_forty_groups_in_order_through_retries() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::from_millis(20);
        c.backoff_max = Duration::from_millis(100);
        c.max_attempts = 50;
    })
    .await;
    let (groups, per_group) = (40, 50);
    let envelopes: Vec<Envelope> = (0..per_group)
        .flat_map(|seq| (0..groups).map(move |g| grouped(&format!("g{g}"), seq)))
        .collect();
    t.queue.publish_many(&envelopes).await.unwrap();
    let log = Log::default();
    let handler = failing_when(&log, |_| fastrand::u8(0..10) == 0);
    let mut consumers = Vec::new();
    for i in 0..8 {
        consumers.push(t.consumer(&format!("c{i}")).await);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while log.total() < groups * per_group {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck at {}",
            log.total()
        );
        let runs = consumers.iter().map(|queue| {
            let handler = &handler;
            async move {
                event_bridge::process::run(queue, handler, &options(200, 8))
                    .await
                    .unwrap()
            }
        });
        futures::future::join_all(runs).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let expected: Vec<u64> = (0..per_group as u64).collect();
    for g in 0..groups {
        assert_eq!(log.done(&format!("g{g}")), expected, "group g{g}");
    }
    assert_eq!(
        *log.overlaps.lock().unwrap(),
        0,
        "two tasks of a group at once"
    );
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("groups").await.is_empty(), "no lock left");
}

/// A recording handler that fails permanently the tasks whose payload says so.
fn recording(log: &Log) -> impl event_bridge::Handler + use<> {
    let seen = log.clone();
    FnHandler(move |task: Task| {
        let log = seen.clone();
        async move {
            let (group, seq) = group_and_seq(&task);
            log.start(&group);
            let fail = task.envelope.payload["fail"] == true;
            log.end(&group, seq, !fail);
            match fail {
                true => Err(HandlerError::Permanent("bad order".into())),
                false => Ok(()),
            }
        }
    })
}

async fn publish_failing_head(t: &TestQueue, on_dead: Option<OnDead>) {
    let mut head = grouped("g", 0);
    head.payload["fail"] = json!(true);
    head.on_dead = on_dead;
    t.queue
        .publish_many(&[head, grouped("g", 1), grouped("g", 2)])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_group_whose_head_died_goes_on_by_default() {
    let t = TestQueue::new().await;
    publish_failing_head(&t, None).await;
    let log = Log::default();
    let handler = recording(&log);
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!((report.dead_lettered, report.completed), (1, 2));
    assert_eq!(log.done("g"), [1, 2]);
    assert!(t.children("groups").await.is_empty());
}

#[tokio::test]
async fn a_group_whose_head_died_stays_paused_when_asked_until_resumed() {
    let t = TestQueue::new().await;
    publish_failing_head(&t, Some(OnDead::Pause)).await;
    let log = Log::default();
    let handler = recording(&log);
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!((report.dead_lettered, report.completed), (1, 0));
    let lock = t.read_json("groups/g").await;
    assert!(
        lock["paused"].as_str().unwrap().contains("dead letters"),
        "{lock}"
    );
    let again = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(again.completed, 0, "paused");
    assert!(again.group_busy > 0);
    assert!(t.queue.groups().unpause_group("g").await.unwrap());
    let resumed = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(resumed.completed, 2);
    assert_eq!(log.done("g"), [1, 2]);
}

#[tokio::test]
async fn a_route_can_ask_to_pause_the_group() {
    let t = TestQueue::new().await;
    publish_failing_head(&t, None).await;
    let table = r#"{"routes": {"ordered": {"sink": "log", "on_dead": "pause"}}}"#;
    let table = event_bridge::sink::route::parse(table, &|_| None).unwrap();
    assert_eq!(table.on_dead.types["ordered"], OnDead::Pause);
    struct Paused<H>(H, event_bridge::task::OnDeadPolicy);
    impl<H: event_bridge::Handler> event_bridge::Handler for Paused<H> {
        async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
            self.0.handle(task).await
        }
        fn on_dead_policy(&self) -> event_bridge::task::OnDeadPolicy {
            self.1.clone()
        }
    }
    let log = Log::default();
    let handler = Paused(recording(&log), table.on_dead);
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!((report.dead_lettered, report.completed), (1, 0));
    assert!(t.read_json("groups/g").await["paused"].is_string());
}

/// The consumer holding a group's head dies: the rest of the group waits, and once the
/// reaper frees the head it runs first.
#[tokio::test]
async fn the_head_of_a_group_whose_consumer_died_runs_before_the_rest() {
    let t = TestQueue::new().await;
    let names = t
        .queue
        .publish_many(&[grouped("g", 0), grouped("g", 1), grouped("g", 2)])
        .await
        .unwrap();
    let dying = t.consumer("dying").await;
    let TaskOutcome::Claimed(_lease) = dying.claim(&names[0], &t.now().await).await.unwrap() else {
        panic!("claim");
    };
    drop(dying);
    let log = Log::default();
    let handler = recording(&log);
    let blocked = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(blocked.claimed, 0, "the group waits for its head");
    let later = t.past_lease_of(&names[0]).await;
    assert_eq!(reap::reap_at(&t.queue, &later).await.unwrap().reaped, 1);
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(report.completed, 3);
    assert_eq!(log.done("g"), [0, 1, 2]);
}

/// Different groups never wait for each other: one slow group holds back only itself.
#[tokio::test]
async fn a_slow_group_holds_back_only_itself() {
    let t = TestQueue::new().await;
    let mut envelopes = vec![grouped("slow", 0), grouped("slow", 1)];
    envelopes.extend((0..5).map(|i| grouped(&format!("fast{i}"), 0)));
    t.queue.publish_many(&envelopes).await.unwrap();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let seen = finished.clone();
    let handler = FnHandler(move |task: Task| {
        let finished = seen.clone();
        async move {
            let (group, seq) = group_and_seq(&task);
            if group == "slow" {
                // Slow: done once the five fast groups are (ten seconds at most, should they
                // wait behind it).
                let fast_done = || async { finished.lock().unwrap().len() >= 5 };
                harness::poll(Duration::from_secs(10), fast_done).await;
            }
            finished.lock().unwrap().push(format!("{group}/{seq}"));
            Ok::<(), HandlerError>(())
        }
    });
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 8))
        .await
        .unwrap();
    assert_eq!(report.completed, 7);
    let finished = finished.lock().unwrap().clone();
    // Every fast group finished while the slow group's first task still ran.
    let slow = finished.iter().position(|f| f == "slow/0").unwrap();
    assert_eq!(slow, 5, "{finished:?}");
    assert_eq!(finished.last().unwrap(), "slow/1");
}

/// A recording handler whose group's first task fails its first try, and one run that claims
/// that task: it waits out its backoff (50 ms in these tests) under `delayed/`.
async fn head_fails_once(t: &TestQueue, log: &Log) -> impl event_bridge::Handler + use<> {
    let handler = failing_when(log, |task| {
        group_and_seq(task).1 == 0 && task.attempt() == 1
    });
    let first = event_bridge::process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(first.retried, 1);
    handler
}

/// A moment by ZooKeeper's clock past a 50 ms backoff begun now, standing still.
async fn past_backoff(t: &TestQueue) -> ZkTime {
    ZkTime::at(t.now().await.now_ms() + 100)
}

/// A group's head failed and waits out a backoff; it comes back at the tail under a new name,
/// behind the group's next task. The walk meets the next task first, in the same window as
/// the head: the head (which holds the group's lock) must still run, then the rest, in order.
/// (Before the fix, the head waited in the pass behind the next task, was dropped with it when
/// that claim met the lock, and the group never moved again.)
#[tokio::test]
async fn a_head_back_from_its_backoff_behind_the_rest_of_its_group_runs_first() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::from_millis(50);
        c.backoff_max = Duration::from_millis(50);
    })
    .await;
    t.queue
        .publish_many(&[grouped("g", 0), grouped("g", 1), grouped("g", 2)])
        .await
        .unwrap();
    let log = Log::default();
    let handler = head_fails_once(&t, &log).await;
    // One run past the backoff promotes the head to the tail and must run the whole group
    // from there.
    let later = past_backoff(&t).await;
    let report = event_bridge::process::run_at(&t.queue, &handler, &options(10, 4), &later)
        .await
        .unwrap();
    assert_eq!(log.done("g"), [0, 1, 2], "{report:?}");
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("groups").await.is_empty(), "no lock left");
}

/// Another consumer holds the first 64 tasks of the queue (slow ones, or a dead consumer's
/// until their leases expire): a grouped task behind them still runs. (Before the fix, every
/// pass jumped over the held windows as after a lost race, so no walk reached the group's task
/// having seen every number before it, and the group waited as long as the stretch was held.)
#[tokio::test]
async fn a_stretch_held_at_the_head_does_not_hold_back_a_group() {
    let t = TestQueue::new().await;
    let held = t.publish(64).await;
    let other = t.consumer("other").await;
    let now = t.now().await;
    for name in &held {
        let claimed = other.claim(name, &now).await.unwrap();
        assert!(matches!(claimed, TaskOutcome::Claimed(_)), "{claimed:?}");
    }
    t.queue.publish_many(&[grouped("g", 0)]).await.unwrap();
    let log = Log::default();
    let handler = recording(&log);
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(log.done("g"), [0], "{report:?}");
}

/// A group's head waits out a backoff at the tail while a long stretch of other tasks lies
/// between the group's next tasks and it, and a later task of the group is published behind
/// it. Whatever the windows, the group runs in publish order. (Before the fix, the head was
/// admitted in a later window of the pass that had blocked the group, and the task behind it
/// ran next, ahead of the ones that pass had blocked.)
#[tokio::test]
async fn a_head_back_far_behind_its_group_lets_no_later_task_jump_the_queue() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::from_millis(50);
        c.backoff_max = Duration::from_millis(50);
    })
    .await;
    t.queue.publish_many(&[grouped("g", 0)]).await.unwrap();
    let log = Log::default();
    let handler = head_fails_once(&t, &log).await;
    t.queue
        .publish_many(&[grouped("g", 1), grouped("g", 2)])
        .await
        .unwrap();
    // A long stretch between them: tasks of groups of their own.
    let filler: Vec<Envelope> = (0..100).map(|i| grouped(&format!("f{i}"), 0)).collect();
    t.queue.publish_many(&filler).await.unwrap();
    // The head's backoff ends and it comes back at the tail...
    let later = past_backoff(&t).await;
    assert_eq!(t.queue.delays().promote_due(&later, 10).await.unwrap(), 1);
    // ... and a later task of the group behind it.
    t.queue.publish_many(&[grouped("g", 3)]).await.unwrap();
    event_bridge::process::run_at(&t.queue, &handler, &options(200, 1), &later)
        .await
        .unwrap();
    assert_eq!(log.done("g"), [0, 1, 2, 3]);
}

/// A group's head fails and waits out a long backoff under `delayed/`, holding its group's
/// lock as a retry does; then it is cancelled where it waits. The group goes on with its next
/// task. (Before the fix, cancelling a waiting task left the lock naming it, and the group
/// waited for a task that would never come back.)
#[tokio::test]
async fn a_group_whose_waiting_head_is_cancelled_goes_on() {
    let t = TestQueue::with(|c| {
        c.backoff_base = Duration::from_secs(600);
        c.backoff_max = Duration::from_secs(600);
    })
    .await;
    let names = t
        .queue
        .publish_many(&[grouped("g", 0), grouped("g", 1)])
        .await
        .unwrap();
    let log = Log::default();
    let handler = head_fails_once(&t, &log).await;
    assert_eq!(t.waiting().await.len(), 1);
    let cancelled = event_bridge::cancel::cancel(&t.queue, &names[0])
        .await
        .unwrap();
    assert!(
        matches!(cancelled, event_bridge::cancel::Cancelled::Cancelled { .. }),
        "{cancelled:?}"
    );
    let report = event_bridge::process::run(&t.queue, &handler, &options(10, 4))
        .await
        .unwrap();
    assert_eq!(log.done("g"), [1], "{report:?}");
    assert!(t.children("groups").await.is_empty(), "no lock left");
}

/// Publishes `envelopes`, has another consumer claim the first (a group's head), and reads the
/// rest as a claim batch would: their names, the reads, and the other consumer's lease.
async fn head_held_by_another(
    t: &TestQueue,
    envelopes: &[Envelope],
) -> (Vec<String>, Vec<(String, Vec<u8>, zk::Stat)>, Lease) {
    let names = t.queue.publish_many(envelopes).await.unwrap();
    let other = t.consumer("other").await;
    let now = t.now().await;
    let TaskOutcome::Claimed(held) = other.claim(&names[0], &now).await.unwrap() else {
        panic!("claim of the group's head");
    };
    let held = *held;
    let mut reads = Vec::new();
    for name in &names[1..] {
        let path = format!("{}/tasks/{name}", t.config.root);
        let (body, stat) = t.raw.get_data(&path).await.unwrap();
        reads.push((name.clone(), body, stat));
    }
    (names, reads, held)
}

/// A claim batch meets a group another consumer holds: that task is answered "group busy" with
/// the holder's id, and the tasks after it in the batch are claimed all the same. (The claim
/// creates a group's lock without reading it first, and reads it only when the create fails:
/// that failure must answer the one task, not leave the rest of the batch untried.)
#[tokio::test]
async fn a_claim_batch_that_meets_a_busy_group_takes_the_tasks_after_it() {
    let t = TestQueue::new().await;
    let envelopes = [
        grouped("g", 0),
        grouped("g", 1),
        Envelope::new("plain", json!({})),
        grouped("h", 0),
    ];
    let (names, reads, _held) = head_held_by_another(&t, &envelopes).await;
    let now = t.now().await;
    let outcomes = t
        .queue
        .claim_many(&reads, &now, &Default::default())
        .await
        .unwrap();
    match &outcomes[0] {
        Some(TaskOutcome::GroupBusy { owner }) => {
            assert_eq!(owner.as_deref(), Some(envelopes[0].id.as_str()))
        }
        other => panic!("the busy group's task: {other:?}"),
    }
    for (name, outcome) in names[2..].iter().zip(&outcomes[1..]) {
        assert!(
            matches!(outcome, Some(TaskOutcome::Claimed(_))),
            "{name}: {outcome:?}"
        );
    }
    assert_eq!(
        t.read_json("groups/h").await["id"],
        envelopes[3].id.as_str()
    );
    assert_eq!(
        t.read_json("groups/g").await["id"],
        envelopes[0].id.as_str()
    );
}

/// A busy group's task and a free task of the same route, whose gate lets one in: the free
/// task is claimed. (A claim that went through the gate before finding the group busy took the
/// one place, and the free task behind it waited for as long as the group stayed busy.)
#[tokio::test]
async fn a_busy_group_takes_no_place_in_its_routes_gate() {
    let t = TestQueue::new().await;
    let envelopes = [
        grouped("g", 0),
        grouped("g", 1),
        Envelope::new("ordered", json!({})),
    ];
    let (_, reads, _held) = head_held_by_another(&t, &envelopes).await;
    let now = t.now().await;
    let one = Limit {
        max_in_flight: Some(1),
        ..Limit::default()
    };
    let restraints = Restraints {
        limits: RouteLimits {
            types: [("ordered".to_string(), one)].into(),
            default: Limit::default(),
        },
        ..Restraints::default()
    };
    let outcomes = t.queue.claim_many(&reads, &now, &restraints).await.unwrap();
    match &outcomes[0] {
        Some(TaskOutcome::GroupBusy { owner }) => {
            assert_eq!(owner.as_deref(), Some(envelopes[0].id.as_str()))
        }
        other => panic!("the busy group's task: {other:?}"),
    }
    assert!(
        matches!(outcomes[1], Some(TaskOutcome::Claimed(_))),
        "the free task: {:?}",
        outcomes[1]
    );
}
