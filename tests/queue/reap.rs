//! `reap_leases`: crashed consumers, orphans, foreign leases.

use std::time::Duration;

use event_bridge::queue::{ClaimOutcome, Settled};
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, run};

#[tokio::test]
async fn a_task_whose_consumer_crashed_is_reaped_claimed_again_and_completed_once() {
    let t = TestQueue::with(|c| c.lease_timeout = Duration::from_millis(2_000)).await;
    let name = t.publish(1).await.remove(0);
    let crashed = t.consumer("crashed").await;
    let ClaimOutcome::Claimed(lease) = crashed.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claim")
    };
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

    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let reaped = event_bridge::reap::reap(&t.queue).await.unwrap();
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
    // Had the crashed consumer come back, its writes would change nothing.
    let back = t.consumer("back").await;
    assert_eq!(back.complete(lease).await.unwrap(), Settled::LeaseLost);
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
    let t = TestQueue::with(|c| c.lease_timeout = Duration::from_millis(2_000)).await;
    let name = t.publish(1).await.remove(0);
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    // Its timestamp claims the far future: only the znode's mtime is trusted.
    let data = br#"{"consumerId":"vercel-func-x","timestamp":99999999999999}"#;
    t.raw
        .create(&format!("/event-bridge/leases/{name}"), data, &options)
        .await
        .unwrap();
    assert_eq!(event_bridge::reap::reap(&t.queue).await.unwrap().reaped, 0);
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let report = event_bridge::reap::reap(&t.queue).await.unwrap();
    assert_eq!(
        (report.reaped, report.stats.depth, report.stats.dead),
        (1, 1, 0)
    );
    assert!(report.stats.oldest_task_age_ms.unwrap() >= 2_200);
}

#[tokio::test]
async fn an_unreachable_zookeeper_fails_fast_naming_the_address() {
    let config = event_bridge::Config {
        zookeeper: "127.0.0.1:9".into(),
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    };
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
