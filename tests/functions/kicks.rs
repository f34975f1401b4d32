//! Kicks (`EVENT_BRIDGE_KICK=on`): a publish through the library, the CLI or process_events'
//! HTTP publish starts a drain through process_events' HTTP trigger, with no cron tick; kicks
//! coalesce through the `kick` znode; a lost kick is taken over; with kicks off nothing is
//! written or sent.
//!
//! The trigger is a real local HTTP server (`harness::kick_trigger`): it checks the bearer
//! secret, counts the requests, and (when draining) runs process_events' drain in the same
//! process; the last test kicks the Vercel build served locally.

use std::sync::Arc;
use std::time::Duration;

use event_bridge::config::KickConfig;
use event_bridge::{Config, Envelope};
use platform::trigger::Trigger;
use process_events::App;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use harness::kick_trigger::{Drain, KickTrigger};

use harness::{TestQueue, binary, consumer};

const SECRET: &str = "kick-secret";

/// The kicked drains of these tests do not linger (`KICK_LINGER_MS=0`): a publish returns once
/// its drain answered, with the node cleared. The test of lingering sets its own.
const LINGER: Duration = Duration::ZERO;

/// A trigger that drains with `app`.
fn draining(app: Arc<App>) -> Option<Drain> {
    Some(Arc::new(move || {
        let app = app.clone();
        Box::pin(async move {
            let drain = Trigger::Drain { max_tasks: None };
            process_events::run(&app, drain, Duration::from_secs(30))
                .await
                .expect("drain");
        })
    }))
}

/// Kicks on, to `url`, with a wait long enough that a publish returns after the drain it
/// kicked answered (so the test reads the tree after it, with no waiting of its own).
fn kicks_to(url: &str) -> impl FnOnce(&mut Config) {
    let url = url.to_string();
    move |config| {
        config.cron_secret = Some(event_bridge::Secret::new(SECRET));
        config.kick = Some(KickConfig {
            url,
            lambda_endpoint: None,
            stale_after: Duration::from_secs(30),
            wait: Duration::from_secs(60),
            linger: LINGER,
        });
    }
}

async fn kick_node(tq: &TestQueue) -> Option<serde_json::Value> {
    match tq.raw.get_data(&tq.queue.layout().kick()).await {
        Ok((data, _)) => Some(serde_json::from_slice(&data).expect("kick node JSON")),
        Err(zookeeper_client::Error::NoNode) => None,
        Err(e) => panic!("read kick node: {e}"),
    }
}

#[tokio::test]
async fn a_library_publish_with_kicks_on_starts_a_drain() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(kicks_to(&server.url)).await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    server.serve(draining(Arc::new(app)));

    tq.queue
        .publish(&Envelope::new("user.signup", json!({"user": 1})))
        .await
        .expect("publish");

    assert_eq!(server.requests(), 1, "one kick");
    assert!(
        tq.children("tasks").await.is_empty(),
        "the kicked drain ran the task"
    );
    assert_eq!(
        kick_node(&tq).await,
        None,
        "the drain cleared the kick node"
    );
}

#[tokio::test]
async fn a_cli_publish_with_kicks_on_starts_a_drain() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(kicks_to(&server.url)).await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    server.serve(draining(Arc::new(app)));

    let published = tokio::process::Command::new(binary("event-bridge"))
        .args([
            "publish",
            "--type",
            "user.signup",
            "--payload",
            r#"{"user": 2}"#,
        ])
        .env("ZOOKEEPER_CONNECTION_STRING", &tq.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &tq.config.root)
        .env("EVENT_BRIDGE_KICK", "on")
        .env("EVENT_BRIDGE_KICK_URL", &server.url)
        .env("KICK_WAIT_MS", "60000")
        .env("CRON_SECRET", SECRET)
        .output()
        .await
        .expect("run event-bridge publish");
    let stderr = String::from_utf8_lossy(&published.stderr);
    assert!(published.status.success(), "publish failed: {stderr}");

    assert_eq!(server.requests(), 1, "one kick");
    assert!(
        tq.children("tasks").await.is_empty(),
        "the kicked drain ran the task"
    );
}

#[tokio::test]
async fn an_http_publish_with_kicks_on_starts_a_drain() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(kicks_to(&server.url)).await;
    let app = Arc::new(App::open(tq.config.clone(), "test").await.expect("app"));
    server.serve(draining(app.clone()));

    let body = br#"{"type": "user.signup", "payload": {"user": 3}}"#;
    let reply = process_events::intake::publish(&app, body, "/", Duration::from_secs(30)).await;

    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(server.requests(), 1, "one kick");
    assert!(
        tq.children("tasks").await.is_empty(),
        "the kicked drain ran the task"
    );
}

#[tokio::test]
async fn many_publishes_from_several_publishers_kick_once_while_the_node_stands() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(kicks_to(&server.url)).await;
    server.serve(None);

    let mut publishers = Vec::new();
    for p in 0..3 {
        let queue = consumer(&tq.config, &format!("publisher-{p}")).await;
        publishers.push(tokio::spawn(async move {
            for i in 0..20 {
                let envelope = Envelope::new("bulk", json!({"publisher": p, "i": i}));
                queue.publish(&envelope).await.expect("publish");
            }
        }));
    }
    for publisher in publishers {
        publisher.await.expect("publisher");
    }
    assert_eq!(server.requests(), 1, "60 publishes, one kick");
    assert_eq!(tq.children("tasks").await.len(), 60);

    // A drain has drained: it clears the node, and the next publish kicks again.
    event_bridge::kick::clear(&tq.queue).await.expect("clear");
    tq.queue
        .publish(&Envelope::new("bulk", json!({})))
        .await
        .expect("publish");
    assert_eq!(
        server.requests(),
        2,
        "a publish after the run began kicks again"
    );
}

#[tokio::test]
async fn a_lost_kick_is_taken_over_and_a_fresh_one_is_not() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(kicks_to(&server.url)).await;
    server.serve(None);
    let now = tq.now().await.now_ms();
    let path = tq.queue.layout().kick();
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());

    // A kick sent a second ago stands: no kick.
    let fresh = json!({"at_ms": now - 1_000}).to_string();
    tq.raw
        .create(&path, fresh.as_bytes(), &open)
        .await
        .expect("fresh node");
    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");
    assert_eq!(server.requests(), 0, "a fresh kick node stops the kick");

    // One sent a minute ago (past KICK_STALE_MS, 30 s) was lost: taken over, kicked again.
    let old = json!({"at_ms": now - 60_000}).to_string();
    tq.raw
        .set_data(&path, old.as_bytes(), None)
        .await
        .expect("old node");
    tq.queue
        .publish(&Envelope::new("b", json!({})))
        .await
        .expect("publish");
    assert_eq!(server.requests(), 1, "the lost kick was taken over");
    let at_ms = kick_node(&tq).await.expect("node")["at_ms"]
        .as_i64()
        .expect("at_ms");
    assert!(at_ms >= now, "the node was stamped again ({at_ms} < {now})");
}

#[tokio::test]
async fn with_kicks_off_no_node_is_written_and_no_request_sent() {
    let mut server = KickTrigger::bind(SECRET).await;
    let tq = TestQueue::with(|config| {
        config.cron_secret = Some(event_bridge::Secret::new(SECRET));
    })
    .await;
    server.serve(None);

    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");
    tq.queue
        .publish_raw(br#"{"raw": true}"#)
        .await
        .expect("publish raw");

    assert_eq!(kick_node(&tq).await, None);
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn a_kick_that_fails_never_fails_the_publish() {
    // Nothing listens at this trigger: the kick fails, the publish stands, the node stays for
    // the cron tick's run or a later publisher once stale.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let tq = TestQueue::with(kicks_to(&format!("http://127.0.0.1:{port}/"))).await;

    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");

    assert_eq!(tq.children("tasks").await.len(), 1);
    assert!(kick_node(&tq).await.is_some(), "the node is left standing");
}

#[tokio::test]
async fn the_vercel_build_served_locally_drains_on_kicks_from_the_library_and_its_own_publish() {
    let port = harness::vercel::free_port();
    let url = format!("http://127.0.0.1:{port}/api/process_events_vercel?drain=1");
    let tq = TestQueue::with(kicks_to(&url)).await;
    let env = [
        ("CRON_SECRET", SECRET),
        ("PUBLISH_SECRET", "publish-secret"),
        ("EVENT_BRIDGE_KICK", "on"),
        ("EVENT_BRIDGE_KICK_URL", url.as_str()),
        ("KICK_WAIT_MS", "60000"),
    ];
    let server =
        harness::vercel::VercelBinary::start_on("process_events_vercel", port, &tq.config, &env)
            .await;

    // The library's publish kicks the Vercel trigger, and returns once its drain answered.
    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");
    assert!(
        tq.children("tasks").await.is_empty(),
        "the kicked drain ran the task:\n{}",
        server.log()
    );
    assert_eq!(kick_node(&tq).await, None, "the run cleared the kick node");
    // The invocation lingered and ran several times: one summary event all the same.
    let summaries = server.log().matches("process_events finished").count();
    assert_eq!(
        summaries,
        1,
        "one summary a kicked invocation:\n{}",
        server.log()
    );

    // The Vercel build's own HTTP publish kicks it too.
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let body = r#"{"type": "b", "payload": {}}"#;
    let request = format!(
        "POST /api/process_events_vercel HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer \
         publish-secret\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: \
         close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.expect("reply");
    assert!(reply.starts_with("HTTP/1.1 202"), "{reply}");
    assert!(
        tq.children("tasks").await.is_empty(),
        "the kicked drain ran the task:\n{}",
        server.log()
    );
}

/// A kick is sent even when its connection outlasts the publisher's wait (`KICK_WAIT_MS`): the
/// publisher stops waiting, not the request. The trigger's accept queue is full when the
/// publish kicks, so the kick cannot connect before the publish has returned, however fast the
/// machine; once the trigger serves, the kick connects, and its drain runs the task.
#[tokio::test]
async fn a_kick_whose_connect_outlasts_the_wait_still_starts_a_drain() {
    let mut server = KickTrigger::bind_backed_up(SECRET).await;
    let url = server.url.clone();
    let tq = TestQueue::with(|config| {
        kicks_to(&url)(config);
        config.kick.as_mut().expect("kicks on").wait = Duration::from_millis(10);
    })
    .await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");

    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");
    assert_eq!(server.requests(), 0, "the kick is not through yet");
    server.serve(draining(Arc::new(app)));

    let drained = || async { tq.children("tasks").await.is_empty() };
    harness::wait::eventually("the kicked drain ran the task", drained).await;
    assert_eq!(server.requests(), 1, "one kick");
}

/// A kicked drain lingers (`KICK_LINGER_MS`) before it clears the kick node: a task published
/// meanwhile kicks nothing (the node stands) and runs in the same invocation. The linger and
/// the drain's time are ten minutes, longer than any wait here, so the drain is still lingering
/// when the test looks, however slow the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_drain_runs_what_lands_meanwhile_without_another_kick() {
    let ten_minutes = Duration::from_secs(600);
    let mut server = KickTrigger::bind(SECRET).await;
    let url = server.url.clone();
    let tq = TestQueue::with(|config| {
        kicks_to(&url)(config);
        let kick = config.kick.as_mut().expect("kicks on");
        kick.linger = ten_minutes;
        // The publisher does not wait for the drain, which answers only when it ends.
        kick.wait = Duration::from_millis(10);
    })
    .await;
    let app = Arc::new(App::open(tq.config.clone(), "test").await.expect("app"));
    server.serve(Some(Arc::new(move || {
        let app = app.clone();
        Box::pin(async move {
            let drain = Trigger::Drain { max_tasks: None };
            let _ = process_events::run(&app, drain, ten_minutes).await;
        })
    })));
    let drained = || async { tq.children("tasks").await.is_empty() };

    tq.queue
        .publish(&Envelope::new("a", json!({})))
        .await
        .expect("publish");
    harness::wait::eventually("the kicked drain ran the first task", drained).await;
    tq.queue
        .publish(&Envelope::new("b", json!({})))
        .await
        .expect("publish");
    assert_eq!(
        server.requests(),
        1,
        "the node stands while the drain lingers"
    );
    harness::wait::eventually("the lingering drain ran the second task", drained).await;

    assert_eq!(server.requests(), 1, "one invocation ran both");
    assert!(kick_node(&tq).await.is_some(), "the drain lingers still");
}
