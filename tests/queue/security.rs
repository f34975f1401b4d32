//! ZooKeeper digest authentication and the ACLs the bridge puts on its nodes.

use event_bridge::Secret;
use event_bridge::queue::TaskOutcome;
use zookeeper_client as zk;

use harness::{Recorder, TestQueue, consumer, run};

#[tokio::test]
async fn without_the_credentials_a_client_can_neither_read_payloads_nor_claim_tasks() {
    let t = TestQueue::with(|c| c.zookeeper_auth = Some(Secret::new("bridge:s3cret"))).await;
    let name = t.publish(1).await.remove(0);
    let task = format!("/event-bridge/tasks/{name}");

    let anonymous = zk::Client::connect(&t.config.zookeeper).await.unwrap();
    assert_eq!(
        anonymous.get_data(&task).await.unwrap_err(),
        zk::Error::NoAuth
    );
    assert_eq!(
        anonymous
            .list_children("/event-bridge/tasks")
            .await
            .unwrap_err(),
        zk::Error::NoAuth
    );

    let mut wrong = t.config.clone();
    wrong.zookeeper_auth = Some(Secret::new("bridge:guess"));
    let intruder = consumer(&wrong, "intruder").await;
    let now = t.now().await;
    assert!(matches!(
        intruder.claim(&name, &now).await,
        Err(event_bridge::Error::Zk { .. })
    ));
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let lease = format!("/event-bridge/leases/{name}");
    let intruder_raw = event_bridge::session::connect(&wrong)
        .await
        .expect("connect");
    let forged = intruder_raw.create(&lease, b"{}", &options).await;
    assert_eq!(forged.unwrap_err(), zk::Error::NoAuth);

    let recorder = Recorder::default();
    assert_eq!(
        run(&t.queue, &recorder, 5).await.completed,
        1,
        "the rightful consumer still runs it"
    );
    let TaskOutcome::Gone = t.queue.claim(&name, &now).await.unwrap() else {
        panic!("task done")
    };
}

/// A task another producer created readable only by itself (its credentials differ from ours)
/// is skipped and counted by every run, and never blocks the tasks behind it: drains, the
/// reaper and `stats` go on.
#[tokio::test]
async fn a_task_we_may_not_read_is_skipped_and_counted_and_blocks_nothing() {
    let t = TestQueue::new().await;
    let before = t.publish(1).await;
    let stranger = zk::Client::connector()
        .with_auth("digest", b"stranger:pw")
        .connect(&t.config.zookeeper)
        .await
        .unwrap();
    let private = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::creator_all());
    let body = event_bridge::Envelope::new("secret", serde_json::json!({}))
        .to_bytes()
        .unwrap();
    let (_, seq) = stranger
        .create("/event-bridge/tasks/task-", &body, &private)
        .await
        .unwrap();
    let hidden = format!("task-{seq}");
    let after = t.publish(40).await;

    let recorder = Recorder::default();
    let report = run(&t.queue, &recorder, 100).await;
    assert_eq!(report.completed, 41, "{report:?}");
    assert_eq!(report.unreadable, 1, "{report:?}");
    let mut seen = recorder.names();
    seen.sort();
    assert_eq!(seen, [before, after].concat());
    assert_eq!(t.children("tasks").await, [hidden]);

    let stats = event_bridge::inspect::detailed_stats(&t.queue, &t.now().await, true)
        .await
        .expect("stats go on");
    assert_eq!((stats.stats.depth, stats.unreadable), (1, 1), "{stats:?}");
    event_bridge::reap::reap(&t.queue)
        .await
        .expect("the reaper goes on");
}
