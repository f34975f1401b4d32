//! `reap_leases`: crashed consumers, orphans, foreign leases.

use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::queue::{Settled, TaskOutcome};
use event_bridge::{Envelope, reap};
use serde_json::json;
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, run};

#[tokio::test]
async fn a_task_whose_consumer_crashed_is_reaped_claimed_again_and_completed_once() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let crashed = t.consumer("crashed").await;
    let TaskOutcome::Claimed(lease) = crashed.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim")
    };
    let lease = *lease;
    // The consumer stops without cleanup: its session closes, its persistent lease stays.
    drop(crashed);

    let early = event_bridge::reap::reap(&t.queue).await.unwrap();
    assert_eq!(
        (early.reaped, early.stats.leased),
        (0, 1),
        "a live lease is not reaped"
    );
    let recorder = Recorder::default();
    assert_eq!(
        run(&t.queue, &recorder, 1).await.claimed,
        0,
        "a leased task is not claimed"
    );

    // The reaper judges at a moment past the lease's expiry (a clock the test drives).
    let later = t.past_lease_of(&name).await;
    let reaped = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(
        (reaped.reaped, reaped.stats.leased, reaped.stats.depth),
        (1, 0, 1)
    );
    let task = t.read_json(&format!("tasks/{name}")).await;
    assert!(
        task["last_error"]
            .as_str()
            .unwrap()
            .contains("lease expired"),
        "{task}"
    );

    let report = run(&t.queue, &recorder, 1).await;
    assert_eq!(report.completed, 1);
    assert_eq!(recorder.names(), [name]);
    assert_eq!(
        recorder.seen.lock().unwrap()[0].attempt(),
        2,
        "the crashed claim counted"
    );
    // Had the crashed consumer come back, its writes would change nothing: the next holder
    // completed the task.
    let back = t.consumer("back").await;
    assert_eq!(back.complete(lease).await.unwrap(), Settled::Gone);
}

#[tokio::test]
async fn a_lease_whose_task_is_gone_is_removed_as_an_orphan() {
    let t = TestQueue::new().await;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let data = br#"{"consumerId":"vercel-func-x","timestamp":1}"#;
    t.raw
        .create("/event-bridge/leases/task-0000000099", data, &options)
        .await
        .unwrap();
    let report = event_bridge::reap::reap(&t.queue).await.unwrap();
    assert_eq!((report.orphans_removed, report.reaped), (1, 0));
    assert!(t.children("leases").await.is_empty());
}

#[tokio::test]
async fn a_000_consumer_lease_expires_by_zookeeper_time_like_ours() {
    let t = TestQueue::new().await;
    let name = t.publish(1).await.remove(0);
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    // Its timestamp claims the far future: only the znode's mtime is trusted.
    let data = br#"{"consumerId":"vercel-func-x","timestamp":99999999999999}"#;
    t.raw
        .create(&format!("/event-bridge/leases/{name}"), data, &options)
        .await
        .unwrap();
    assert_eq!(event_bridge::reap::reap(&t.queue).await.unwrap().reaped, 0);
    let just_before = ZkTime::at(t.past_lease_of(&name).await.now_ms() - 2);
    assert_eq!(
        reap::reap_at(&t.queue, &just_before).await.unwrap().reaped,
        0
    );
    let later = t.past_lease_of(&name).await;
    let report = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(
        (report.reaped, report.stats.depth, report.stats.dead),
        (1, 1, 0)
    );
    let timeout = t.config.lease_timeout.as_millis() as i64;
    assert!(report.stats.oldest_task_age_ms.unwrap() >= timeout);
}

#[tokio::test]
async fn an_unreachable_zookeeper_fails_fast_naming_the_address() {
    let mut config = event_bridge::Config::default();
    config.zookeeper = "127.0.0.1:9".into();
    config.connect_timeout = Duration::from_secs(2);
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        event_bridge::session::connect(&config),
    )
    .await;
    let err = outcome
        .expect("connect gave up by itself")
        .expect_err("nothing listens there");
    assert!(
        matches!(err, event_bridge::Error::Unreachable { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
}

/// The reaper reads an expired lease, and before it deletes it, another reaper frees it and a
/// new consumer claims the task: its fresh lease has the same path and, like every fresh lease
/// of ours, the same version. For a task too large to take the reaper's note (so it is not
/// rewritten on reaping), only the task's version tells the two leases apart: every lease
/// delete must check it.
#[tokio::test]
async fn a_reaper_with_a_stale_read_never_frees_the_next_holders_lease() {
    let t = TestQueue::new().await;
    // An envelope just under the size limit: the reaper's "lease expired" note would take it
    // over, so the reaper frees its lease without rewriting it.
    let mut envelope = Envelope::new("big", json!(""));
    let room = event_bridge::task::MAX_BODY_BYTES - envelope.to_bytes().unwrap().len();
    envelope.payload = json!("x".repeat(room - 20));
    let name = t.queue.publish(&envelope).await.unwrap();
    let a = t.consumer("a").await;
    let claimed = a.claim(&name, &t.now().await).await.unwrap();
    assert!(matches!(claimed, TaskOutcome::Claimed(_)), "{claimed:?}");
    let later = t.past_lease_of(&name).await;

    let slow_reaper = t.consumer("slow-reaper").await;
    let seen = reap::expired_leases(&slow_reaper, &later).await.unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");

    assert_eq!(reap::reap_at(&t.queue, &later).await.unwrap().reaped, 1);
    let b = t.consumer("b").await;
    let lease_b = match b.claim(&name, &t.now().await).await.unwrap() {
        TaskOutcome::Claimed(lease) => *lease,
        other => panic!("{other:?}"),
    };
    let path = format!("{}/leases/{name}", t.config.root);
    let (_, fresh) = t.raw.get_data(&path).await.unwrap();

    assert!(
        !reap::free(&slow_reaper, &seen[0]).await.unwrap(),
        "the stale read frees nothing"
    );
    let (_, after) = t.raw.get_data(&path).await.unwrap();
    assert_eq!(fresh, after, "B's lease is untouched");
    assert_eq!(b.complete(lease_b).await.unwrap(), Settled::Done);
}
