//! Whom the dashboard answers: only requests for its own address (the listen address, and
//! `localhost` on loopback) or a `--public-name`; a page for another host (a DNS-rebinding
//! page, whose name now points at us) gets 421 and reads or changes nothing. And no answer may
//! be framed by another site.

use harness::TestQueue;

use crate::http::{self, Answer};
use crate::scene;
use crate::serve::Serve;

const EVIL: [(&str, &str); 2] = [("Host", "evil.example"), ("Origin", "http://evil.example")];

fn misdirected(answer: &Answer, secret: &str) {
    assert_eq!(answer.status, 421, "{}", answer.body);
    assert!(!answer.body.contains(secret), "{}", answer.body);
}

fn csrf_of(page: &str) -> String {
    let start = "name=\"csrf\" value=\"";
    let from = page.find(start).expect("a csrf field") + start.len();
    page[from..from + page[from..].find('"').unwrap()].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_host_cannot_purge_an_open_admin_dashboard() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let env = [("ALLOW_UNAUTHENTICATED", "1")];
    let serve = Serve::start(&t, &["--admin"], &env).await;
    let own = http::get(&serve.address, "/dead").unwrap();
    let csrf = csrf_of(&own.body);

    let read = http::get_with(&serve.address, "/dead", &EVIL).unwrap();
    misdirected(&read, &csrf);
    let form = format!(
        "csrf={csrf}&action=purge&confirmed=yes&name={}",
        scene.dead[0]
    );
    let purge = http::post(&serve.address, "/dead/act", &EVIL, &form).unwrap();
    misdirected(&purge, &scene.dead[0]);
    assert_eq!(t.children("dead").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_host_reads_nothing_from_a_read_only_dashboard() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &[], &[]).await;
    let letter = format!("/dead/{}", scene.dead[0]);
    for path in ["/", "/dead", letter.as_str(), "/metrics"] {
        let answer = http::get_with(&serve.address, path, &EVIL).unwrap();
        misdirected(&answer, &scene.dead[0]);
        assert!(
            !answer.body.contains("invoice.send"),
            "{path}: {}",
            answer.body
        );
    }
    // Nor with the name in the request line instead (absolute form) and our address as Host.
    let absolute = format!("http://evil.example{letter}");
    let answer = http::get(&serve.address, &absolute).unwrap();
    misdirected(&answer, "invoice.send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listen_address_localhost_and_the_public_names_are_served() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let args = [
        "--admin",
        "--public-name",
        "Dash.Example.com",
        "--public-name",
        "proxy.example:8443",
    ];
    let serve = Serve::start(&t, &args, &[("ALLOW_UNAUTHENTICATED", "1")]).await;
    let port = serve.address.rsplit_once(':').unwrap().1;
    let localhost = format!("localhost:{port}");
    let status = |host: &str| {
        let answer = http::get_with(&serve.address, "/dead", &[("Host", host)]).unwrap();
        answer.status
    };
    for host in [
        serve.address.as_str(),
        localhost.as_str(),
        "dash.example.com",
        "DASH.example.COM",
        "proxy.example:8443",
    ] {
        assert_eq!(status(host), 200, "{host}");
    }
    let wrong_port = format!("127.0.0.1:{}", port.parse::<u16>().unwrap() ^ 1);
    for host in [
        "dash.example.com:8443",
        "proxy.example",
        "evil.example",
        "127.0.0.1",
        wrong_port.as_str(),
        "",
    ] {
        assert_eq!(status(host), 421, "{host:?}");
    }
    // An admin behind the proxy that serves the public name may still change things.
    let proxied = [
        ("Host", "dash.example.com"),
        ("Origin", "https://dash.example.com"),
    ];
    let page = http::get_with(&serve.address, "/dead", &proxied).unwrap();
    let form = format!(
        "csrf={}&action=purge&confirmed=yes&name={}",
        csrf_of(&page.body),
        scene.dead[0]
    );
    let purge = http::post(&serve.address, "/dead/act", &proxied, &form).unwrap();
    assert_eq!(purge.status, 200, "{}", purge.body);
    assert_eq!(t.children("dead").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_may_be_framed() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &["--admin"], &[("DASHBOARD_TOKEN", "framing-token")]).await;
    let letter = format!("/dead/{}", scene.dead[0]);
    let mut answers = Vec::new();
    for path in [
        "/",
        "/dead",
        letter.as_str(),
        "/dead/task-0000099999",
        "/metrics",
        "/assets/dashboard.css",
        "/login",
        "/no-such-page",
        "/task",
        "/task?key=task-0000099999",
    ] {
        answers.push((path, http::get(&serve.address, path).unwrap()));
    }
    answers.push(("421", http::get_with(&serve.address, "/", &EVIL).unwrap()));
    let refused = http::post(&serve.address, "/dead/act", &[], "action=purge").unwrap();
    answers.push(("403", refused));
    let statuses: Vec<u16> = answers.iter().map(|(_, a)| a.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 404, 200, 200, 200, 404, 200, 404, 421, 403]
    );
    for (what, answer) in &answers {
        assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{what}");
        let policy = answer.header("content-security-policy").unwrap_or_default();
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{what}: {policy:?}"
        );
    }
}
