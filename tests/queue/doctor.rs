//! `event-bridge doctor`, run as a user would, against the test's chroot: each failure it names
//! comes with its fix, and a sound deployment passes every check.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use harness::{TestQueue, binary};

/// What one run of `doctor` printed and how it exited.
struct Doctor {
    code: Option<i32>,
    text: String,
    stderr: String,
    report: Value,
}

impl Doctor {
    /// The check named `check` (and `subject`, when given), from the JSON report.
    fn check(&self, check: &str, subject: Option<&str>) -> &Value {
        (self.report["checks"].as_array().expect("checks"))
            .iter()
            .find(|c| c["check"] == check && subject.is_none_or(|s| c["subject"] == s))
            .unwrap_or_else(|| panic!("no {check} {subject:?} check in {:#}", self.report))
    }

    /// The text line of check `label` (`root`, `zookeeper 127.0.0.1:2181`).
    fn line(&self, label: &str) -> &str {
        (self.text.lines())
            .find(|l| l[6..].starts_with(&format!("{label} ")))
            .unwrap_or_else(|| panic!("no line for {label} in:\n{}", self.text))
    }
}

/// Runs `doctor` (text, then `--json`) with only `env` set besides the test's connection
/// string and root, which `env` may replace.
async fn doctor(t: &TestQueue, env: &[(&str, &str)], args: &[&str]) -> Doctor {
    let run = |json: bool| {
        let mut command = Command::new(binary("event-bridge"));
        command
            .arg("doctor")
            .args(args)
            .args(json.then_some("--json"))
            .env_clear()
            .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
            .env("EVENT_BRIDGE_ROOT", &t.config.root);
        command.envs(env.iter().copied());
        command.output()
    };
    let (text, json) = (run(false).await.unwrap(), run(true).await.unwrap());
    assert_eq!(
        text.status.code(),
        json.status.code(),
        "text and JSON agree"
    );
    Doctor {
        code: json.status.code(),
        text: String::from_utf8(text.stdout).unwrap(),
        stderr: String::from_utf8(json.stderr).unwrap(),
        report: serde_json::from_slice(&json.stdout).expect("--json prints JSON"),
    }
}

/// Asserts that check `check` (about `subject`) failed, with `detail` and `fix` in its JSON and
/// on its text line `label`.
fn failed(
    d: &Doctor,
    (check, subject): (&str, Option<&str>),
    label: &str,
    detail: &str,
    fix: &str,
) {
    let found = d.check(check, subject);
    assert_eq!(found["status"], "fail", "{found:#}");
    assert!(
        found["detail"].as_str().unwrap().contains(detail),
        "{found:#}"
    );
    assert!(found["fix"].as_str().unwrap().contains(fix), "{found:#}");
    let line = d.line(label);
    assert!(line.starts_with("fail  "), "{line}");
    assert!(
        line.contains(detail) && line.contains(&format!("; fix: {fix}")),
        "{line}"
    );
    assert_eq!(
        d.code,
        Some(1),
        "a failed check fails the command: {}",
        d.stderr
    );
    assert!(d.stderr.contains("checks failed"), "{}", d.stderr);
}

/// A port on loopback that nothing listens on.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// An HTTP server on loopback that answers every request 405, as a webhook that takes only POST
/// does; its URL.
async fn webhook() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let reply =
                "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    url
}

#[tokio::test]
async fn a_wrong_root_fails_naming_init_and_the_variable() {
    let t = TestQueue::new().await;
    let d = doctor(&t, &[("EVENT_BRIDGE_ROOT", "/event-brigde")], &[]).await;
    failed(
        &d,
        ("root", None),
        "root",
        "/event-brigde does not exist",
        "set EVENT_BRIDGE_ROOT to the root producers publish under, or run `event-bridge init`",
    );
    assert_eq!(
        d.check("acl", None)["status"],
        "skip",
        "nothing to judge under it"
    );
    assert_eq!(
        t.raw.check_stat("/event-brigde").await.unwrap(),
        None,
        "doctor creates nothing"
    );
}

#[tokio::test]
async fn a_dead_zookeeper_host_fails_by_its_address_and_the_others_still_check() {
    let t = TestQueue::new().await;
    let dead = format!("127.0.0.1:{}", closed_port().await);
    let (hosts, chroot) = t.config.zookeeper.split_once('/').unwrap();
    let connection = format!("{hosts},{dead}/{chroot}");
    let d = doctor(&t, &[("ZOOKEEPER_CONNECTION_STRING", &connection)], &[]).await;
    failed(
        &d,
        ("zookeeper", Some(&dead)),
        &format!("zookeeper {dead}"),
        "no session",
        &format!("start ZooKeeper on {dead}"),
    );
    assert!(d.line(&format!("zookeeper {dead}")).contains(&format!(
        "or take {dead} out of ZOOKEEPER_CONNECTION_STRING"
    )));
    assert_eq!(d.check("zookeeper", Some(hosts))["status"], "pass");
    assert_eq!(
        d.check("root", None)["status"],
        "pass",
        "the live server answers the rest"
    );
}

#[tokio::test]
async fn a_bad_route_fails_with_the_parsers_message_and_where_to_correct_it() {
    let t = TestQueue::new().await;
    let routes = r#"{"routes": {"user.signup": {"sink": "kafka"}}}"#;
    let d = doctor(&t, &[("ROUTES", routes)], &[]).await;
    failed(
        &d,
        ("routes", None),
        "routes",
        r#"route "user.signup": unknown variant `kafka`"#,
        "correct the table in ROUTES",
    );
}

#[tokio::test]
async fn a_missing_secret_fails_naming_the_variable_and_the_routes_that_sign_with_it() {
    let t = TestQueue::new().await;
    let url = webhook().await;
    let routes = format!(
        r#"{{"routes": {{"user.signup": {{"sink": "http", "url": "{url}", "secret_env": "SIGNUP_HOOK_SECRET"}}}}}}"#
    );
    let d = doctor(&t, &[("ROUTES", &routes)], &["--platform", "lambda"]).await;
    failed(
        &d,
        ("secret", Some("SIGNUP_HOOK_SECRET")),
        "secret SIGNUP_HOOK_SECRET",
        "route user.signup signs its webhooks with it",
        "set SIGNUP_HOOK_SECRET to the routes' signing secret",
    );
    assert_eq!(
        d.check("routes", None)["status"],
        "pass",
        "the table itself is sound"
    );

    // On Vercel the HTTP triggers need CRON_SECRET too.
    let d = doctor(&t, &[], &["--platform", "vercel"]).await;
    failed(
        &d,
        ("secret", Some("CRON_SECRET")),
        "secret CRON_SECRET",
        "Vercel's cron requests and drains are refused",
        "set CRON_SECRET in the project's environment",
    );
}

#[tokio::test]
async fn credentials_the_acls_shut_out_fail_naming_zookeeper_auth() {
    let t =
        TestQueue::with(|c| c.zookeeper_auth = Some(event_bridge::Secret::new("bridge:s3cret")))
            .await;
    let d = doctor(&t, &[], &["--platform", "worker"]).await;
    failed(
        &d,
        ("acl", None),
        "acl",
        "/event-bridge does not grant anyone (no ZOOKEEPER_AUTH) read",
        "set ZOOKEEPER_AUTH to user:password of the user that created it",
    );
    let d = doctor(
        &t,
        &[("ZOOKEEPER_AUTH", "bridge:guess")],
        &["--platform", "worker"],
    )
    .await;
    failed(
        &d,
        ("acl", None),
        "acl",
        "/event-bridge does not grant digest user bridge read",
        "set ZOOKEEPER_AUTH to the password of the user that created it",
    );
    let d = doctor(
        &t,
        &[("ZOOKEEPER_AUTH", "bridge:s3cret")],
        &["--platform", "worker"],
    )
    .await;
    assert_eq!(d.check("acl", None)["status"], "pass", "{:#}", d.report);
}

/// A root anyone may read but only its owner change: its ACL is read, and judged entry by entry.
#[tokio::test]
async fn a_root_others_may_only_read_fails_naming_what_is_missing_and_its_owner() {
    let t = TestQueue::new().await;
    let owner = zookeeper_client::Client::connector()
        .with_auth("digest", b"owner:pw")
        .connect(&t.config.zookeeper)
        .await
        .unwrap();
    let acls = [
        zookeeper_client::Acl::new(
            zookeeper_client::Permission::READ,
            zookeeper_client::AuthId::anyone(),
        ),
        zookeeper_client::Acl::new(
            zookeeper_client::Permission::ALL,
            zookeeper_client::AuthId::authed(),
        ),
    ];
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(&acls));
    for path in ["/shared-queue", "/shared-queue/tasks"] {
        owner.create(path, b"", &options).await.unwrap();
    }
    let env = [("EVENT_BRIDGE_ROOT", "/shared-queue")];
    let d = doctor(&t, &env, &["--platform", "worker"]).await;
    failed(
        &d,
        ("acl", None),
        "acl",
        "/shared-queue does not grant anyone (no ZOOKEEPER_AUTH) write, create, delete",
        "set ZOOKEEPER_AUTH to user:password of owner",
    );
    let env = [
        ("EVENT_BRIDGE_ROOT", "/shared-queue"),
        ("ZOOKEEPER_AUTH", "owner:pw"),
    ];
    let d = doctor(&t, &env, &["--platform", "worker"]).await;
    assert_eq!(d.check("acl", None)["status"], "pass", "{:#}", d.report);
}

#[tokio::test]
async fn a_queue_no_reaper_ran_on_fails_the_reaper_check() {
    let t = TestQueue::new().await;
    let d = doctor(&t, &[], &["--platform", "worker"]).await;
    failed(
        &d,
        ("reaper", None),
        "reaper",
        "no reaper run recorded",
        "schedule reap_leases every 5m",
    );
}

#[tokio::test]
async fn a_sound_deployment_passes_every_check_and_lists_the_holders_versions() {
    let t = TestQueue::new().await;
    let names = t.publish(2).await;
    let now = t.now().await;
    let event_bridge::queue::TaskOutcome::Claimed(_held) =
        t.queue.claim(&names[0], &now).await.unwrap()
    else {
        panic!("claimed")
    };
    event_bridge::reap::reap(&t.queue).await.unwrap();
    let url = webhook().await;
    let routes = format!(
        r#"{{"routes": {{"user.signup": {{"sink": "http", "url": "{url}", "secret_env": "HOOK_SECRET"}}}}, "default": {{"sink": "log"}}}}"#
    );
    let env = [("ROUTES", routes.as_str()), ("HOOK_SECRET", "s3cret")];
    let d = doctor(&t, &env, &["--platform", "worker"]).await;
    assert_eq!(d.code, Some(0), "{}\n{}", d.text, d.stderr);
    assert_eq!(d.report["ok"], true);
    let checks = d.report["checks"].as_array().unwrap();
    let names: Vec<&str> = checks
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "config",
            "zookeeper",
            "root",
            "acl",
            "clock",
            "reaper",
            "leases",
            "routes",
            "sink",
            "secret"
        ]
    );
    for check in checks {
        assert_eq!(check["status"], "pass", "{check:#}");
    }
    assert!(
        d.text.lines().all(|l| l.starts_with("pass  ")),
        "{}",
        d.text
    );
    let version = event_bridge::lease::VERSION;
    let leases = d.check("leases", None)["detail"].as_str().unwrap();
    assert!(
        leases.contains(&format!(
            "1 held: 1 by version {version} ({})",
            t.queue.consumer_id()
        )),
        "{leases}"
    );
    let sink = d.check("sink", Some("user.signup"))["detail"]
        .as_str()
        .unwrap();
    assert!(sink.contains("answered HEAD with 405"), "{sink}");
}
