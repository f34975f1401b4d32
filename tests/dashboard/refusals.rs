//! What the dashboard refuses, asked over plain HTTP: changes on a read-only dashboard, changes
//! without signing in, without the form's CSRF token or from another site, more wrong tokens
//! than the limit (sent at once), names that cannot be dead letters, and `--admin` with no
//! token configured. Each refusal leaves the dead letters where they are.

use std::process::{Command, Stdio};

use harness::{TestQueue, binary};

use crate::http::{self, Answer};
use crate::scene;
use crate::serve::Serve;

const TOKEN: &str = "dashboard-test-token-7f3a";

async fn dead_letters(t: &TestQueue) -> usize {
    t.children("dead").await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_without_a_token_or_the_opt_out_is_refused_at_start() {
    let out = Command::new(binary("event-bridge"))
        .args(["serve", "--admin", "--listen", "127.0.0.1:0"])
        .env_remove("DASHBOARD_TOKEN")
        .env_remove("ALLOW_UNAUTHENTICATED")
        .env("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("DASHBOARD_TOKEN") && stderr.contains("ALLOW_UNAUTHENTICATED"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_dashboard_has_no_way_to_change_anything() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &[], &[]).await;
    let page = http::get(&serve.address, "/dead").unwrap();
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&scene.dead[0]), "{}", page.body);
    assert!(!page.body.contains("checkbox") && !page.body.contains("Redrive"));
    let form = format!("action=redrive&confirmed=yes&name={}", scene.dead[0]);
    for path in ["/dead/act", "/dead/confirm", "/login"] {
        let answer = http::post(&serve.address, path, &[], &form).unwrap();
        assert!(answer.status >= 400, "{path}: {}", answer.status);
    }
    assert_eq!(dead_letters(&t).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_need_a_sign_in_the_forms_csrf_token_and_our_origin() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &["--admin"], &[("DASHBOARD_TOKEN", TOKEN)]).await;
    let form = |csrf: &str| {
        format!(
            "csrf={csrf}&action=redrive&confirmed=yes&name={}",
            scene.dead[0]
        )
    };
    let refused = |answer: Answer, why: &str| {
        assert_eq!(answer.status, 403, "{why}: {}", answer.body);
        assert!(answer.body.contains(why), "{why}: {}", answer.body);
    };
    refused(
        http::post(&serve.address, "/dead/act", &[], &form("x")).unwrap(),
        "sign in first",
    );
    let wrong = http::post(&serve.address, "/login", &[], "token=guess").unwrap();
    refused(wrong, "not the token");

    let signed = http::post(&serve.address, "/login", &[], &format!("token={TOKEN}")).unwrap();
    assert_eq!(signed.status, 303);
    let set_cookie = signed
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"));
    assert!(!set_cookie.contains(TOKEN));
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let page = send_get(&serve.address, "/dead", &cookie);
    assert!(!page.contains(TOKEN), "the token is in a page");
    let csrf = between(&page, "name=\"csrf\" value=\"", "\"").expect("a csrf field");

    let with_cookie = [("Cookie", cookie.as_str())];
    let no_csrf = http::post(&serve.address, "/dead/act", &with_cookie, &form("")).unwrap();
    refused(no_csrf, "CSRF token");
    let foreign = [
        ("Cookie", cookie.as_str()),
        ("Origin", "http://evil.example"),
    ];
    let cross = http::post(&serve.address, "/dead/act", &foreign, &form(&csrf)).unwrap();
    refused(cross, "another site");
    assert_eq!(dead_letters(&t).await, 2);

    let own_origin = format!("http://{}", serve.address);
    let own = [("Cookie", cookie.as_str()), ("Origin", own_origin.as_str())];
    let done = http::post(&serve.address, "/dead/act", &own, &form(&csrf)).unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(dead_letters(&t).await, 1);
}

/// The dashboard's limit on wrong tokens a minute, across every connection.
const WRONG_TOKENS_A_MINUTE: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_sent_at_once_beyond_the_limit_are_not_checked() {
    let t = TestQueue::new().await;
    let serve = Serve::start(&t, &["--admin"], &[("DASHBOARD_TOKEN", TOKEN)]).await;
    // All sent before the first answer comes back (each wrong one waits a second): a limit
    // that only delays one attempt after another lets every one of them be checked.
    let burst = 3 * WRONG_TOKENS_A_MINUTE;
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let sent: Vec<_> = (0..burst)
            .map(|i| {
                let address = serve.address.as_str();
                s.spawn(move || {
                    let form = format!("token=guess-{i}");
                    http::post(address, "/login", &[], &form).unwrap().status
                })
            })
            .collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let count = |status: u16| statuses.iter().filter(|s| **s == status).count();
    assert_eq!(
        (count(403), count(429)),
        (WRONG_TOKENS_A_MINUTE, burst - WRONG_TOKENS_A_MINUTE),
        "{statuses:?}"
    );
    // Within the minute even the right token is not looked at.
    let right = http::post(&serve.address, "/login", &[], &format!("token={TOKEN}")).unwrap();
    assert_eq!(right.status, 429, "{}", right.body);
    assert!(right.header("retry-after").is_some());
    assert!(right.header("set-cookie").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_cannot_be_dead_letters_are_not_found() {
    let t = TestQueue::new().await;
    scene::build(&t).await;
    let serve = Serve::start(&t, &["--admin"], &[("ALLOW_UNAUTHENTICATED", "1")]).await;
    for path in [
        "/dead/%00",
        "/dead/..%2Ftasks",
        "/dead/..",
        "/dead/task-0000000001~..%2F..",
        "/dead/task-1",
    ] {
        let answer = http::get(&serve.address, path).unwrap();
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }
    let csrf = {
        let page = http::get(&serve.address, "/dead").unwrap().body;
        between(&page, "name=\"csrf\" value=\"", "\"").expect("a csrf field")
    };
    for name in ["%00", "..%2Ftasks"] {
        for action in ["redrive", "purge"] {
            let form = format!("csrf={csrf}&action={action}&confirmed=yes&name={name}");
            for path in ["/dead/confirm", "/dead/act"] {
                let answer = http::post(&serve.address, path, &[], &form).unwrap();
                assert_eq!(answer.status, 400, "{path} {form}: {}", answer.body);
            }
        }
    }
    assert_eq!(dead_letters(&t).await, 2);
}

fn send_get(address: &str, path: &str, cookie: &str) -> String {
    let answer = http::get_with(address, path, &[("Cookie", cookie)]).unwrap();
    assert_eq!(answer.status, 200);
    answer.body
}

fn between(text: &str, start: &str, end: &str) -> Option<String> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(text[from..from + len].to_string())
}
