//! Concurrency keys' gates in ZooKeeper: made by a claim with its slot, read by `stats`,
//! swept by the reaper once nothing holds them, and a key no gate can be named after.

use event_bridge::clock::ZkTime;
use event_bridge::limit::{KeyLimit, Limit};
use event_bridge::queue::{KEY_GATE_IDLE_MS, Lease, Restraints, TaskOutcome};
use event_bridge::{Envelope, reap, stats};
use serde_json::json;

use harness::TestQueue;
use zookeeper_client as zk;

mod in_doubt;

/// Restraints whose default route lets each key have `per_key` at once.
fn per_key(per_key: KeyLimit) -> Restraints {
    harness::per_key_restraints(Limit::default(), per_key)
}

/// Restraints whose default route lets each key have `max` tasks in flight.
fn capped(max: u32) -> Restraints {
    per_key(KeyLimit {
        max_in_flight: Some(max),
        rate_per_ms: None,
    })
}

/// Publishes a task with concurrency key `key`; its name.
async fn publish(t: &TestQueue, key: &str) -> String {
    let mut envelope = Envelope::new("a", json!({}));
    envelope.concurrency_key = Some(key.into());
    t.queue.publish_many(&[envelope]).await.unwrap().remove(0)
}

async fn claim(t: &TestQueue, name: &str, restraints: &Restraints) -> TaskOutcome {
    claim_by(t, &t.queue, name, restraints).await
}

/// Claims task `name` as consumer `queue`.
async fn claim_by(
    t: &TestQueue,
    queue: &event_bridge::Queue,
    name: &str,
    restraints: &Restraints,
) -> TaskOutcome {
    let now = queue.server_time().await.unwrap();
    claim_at(t, queue, name, restraints, &now).await
}

/// Claims task `name` as consumer `queue`, at ZooKeeper time `now`.
async fn claim_at(
    t: &TestQueue,
    queue: &event_bridge::Queue,
    name: &str,
    restraints: &Restraints,
    now: &ZkTime,
) -> TaskOutcome {
    let path = queue.layout().task(name);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    (queue.claim_read(name, &body, &stat, now, restraints))
        .await
        .unwrap()
}

/// The slots under `gate`: how many tasks each stands for, and the task that led its claim.
async fn slots(t: &TestQueue, gate: &str) -> Vec<(usize, String)> {
    let names = t.children(gate).await;
    (names.iter())
        .map(|name| {
            let lead = name.splitn(3, '.').nth(2).unwrap_or(name);
            (event_bridge::queue::slot_tasks(name), lead.to_string())
        })
        .collect()
}

fn claimed(outcome: TaskOutcome) -> Lease {
    match outcome {
        TaskOutcome::Claimed(lease) => *lease,
        other => panic!("not claimed: {other:?}"),
    }
}

#[tokio::test]
async fn a_key_at_its_cap_waits_without_an_attempt_while_another_key_goes() {
    let t = TestQueue::new().await;
    let restraints = capped(1);
    let (first, second, other) = (
        publish(&t, "tenant-a").await,
        publish(&t, "tenant-a").await,
        publish(&t, "tenant-b").await,
    );
    let mut held = claimed(claim(&t, &first, &restraints).await);
    assert!(matches!(
        claim(&t, &second, &restraints).await,
        TaskOutcome::Limited { .. }
    ));
    claimed(claim(&t, &other, &restraints).await);
    let (body, _) = t
        .raw
        .get_data(&t.queue.layout().task(&second))
        .await
        .unwrap();
    let attempts = serde_json::from_slice::<serde_json::Value>(&body).unwrap()["attempts"].clone();
    assert_eq!(attempts, 0, "waiting costs no attempt");
    assert_eq!(
        slots(&t, "concurrency/@default/tenant-a").await,
        [(1, first)]
    );
    // Its handler ends: the slot goes, and the key's next task may run.
    t.queue.gates().free_slots(&held.take_slots()).await;
    claimed(claim(&t, &second, &restraints).await);
}

#[tokio::test]
async fn stats_show_the_keys_in_flight_and_those_at_their_cap() {
    let t = TestQueue::new().await;
    let restraints = capped(2);
    for key in ["full", "full", "half"] {
        let name = publish(&t, key).await;
        claimed(claim(&t, &name, &restraints).await);
    }
    let now = t.queue.server_time().await.unwrap();
    let stats = stats::collect(&t.queue, &now).await.unwrap();
    let seen: Vec<(String, usize, Option<u32>, bool)> = stats
        .keys_in_flight
        .iter()
        .map(|k| (k.key.clone(), k.in_flight, k.max_in_flight, k.at_limit()))
        .collect();
    assert_eq!(
        seen,
        [
            ("full".to_string(), 2, Some(2), true),
            ("half".to_string(), 1, Some(2), false)
        ]
    );
    assert_eq!(stats.keys_at_limit, 1);
    let printed = serde_json::to_value(&stats).unwrap();
    assert_eq!(printed["keys_in_flight"][0]["route"], "@default");
}

#[tokio::test]
async fn the_reaper_sweeps_a_keys_gate_only_once_it_is_idle_and_its_bucket_full() {
    let t = TestQueue::new().await;
    let cap_one = capped(1);
    let rated = per_key(KeyLimit {
        max_in_flight: None,
        rate_per_ms: Some(1.0 / 3_600_000.0), // 1/h
    });
    let mut held = claimed(claim(&t, &publish(&t, "capped").await, &cap_one).await);
    claimed(claim(&t, &publish(&t, "rated").await, &rated).await);
    let now = t.queue.server_time().await.unwrap().now_ms();
    let later = |ms: i64| ZkTime::at(now + ms);
    let queue = &t.queue;
    let swept = |at| async move {
        let report = reap::reap_at(queue, &at).await.unwrap();
        report
            .swept
            .get("concurrency_keys")
            .copied()
            .expect("its sweep ran")
    };
    assert_eq!(
        swept(later(2 * KEY_GATE_IDLE_MS)).await,
        0,
        "a slot is held; the bucket is empty"
    );
    t.queue.gates().free_slots(&held.take_slots()).await;
    assert_eq!(swept(later(0)).await, 0, "just used");
    assert_eq!(
        swept(later(2 * KEY_GATE_IDLE_MS)).await,
        1,
        "the idle capped key"
    );
    assert_eq!(t.children("concurrency/@default").await, ["rated"]);
    assert_eq!(
        swept(later(3_600_000 + 1_000)).await,
        1,
        "its bucket is full again"
    );
    assert!(t.children("concurrency/@default").await.is_empty());
}

#[tokio::test]
async fn a_concurrency_key_no_gate_can_be_named_after_goes_to_the_dead_letters() {
    let t = TestQueue::new().await;
    // Another producer's envelope with an empty key: ours refuse to write it.
    let body = json!({"format": "event-bridge/1", "id": "x", "type": "a",
        "time": "2026-11-24T00:00:00Z", "payload": {}, "concurrency_key": ""});
    let name = t
        .queue
        .publish_raw(body.to_string().as_bytes())
        .await
        .unwrap();
    match claim(&t, &name, &Restraints::default()).await {
        TaskOutcome::DeadLettered { reason } => {
            assert!(reason.contains("\"concurrency_key\" is empty"), "{reason}")
        }
        other => panic!("not buried: {other:?}"),
    }
    assert_eq!(t.children("dead").await, [name]);
}

#[tokio::test]
async fn a_completion_deletes_its_slots_and_completes_without_one_already_gone() {
    let t = TestQueue::new().await;
    let route = Limit {
        max_in_flight: Some(4),
        ..Limit::default()
    };
    let one = KeyLimit {
        max_in_flight: Some(1),
        rate_per_ms: None,
    };
    let restraints = harness::per_key_restraints(route, one);
    let (first, second) = (publish(&t, "a").await, publish(&t, "b").await);
    let held = claimed(claim(&t, &first, &restraints).await);
    assert_eq!(held.slots().len(), 2, "the route's slot and the key's");
    assert_eq!(
        t.queue.complete(held).await.unwrap(),
        event_bridge::queue::Settled::Done
    );
    assert!(t.children("limits/@default").await.is_empty());
    assert!(t.children("concurrency/@default/a").await.is_empty());
    // A slot gone with a session replaced while the handler ran: the rest still goes.
    let held = claimed(claim(&t, &second, &restraints).await);
    let key_slot = t.children("concurrency/@default/b").await.remove(0);
    let key_slot = format!("{}/concurrency/@default/b/{key_slot}", t.config.root);
    t.raw.delete(&key_slot, None).await.unwrap();
    assert_eq!(
        t.queue.complete(held).await.unwrap(),
        event_bridge::queue::Settled::Done
    );
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("limits/@default").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_command_lists_the_keys_in_flight() {
    let t = TestQueue::new().await;
    let one = capped(1);
    claimed(claim(&t, &publish(&t, "tenant/7").await, &one).await);
    let out = crate::cli::eb(&t, &["stats"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("keys         1 in flight, 1 at their cap"),
        "{text}"
    );
    assert!(
        text.contains("tenant/7") && text.contains("1 of 1  at its cap"),
        "{text}"
    );
    let out = crate::cli::eb(&t, &["stats", "--json"], "");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["keys_in_flight"][0]["key"], "tenant/7", "{json}");
    assert_eq!(json["keys_at_limit"], 1);
}

/// A key's first claim creates its gate in the claim's own multi-op (the gate's parents made
/// before it, once per process); parents deleted by hand since then fail that create, and the
/// claim reads the gate afresh, makes them again and goes through.
#[tokio::test]
async fn a_new_keys_gate_is_made_by_the_claim_and_again_after_its_parents_were_deleted() {
    let t = TestQueue::new().await;
    let restraints = capped(2);
    let first = publish(&t, "tenant-a").await;
    let mut held = claimed(claim(&t, &first, &restraints).await);
    assert_eq!(
        slots(&t, "concurrency/@default/tenant-a").await,
        [(1, first)]
    );
    t.queue.gates().free_slots(&held.take_slots()).await;
    // The whole of `concurrency/` goes (by hand): this queue made its parents already.
    for path in [
        "concurrency/@default/tenant-a",
        "concurrency/@default",
        "concurrency",
    ] {
        t.raw
            .delete(&format!("{}/{path}", t.config.root), None)
            .await
            .unwrap();
    }
    let second = publish(&t, "tenant-b").await;
    claimed(claim(&t, &second, &restraints).await);
    assert_eq!(
        slots(&t, "concurrency/@default/tenant-b").await,
        [(1, second)]
    );
}

/// A consumer claims through a gate as it last knew it, without reading it first. When
/// another consumer went through since, the claim fails at the gate's version, reads the gate
/// afresh and goes through in the same call (it does not wait as if the key were at its cap),
/// and the cap still holds across both.
#[tokio::test]
async fn a_claim_through_a_gate_another_consumer_moved_reads_it_afresh_and_goes_through() {
    let t = TestQueue::new().await;
    let restraints = capped(3);
    let other = t.consumer("other").await;
    let mut names = Vec::new();
    for _ in 0..4 {
        names.push(publish(&t, "tenant-a").await);
    }
    claimed(claim(&t, &names[0], &restraints).await);
    claimed(claim_by(&t, &other, &names[1], &restraints).await);
    claimed(claim(&t, &names[2], &restraints).await);
    let mut held = slots(&t, "concurrency/@default/tenant-a").await;
    held.sort();
    let one_each: Vec<(usize, String)> = names[..3].iter().map(|n| (1, n.clone())).collect();
    assert_eq!(held, one_each);
    for queue in [&t.queue, &other] {
        assert!(
            matches!(
                claim_by(&t, queue, &names[3], &restraints).await,
                TaskOutcome::Limited { .. }
            ),
            "three in flight: the key is at its cap for either consumer"
        );
    }
}

/// Tasks `names` as a claim takes them: name, body and stat, just read.
async fn reads_of(t: &TestQueue, names: &[String]) -> Vec<(String, Vec<u8>, zk::Stat)> {
    let mut reads = Vec::new();
    for name in names {
        let (body, stat) = t.raw.get_data(&t.queue.layout().task(name)).await.unwrap();
        reads.push((name.clone(), body, stat));
    }
    reads
}

/// Claims a task of `tenant-a` and frees its place: `t.queue` knows the key's gate from then on.
async fn learn_gate(t: &TestQueue, restraints: &Restraints) {
    let mut first = claimed(claim(t, &publish(t, "tenant-a").await, restraints).await);
    t.queue.gates().free_slots(&first.take_slots()).await;
}

/// Claims `names` together, in one claim batch, as `t.queue`.
async fn claim_together(t: &TestQueue, names: &[String], restraints: &Restraints) -> Vec<Lease> {
    let reads = reads_of(t, names).await;
    let now = t.queue.server_time().await.unwrap();
    let outcomes = t.queue.claim_many(&reads, &now, restraints).await.unwrap();
    outcomes.into_iter().map(|o| claimed(o.unwrap())).collect()
}

/// The tasks one claim admits through a gate hold one slot together, named with how many of
/// them still run: renamed as they end (a completion, a handler that failed), deleted with the
/// last. The cap counts the tasks, not the slots.
#[tokio::test]
async fn a_claims_tasks_hold_one_slot_together_until_the_last_of_them_ends() {
    let t = TestQueue::new().await;
    let restraints = capped(3);
    let mut names = Vec::new();
    for _ in 0..5 {
        names.push(publish(&t, "tenant-a").await);
    }
    let gate = "concurrency/@default/tenant-a";
    let mut held = claim_together(&t, &names[..3], &restraints).await;
    assert_eq!(slots(&t, gate).await, [(3, names[0].clone())]);
    assert!(
        matches!(
            claim(&t, &names[3], &restraints).await,
            TaskOutcome::Limited { .. }
        ),
        "three tasks in flight in one slot: the key is at its cap"
    );
    let done = held.remove(0);
    assert_eq!(
        t.queue.complete(done).await.unwrap(),
        event_bridge::queue::Settled::Done
    );
    assert_eq!(slots(&t, gate).await, [(2, names[0].clone())]);
    // A handler that failed frees its place at once; a clone of its lease frees nothing more.
    let mut failed = held.remove(0);
    let mut clone = failed.clone();
    t.queue.gates().free_slots(&failed.take_slots()).await;
    t.queue.gates().free_slots(&clone.take_slots()).await;
    assert_eq!(slots(&t, gate).await, [(1, names[0].clone())]);
    let mut next = claim_together(&t, &names[3..5], &restraints).await;
    let mut now_held = slots(&t, gate).await;
    now_held.sort();
    assert_eq!(now_held, [(1, names[0].clone()), (2, names[3].clone())]);
    t.queue
        .gates()
        .free_slots(&held.remove(0).take_slots())
        .await;
    for lease in next.iter_mut() {
        t.queue.gates().free_slots(&lease.take_slots()).await;
    }
    assert!(
        t.children(gate).await.is_empty(),
        "each slot went with its last task"
    );
}

/// A slot of an older consumer, named by its one task, counts one task.
#[tokio::test]
async fn an_older_consumers_slot_counts_one_task() {
    let t = TestQueue::new().await;
    let restraints = capped(2);
    learn_gate(&t, &restraints).await;
    let older = format!(
        "{}/concurrency/@default/tenant-a/task-0000000999",
        t.config.root
    );
    let ephemeral =
        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    t.raw.create(&older, b"", &ephemeral).await.unwrap();
    // Its claim rewrote the gate with the slot, as every admission does.
    let gate = format!("{}/concurrency/@default/tenant-a", t.config.root);
    let (data, _) = t.raw.get_data(&gate).await.unwrap();
    t.raw.set_data(&gate, &data, None).await.unwrap();
    let names = [publish(&t, "tenant-a").await, publish(&t, "tenant-a").await];
    let reads = reads_of(&t, &names).await;
    let now = t.queue.server_time().await.unwrap();
    let outcomes = t.queue.claim_many(&reads, &now, &restraints).await.unwrap();
    assert!(
        matches!(outcomes[0], Some(TaskOutcome::Claimed(_))),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Some(TaskOutcome::Limited { .. })),
        "{outcomes:?}"
    );
}
