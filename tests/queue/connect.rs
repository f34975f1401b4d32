//! Connecting: through a leader election, to a missing chroot, to nothing at all.

use std::time::Duration;

use event_bridge::{Config, Error, Session};

use harness::{Proxy, TestQueue, uuid_like, zk_address};

/// While an ensemble elects a leader its servers refuse clients; a consumer that starts then
/// keeps trying until its connect timeout, as its error message promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_until_the_connect_timeout() {
    let t = TestQueue::new().await;
    let proxy = Proxy::start().await;
    proxy.set_cut(true);
    let chroot = t.config.zookeeper.split_once('/').map(|(_, c)| c).unwrap();
    let mut config = t.config.clone();
    config.zookeeper = format!("{}/{chroot}", proxy.address);
    config.connect_timeout = Duration::from_secs(20);
    let connecting = tokio::spawn(async move { Session::open(config, "test", None).await });
    // Refused again and again (each try a connection the proxy refused), then the server
    // answers.
    let tries = 5;
    harness::eventually("the connect to try again while refused", || async {
        proxy.refused() >= tries
    })
    .await;
    assert!(!connecting.is_finished(), "gave up while refused");
    proxy.set_cut(false);
    let session = tokio::time::timeout(Duration::from_secs(30), connecting)
        .await
        .expect("connect ended")
        .unwrap()
        .expect("connected once the server answered");
    t.queue.publish_raw(b"{}").await.unwrap();
    assert_eq!(
        session
            .queue()
            .count(&t.queue.layout().tasks())
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn a_missing_chroot_is_named() {
    let chroot = format!("/eb-tests/missing-{}", uuid_like());
    let mut config = Config::default();
    config.zookeeper = format!("{}{chroot}", zk_address());
    let err = Session::open(config, "test", None)
        .await
        .err()
        .expect("the chroot does not exist");
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&chroot) && message.contains("does not exist"),
        "{message}"
    );
    assert!(
        message.starts_with("ZOOKEEPER_CONNECTION_STRING"),
        "{message}"
    );
}
