//! What `process_events`' HTTP entries answer by method and in what order they look at a
//! request: a method other than GET and POST is 405 with `Allow` (HEAD included: it would run
//! a drain otherwise), and Vercel checks the secret before it says anything about the body.

use process_events::App;
use serde_json::{Value, json};

use crate::requests::{VercelServer, url_request};
use harness::TestQueue;

const PATH: &str = "/api/process_events_vercel";

/// The Vercel binary with both secrets and a small body limit.
async fn vercel(tq: &TestQueue) -> VercelServer {
    let env = [
        ("CRON_SECRET", "cron"),
        ("PUBLISH_SECRET", "pub"),
        ("PUBLISH_MAX_BYTES", "2000"),
        ("EVENT_BRIDGE_HANDLER", "noop"),
    ];
    VercelServer::start("process_events_vercel", &tq.config, &env).await
}

#[tokio::test]
async fn vercel_answers_other_methods_405_with_allow_and_runs_nothing_for_head() {
    let tq = TestQueue::new().await;
    tq.publish(2).await;
    let server = vercel(&tq).await;
    for method in ["DELETE", "PUT", "PATCH", "HEAD"] {
        let drain = format!("{PATH}?drain=1");
        let answer = server.send(method, &drain, Some("Bearer cron"), b"").await;
        assert_eq!(answer.status, 405, "{method}: {answer:?}");
        assert_eq!(answer.header("allow"), Some("GET, POST"), "{method}");
        if method != "HEAD" {
            let body: Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(body["error"], "MethodNotAllowed", "{body}");
            assert!(body["message"].as_str().unwrap().contains(method), "{body}");
        }
    }
    assert_eq!(tq.children("tasks").await.len(), 2, "nothing ran");
}

#[tokio::test]
async fn a_function_url_answers_other_methods_405_and_runs_nothing_for_head() {
    let tq = TestQueue::new().await;
    tq.publish(2).await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    for method in ["DELETE", "HEAD"] {
        let (status, headers, body) = url_request(&app, method, "drain=1", "").await;
        assert_eq!(status, 405, "{method}: {body}");
        assert_eq!(headers["allow"], "GET, POST", "{method}: {headers}");
        assert_eq!(body["error"], "MethodNotAllowed", "{body}");
    }
    assert_eq!(tq.children("tasks").await.len(), 2, "nothing ran");
}

/// An unauthenticated caller learns nothing about its body: 401 whatever the body is, and 413
/// or 400 only once the secret matched.
#[tokio::test]
async fn vercel_checks_the_secret_before_the_body() {
    let tq = TestQueue::new().await;
    let server = vercel(&tq).await;
    let large = json!({"type": "a", "payload": "x".repeat(3_000)}).to_string();
    let bad = "{\"type\": \"a\", \"payload\": 1}\nnot json";
    for auth in [None, Some("Bearer wrong"), Some("Bearer cron")] {
        for body in [large.as_str(), bad] {
            let answer = server.send("POST", PATH, auth, body.as_bytes()).await;
            assert_eq!(answer.status, 401, "{auth:?}: {answer:?}");
        }
    }
    let drain = format!("{PATH}?drain=1");
    let answer = server.send("POST", &drain, None, large.as_bytes()).await;
    assert_eq!(answer.status, 401, "a run's secret first: {answer:?}");

    let answer = server
        .send("POST", PATH, Some("Bearer pub"), large.as_bytes())
        .await;
    assert_eq!(answer.status, 413, "{answer:?}");
    let answer = server
        .send("POST", PATH, Some("Bearer pub"), bad.as_bytes())
        .await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(tq.children("tasks").await.is_empty(), "nothing published");
}

/// The reaper's Vercel entry runs on GET and POST (Vercel's cron sends GET) and answers any
/// other method 405, even with the secret: a HEAD ran a reap.
#[tokio::test]
async fn the_reapers_vercel_entry_answers_other_methods_405_and_reaps_nothing() {
    let tq = TestQueue::new().await;
    let server =
        VercelServer::start("reap_leases_vercel", &tq.config, &[("CRON_SECRET", "cron")]).await;
    let path = "/api/reap_leases_vercel";
    let clock = format!("{}/clock", tq.config.root);
    let version = || async { tq.raw.get_data(&clock).await.expect("clock").1.version };
    let before = version().await;
    for method in ["HEAD", "DELETE", "PUT"] {
        let answer = server.send(method, path, Some("Bearer cron"), b"").await;
        assert_eq!(answer.status, 405, "{method}: {answer:?}");
        assert_eq!(answer.header("allow"), Some("GET, POST"), "{method}");
    }
    assert_eq!(version().await, before, "a reap read ZooKeeper's clock");
    let answer = server.send("GET", path, Some("Bearer cron"), b"").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(version().await > before, "the GET reaped");
}
