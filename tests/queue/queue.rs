//! Claim, settle and fence on a real ZooKeeper.

use std::time::Duration;

use event_bridge::queue::{GiveBack, Lease, Settled, TaskOutcome};
use event_bridge::{Envelope, Queue};
use serde_json::json;
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, run};

async fn claim(queue: &Queue, name: &str, t: &TestQueue) -> TaskOutcome {
    queue.claim(name, &t.now().await).await.expect("claim")
}

fn claimed(outcome: TaskOutcome) -> Lease {
    match outcome {
        TaskOutcome::Claimed(lease) => *lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test]
async fn publish_then_drain_completes_every_task_and_leaves_nothing_behind() {
    let t = TestQueue::new().await;
    let names = t.publish(20).await;
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 100).await;
    assert_eq!(
        (report.claimed, report.completed, report.remaining_depth),
        (20, 20, Some(0))
    );
    let mut seen = recorder.names();
    seen.sort();
    assert_eq!(seen, names);
    assert!(t.children("tasks").await.is_empty());
    assert!(t.children("leases").await.is_empty());
}

#[tokio::test]
async fn a_lost_claim_is_an_outcome_not_an_error() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let other = t.consumer("other").await;
    let lease = claimed(claim(&t.queue, &name, &t).await);
    assert!(matches!(claim(&other, &name, &t).await, TaskOutcome::Taken));
    assert_eq!(t.queue.complete(lease).await.unwrap(), Settled::Done);
    assert!(matches!(claim(&other, &name, &t).await, TaskOutcome::Gone));
}

/// Each task's name, body and stat, as a consumer reads them before a batch of claims.
async fn read_tasks(t: &TestQueue, names: &[String]) -> Vec<(String, Vec<u8>, zk::Stat)> {
    let mut reads = Vec::new();
    for name in names {
        let path = format!("{}/tasks/{name}", t.config.root);
        let (body, stat) = t.raw.get_data(&path).await.unwrap();
        reads.push((name.clone(), body, stat));
    }
    reads
}

#[tokio::test]
async fn a_batch_of_claims_lands_before_a_lost_race_and_leaves_the_rest_untried() {
    let t = TestQueue::new().await;
    let names = t.publish(5).await;
    let reads = read_tasks(&t, &names).await;
    // Another consumer takes the third task after our read.
    let other = t.consumer("other").await;
    let _held = claimed(claim(&other, &names[2], &t).await);
    let now = t.now().await;
    let outcomes = t
        .queue
        .claim_many(&reads, &now, &Default::default())
        .await
        .unwrap();
    let kinds: Vec<&str> = outcomes
        .iter()
        .map(|o| match o {
            Some(TaskOutcome::Claimed(_)) => "claimed",
            Some(TaskOutcome::Taken) => "taken",
            None => "untried",
            Some(other) => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["claimed", "claimed", "taken", "untried", "untried"]);
    // Each claimed task got a lease of its own, fenced in claim order.
    let tokens: Vec<i64> = outcomes[..2]
        .iter()
        .map(|o| match o {
            Some(TaskOutcome::Claimed(lease)) => lease.task.fencing_token,
            _ => unreachable!(),
        })
        .collect();
    assert!(
        tokens[0] > 0 && tokens[0] == tokens[1],
        "one multi-op, one zxid: {tokens:?}"
    );
    assert_eq!(t.children("leases").await, names[..3].to_vec());
    // Untried tasks are untouched: a claim of the same read still lands.
    let late = t
        .queue
        .claim_many(&reads[3..], &now, &Default::default())
        .await
        .unwrap();
    assert!(
        late.iter()
            .all(|o| matches!(o, Some(TaskOutcome::Claimed(_))))
    );
}

#[tokio::test]
async fn a_batch_read_before_another_consumer_went_through_learns_the_rest_in_one_look() {
    let t = TestQueue::new().await;
    let names = t.publish(6).await;
    let reads = read_tasks(&t, &names).await;
    // After our read, another consumer completes the first four tasks and holds the fifth.
    let other = t.consumer("other").await;
    for name in &names[..4] {
        let lease = claimed(claim(&other, name, &t).await);
        assert_eq!(other.complete(lease).await.unwrap(), Settled::Done);
    }
    let _held = claimed(claim(&other, &names[4], &t).await);
    let now = t.now().await;
    let outcomes = t
        .queue
        .claim_many(&reads, &now, &Default::default())
        .await
        .unwrap();
    let kinds: Vec<&str> = outcomes
        .iter()
        .map(|o| match o {
            Some(TaskOutcome::Gone) => "gone",
            Some(TaskOutcome::Taken) => "taken",
            None => "untried",
            Some(other) => panic!("unexpected {other:?}"),
        })
        .collect();
    // The first claim's failure shows the batch went stale; one read of the rest tells which
    // are gone or held, instead of a failed claim for each of them in turn.
    assert_eq!(kinds, ["gone", "gone", "gone", "gone", "taken", "untried"]);
}

#[tokio::test]
async fn runs_claim_the_oldest_task_first() {
    let t = TestQueue::new().await;
    // ZooKeeper lists children in no particular order; runs must sort by sequence number.
    let first = t.publish(12).await;
    let recorder = Recorder::default();
    for _ in 0..12 {
        let report = run(&t.queue, &recorder, 1).await;
        assert_eq!(report.claimed, 1);
    }
    assert_eq!(
        recorder.names(),
        first,
        "one-task runs must take tasks in sequence order"
    );
}

#[tokio::test]
async fn a_task_body_is_the_payload_when_another_producer_wrote_plain_json() {
    let t = TestQueue::new().await;
    let options = zookeeper_client::CreateMode::PersistentSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let body = br#"{"user_id":123,"action":"export_report"}"#;
    let (_, seq) = t
        .raw
        .create("/event-bridge/tasks/task-", body, &options)
        .await
        .unwrap();
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!(report.completed, 1);
    let task = recorder.seen.lock().unwrap().remove(0);
    assert_eq!(task.name, format!("task-{seq}"));
    assert_eq!(
        task.envelope.payload,
        json!({"user_id": 123, "action": "export_report"})
    );
    assert_eq!(
        (task.envelope.id.as_str(), task.envelope.event_type.as_str()),
        (task.name.as_str(), "event")
    );
    assert_eq!(task.attempt(), 1);
}

#[tokio::test]
async fn fencing_refuses_a_stale_holder_after_its_lease_was_reaped_and_the_task_claimed_again() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let a = t.consumer("a").await;
    let b = t.consumer("b").await;
    let mut stale = claimed(claim(&a, &name, &t).await);
    let token_a = stale.task.fencing_token;

    let later = t.past_lease_of(&name).await;
    let reaped = event_bridge::reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(reaped.reaped, 1);
    let fresh = claimed(claim(&b, &name, &t).await);
    assert!(
        fresh.task.fencing_token > token_a,
        "tokens grow with every claim"
    );

    // B's lease has the same path as A's had, and the same version: only the task's version
    // tells them apart.
    let (lease_before, lease_stat) = t
        .raw
        .get_data(&format!("/event-bridge/leases/{name}"))
        .await
        .unwrap();
    let (task_before, task_stat) = t
        .raw
        .get_data(&format!("/event-bridge/tasks/{name}"))
        .await
        .unwrap();
    assert_eq!(
        lease_stat.version, 1,
        "A's lease was at version 1 too: it never extended"
    );
    let now = t.now().await;
    assert_eq!(a.extend(&mut stale).await.unwrap(), Settled::LeaseLost);
    assert_eq!(a.complete(stale.clone()).await.unwrap(), Settled::LeaseLost);
    let release = a.release(
        stale.clone(),
        GiveBack::after(Some("x".into()), Duration::ZERO, &now, true),
    );
    assert_eq!(release.await.unwrap(), Settled::LeaseLost);
    assert_eq!(
        a.bury(stale, "stale", None).await.unwrap(),
        Settled::LeaseLost
    );
    let (lease_after, lease_stat_after) = t
        .raw
        .get_data(&format!("/event-bridge/leases/{name}"))
        .await
        .unwrap();
    let (task_after, task_stat_after) = t
        .raw
        .get_data(&format!("/event-bridge/tasks/{name}"))
        .await
        .unwrap();
    assert_eq!((lease_before, lease_stat), (lease_after, lease_stat_after));
    assert_eq!((task_before, task_stat), (task_after, task_stat_after));

    assert_eq!(b.complete(fresh).await.unwrap(), Settled::Done);
    assert!(t.children("tasks").await.is_empty());
}

#[tokio::test]
async fn the_claim_itself_counts_the_attempt_and_marks_the_lease_for_000_consumers() {
    let t = TestQueue::new().await;
    let name = t
        .queue
        .publish(&Envelope::new("x", json!(1)))
        .await
        .unwrap();
    let lease = claimed(claim(&t.queue, &name, &t).await);
    assert_eq!(lease.task.attempt(), 1);
    assert_eq!(t.read_json(&format!("tasks/{name}")).await["attempts"], 1);
    let data = t.read_json(&format!("leases/{name}")).await;
    assert_eq!(data["consumerId"], t.queue.consumer_id());
    assert!(data["timestamp"].as_i64().unwrap() > 1_600_000_000_000);
    let path = format!("{}/leases/{name}", t.config.root);
    let (_, stat) = t.raw.get_data(&path).await.unwrap();
    assert_eq!(
        stat.czxid, lease.task.fencing_token,
        "the token is the claim's zxid: the lease znode's czxid"
    );
}

#[tokio::test]
async fn a_lease_held_by_a_000_consumer_is_respected() {
    let t = TestQueue::new().await;
    let names = t.publish(2).await;
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let theirs = br#"{"consumerId":"vercel-func-abc","timestamp":1}"#;
    t.raw
        .create(
            &format!("/event-bridge/leases/{}", names[0]),
            theirs,
            &options,
        )
        .await
        .unwrap();
    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 10).await;
    assert_eq!(recorder.names(), [names[1].clone()]);
    assert_eq!(report.remaining_depth, Some(1));
}

#[tokio::test]
async fn a_batch_completion_with_one_stale_lease_completes_the_others_and_fences_that_one() {
    let t = TestQueue::new().await;
    let names = t.publish(3).await;
    let mut held = Vec::new();
    for name in &names {
        held.push(claimed(claim(&t.queue, name, &t).await));
    }
    // The middle lease expires and another consumer takes the task over: the others are
    // extended at least a millisecond later (ZooKeeper stamps in milliseconds), and the reaper
    // judges just past the middle one's expiry.
    let later = t.past_lease_of(&names[1]).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let other = t.consumer("other").await;
    let mut keep = held[0].clone();
    let mut keep_last = held[2].clone();
    assert_eq!(t.queue.extend(&mut keep).await.unwrap(), Settled::Done);
    assert_eq!(t.queue.extend(&mut keep_last).await.unwrap(), Settled::Done);
    let reaped = event_bridge::reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(reaped.reaped, 1);
    let taken_over = claimed(claim(&other, &names[1], &t).await);

    let settled = t
        .queue
        .complete_many(vec![keep, held[1].clone(), keep_last])
        .await
        .unwrap();
    let lost: Vec<_> = settled
        .iter()
        .filter(|(_, s)| *s == Settled::LeaseLost)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lost, [&names[1]]);
    assert_eq!(t.children("tasks").await, [names[1].clone()]);
    assert_eq!(t.children("leases").await, [names[1].clone()]);
    assert_eq!(other.complete(taken_over).await.unwrap(), Settled::Done);
}

/// Past 2^31 − 1 creates under `tasks/`, ZooKeeper prints sequence numbers negative
/// (`task--2147483648`); they still come after `task-2147483647`. Created here by name, as
/// ZooKeeper would name them.
#[tokio::test]
async fn sequence_numbers_past_2_31_are_claimed_in_order() {
    let t = TestQueue::new().await;
    let names = [
        "task-2147483646",
        "task-2147483647",
        "task--2147483648",
        "task--2147483647",
        "task--000000001",
    ];
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    // Created out of order: the queue sorts them.
    for name in names.iter().rev() {
        let body = Envelope::new("wrap", json!({})).to_bytes().unwrap();
        let path = format!("{}/tasks/{name}", t.config.root);
        t.raw.create(&path, &body, &options).await.unwrap();
    }
    let recorder = Recorder::default();
    for _ in 0..names.len() {
        assert_eq!(run(&t.queue, &recorder, 1).await.claimed, 1);
    }
    assert_eq!(recorder.names(), names);
    assert!(t.children("tasks").await.is_empty());
}

/// A dead letter whose name is taken (by a record of an earlier queue under the same root, or
/// after sequence numbers wrapped) gets another name instead of failing every run.
#[tokio::test]
async fn a_dead_letter_name_collision_picks_another_name() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let taken = format!("{}/dead/{name}", t.config.root);
    t.raw
        .create(&taken, b"{\"older\":true}", &options)
        .await
        .unwrap();
    let handler = event_bridge::handler::FnHandler(|_task: event_bridge::Task| async {
        Err(event_bridge::HandlerError::Permanent("no such user".into()))
    });
    let report = run(&t.queue, &handler, 1).await;
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    let dead = t.children("dead").await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    let other = dead.iter().find(|d| **d != name).expect("another name");
    assert!(other.starts_with(&format!("{name}~")), "{other}");
    let record = t.read_json(&format!("dead/{other}")).await;
    assert_eq!(record["reason"], "permanent failure");
    assert_eq!(record["task"], name.as_str());
    assert_eq!(t.read_json(&format!("dead/{name}")).await["older"], true);
    let listed = event_bridge::dead::list(&t.queue).await.unwrap();
    assert_eq!(listed.len(), 2, "both are listed");
}

/// A receiver refuses a token lower than the highest it saw for a task id. A redriven task
/// keeps its id, so its claims must carry tokens higher than any before the redrive.
#[tokio::test]
async fn fencing_tokens_keep_growing_across_a_redrive() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let mut tokens = Vec::new();
    let lease = claimed(claim(&t.queue, &name, &t).await);
    tokens.push(lease.task.fencing_token);
    let id = lease.task.envelope.id.clone();
    assert_eq!(
        t.queue
            .bury(lease, "permanent failure", None)
            .await
            .unwrap(),
        Settled::Done
    );
    let redriven = event_bridge::dead::redrive(&t.queue, &[name])
        .await
        .unwrap();
    let again = redriven.redriven[0].task.clone();
    let lease = claimed(claim(&t.queue, &again, &t).await);
    assert_eq!(lease.task.envelope.id, id, "the same task id");
    tokens.push(lease.task.fencing_token);
    assert_eq!(t.queue.complete(lease).await.unwrap(), Settled::Done);
    assert!(
        tokens[1] > tokens[0],
        "tokens grow across the redrive: {tokens:?}"
    );
}
