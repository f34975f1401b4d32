//! Kicks on Lambda (`EVENT_BRIDGE_KICK_URL=lambda:<function>`): a publish invokes process_events
//! asynchronously through Lambda's Invoke API, SigV4-signed with the standard AWS credentials.
//!
//! The Invoke API is `harness::lambda_invoke` (botocore checks each signature, independently of
//! our signer, and answers a signed `Event` invocation `202`); the invocation it took is then
//! run as Lambda runs it: the built Lambda binary against a Runtime API on loopback
//! (`harness::lambda_api`) with that payload as its event.

use std::time::Duration;

use serde_json::{Value, json};

use harness::lambda_api::{RuntimeApi, function_command};
use harness::lambda_invoke::InvokeApi;
use harness::{TestQueue, binary};

const FUNCTION: &str = "event-bridge-ProcessEvents";

/// `event-bridge publish` of one task, in `env` besides the queue's; its stderr.
async fn publish(tq: &TestQueue, env: &[(&'static str, String)], user: u32) -> String {
    let out = tokio::process::Command::new(binary("event-bridge"))
        .args(["publish", "--type", "user.signup", "--payload"])
        .arg(json!({ "user": user }).to_string())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ZOOKEEPER_CONNECTION_STRING", &tq.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &tq.config.root)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .await
        .expect("run event-bridge publish");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "publish failed: {stderr}");
    stderr
}

async fn kick_node_stands(tq: &TestQueue) -> bool {
    match tq.raw.check_stat(&tq.queue.layout().kick()).await {
        Ok(found) => found.is_some(),
        Err(e) => panic!("read kick node: {e}"),
    }
}

/// Runs the built Lambda binary on one invocation of `event`, as Lambda runs an asynchronous
/// invocation; its report.
async fn run_invocation(tq: &TestQueue, env: &[(&'static str, String)], event: Value) -> Value {
    let mut api = RuntimeApi::start(vec![("kick-1", event)]).await.unwrap();
    let mut function = function_command("process_events", &api, &tq.config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the Lambda binary");
    let answered = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(request) = api.requests.recv().await {
            if request.is_post() {
                return request;
            }
        }
        panic!("the Runtime API closed");
    })
    .await
    .expect("an answer within 60 s (a hang guard)");
    let _ = function.start_kill();
    assert!(answered.path.ends_with("/response"), "{answered:?}");
    serde_json::from_slice(&answered.body).expect("a JSON report")
}

/// A publish kicks: one signed `Event` invocation of the function with a drain, and the
/// publisher does not wait for it. A second publish while the kick node stands does not kick.
/// The invocation, run, drains both tasks and clears the node, so the next publish kicks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_invokes_process_events_asynchronously_and_its_drain_runs_the_tasks() {
    let tq = TestQueue::new().await;
    let lambda = InvokeApi::start().await;
    let env = lambda.publisher_env(FUNCTION);

    publish(&tq, &env, 1).await;
    let seen = lambda.wait_for(1).await;
    let kick = &seen[0];
    assert_eq!(kick["function"], FUNCTION, "{kick}");
    assert_eq!(kick["invocation_type"], "Event", "{kick}");
    assert_eq!(kick["payload"], json!({"mode": "drain"}), "{kick}");
    assert_eq!(kick["signed"], true, "botocore's signature differs: {kick}");

    publish(&tq, &env, 2).await;
    assert_eq!(
        lambda.requests().len(),
        1,
        "the kick node stands: no second kick"
    );
    assert_eq!(tq.children("tasks").await.len(), 2);

    let report = run_invocation(&tq, &env, kick["payload"].clone()).await;
    assert_eq!(report["completed"], 2, "{report}");
    assert!(tq.children("tasks").await.is_empty());
    assert!(
        !kick_node_stands(&tq).await,
        "the drain cleared the kick node"
    );

    publish(&tq, &env, 3).await;
    assert_eq!(lambda.wait_for(2).await.len(), 2, "a kick after the drain");
}

/// A kick Lambda refuses (here a signature made with the wrong secret key, which botocore
/// finds) is logged with Lambda's answer and never fails the publish; the node stays for the
/// cron tick's run, or a later publisher once stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_invocation_never_fails_the_publish() {
    let tq = TestQueue::new().await;
    let lambda = InvokeApi::start().await;
    let mut env = lambda.publisher_env(FUNCTION);
    for (name, value) in &mut env {
        if *name == "AWS_SECRET_ACCESS_KEY" {
            *value = "not-the-key".into();
        }
    }

    let stderr = publish(&tq, &env, 1).await;

    let seen = lambda.wait_for(1).await;
    assert_eq!(seen[0]["signed"], false, "{seen:?}");
    assert!(stderr.contains("Lambda answered 403"), "{stderr}");
    assert_eq!(tq.children("tasks").await.len(), 1);
    assert!(kick_node_stands(&tq).await, "the node is left standing");
}
