//! The dashboard in a real headless Chromium (Debian's `chromium`, driven through Debian's
//! `chromedriver` over WebDriver): the figures of a queue the test built, a dead letter
//! redriven from the page that then shows up as pending, and no redrive button for a viewer
//! of a read-only dashboard. Leaves a screenshot of the main page in `target/dashboard.png`
//! (and at `$DASHBOARD_SCREENSHOT` when set: `make screenshot` writes the README's).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use harness::{TestQueue, workspace_root};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

use crate::scene;
use crate::serve::{Serve, free_port};

const TOKEN: &str = "browser-test-token-91c2";

/// `chromedriver` on a free port, ended when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    async fn start() -> Driver {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (make tools installs Debian's chromium-driver)");
        let driver = Driver { child, port };
        let listening = || async { std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() };
        match harness::poll(Duration::from_secs(10), listening).await {
            Some(()) => driver,
            None => panic!("chromedriver did not start on port {port}"),
        }
    }

    /// A headless Chromium session.
    async fn browser(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1100"]
            }),
        );
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The element `css` names, waiting for it up to 10 s: a click that submits a form returns
/// before the next page has loaded.
/// A look that lands while the page navigates is aborted by the browser: looked again.
async fn wait_for(browser: &Client, css: &str) -> Element {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let found = browser
            .wait()
            .at_most(left)
            .for_element(Locator::Css(css))
            .await;
        match found {
            Ok(element) => return element,
            Err(e) if !left.is_zero() && e.to_string().contains("aborted by navigation") => {}
            Err(e) => panic!("{css}: {e}"),
        }
    }
}

/// Clicks the element `css` names.
async fn click(browser: &Client, css: &str) {
    wait_for(browser, css).await.click().await.unwrap();
}

/// The text of the element `css` names, once it is there.
async fn text(browser: &Client, css: &str) -> String {
    wait_for(browser, css).await.text().await.unwrap()
}

async fn count(browser: &Client, css: &str) -> usize {
    browser.find_all(Locator::Css(css)).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_queue_and_an_admin_redrives_a_dead_letter_from_it() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &["--admin"], &[("DASHBOARD_TOKEN", TOKEN)]).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;

    browser.goto(&serve.url("/")).await.unwrap();
    let figures = [
        text(&browser, "[data-figure=depth]").await,
        text(&browser, "[data-figure=leased]").await,
        text(&browser, "[data-figure=dead]").await,
    ];
    assert_eq!(figures, ["5", "1", "2"]);
    let lanes = [
        text(&browser, "[data-lane=high]").await,
        text(&browser, "[data-lane=normal]").await,
        text(&browser, "[data-lane=low]").await,
    ];
    assert_eq!(lanes, ["0", "4", "1"]);
    assert_eq!(text(&browser, "[data-type='mail.send']").await, "3");
    assert_eq!(text(&browser, "[data-type='report.export']").await, "2");
    let leased = text(&browser, "#leased").await;
    assert!(leased.contains(scene.holder.consumer_id()), "{leased}");
    assert!(
        leased.contains(&format!("40% {}", scene::PROGRESS)),
        "{leased}"
    );
    let key = text(&browser, &format!("#keys tr[data-key='{}']", scene::KEY)).await;
    assert!(
        key.contains("@default") && key.contains("at its cap"),
        "{key}"
    );
    let batch = text(
        &browser,
        &format!("#batches tr[data-batch='{}']", scene::BATCH),
    )
    .await;
    let cells: Vec<&str> = batch.split_whitespace().collect();
    assert_eq!(
        cells,
        [scene::BATCH, "1", "0", "0", "1", "open", "—"],
        "{batch}"
    );
    screenshot(&browser).await;

    // Signed out, the dead letters have no buttons; signing in brings them.
    browser.goto(&serve.url("/dead")).await.unwrap();
    assert_eq!(count(&browser, "button[value=redrive]").await, 0);
    browser.goto(&serve.url("/login")).await.unwrap();
    let field = browser
        .find(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(TOKEN).await.unwrap();
    click(&browser, "button[type=submit].primary").await;
    assert_eq!(text(&browser, ".badge.admin").await, "admin");

    browser.goto(&serve.url("/dead")).await.unwrap();
    assert_eq!(count(&browser, "#dead tr[data-dead]").await, 2);
    let first = format!("input[type=checkbox][value='{}']", scene.dead[0]);
    click(&browser, &first).await;
    click(&browser, "button[value=redrive]").await;
    // The confirmation page (its hidden `confirmed` field is on no other); nothing has
    // changed yet.
    wait_for(&browser, "input[name=confirmed]").await;
    assert!(
        text(&browser, "h1")
            .await
            .starts_with("Redrive 1 dead letter")
    );
    assert_eq!(t.children("dead").await.len(), 2);
    click(&browser, "button.primary").await;
    let redriven = text(&browser, "#redriven").await;
    assert!(redriven.contains(&scene.dead[0]), "{redriven}");

    // Pending again, on the page and in ZooKeeper.
    let tasks = t.children("tasks").await;
    let new_task = tasks.last().unwrap().clone();
    assert!(redriven.contains(&new_task), "{redriven} names {new_task}");
    assert_eq!(t.children("dead").await, vec![scene.dead[1].clone()]);
    browser.goto(&serve.url("/")).await.unwrap();
    assert_eq!(text(&browser, "[data-figure=depth]").await, "6");
    assert_eq!(text(&browser, "[data-figure=dead]").await, "1");
    assert_eq!(text(&browser, "[data-type='invoice.send']").await, "1");
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_page_has_no_redrive_button() {
    let t = TestQueue::new().await;
    let scene = scene::build(&t).await;
    let serve = Serve::start(&t, &[], &[]).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&serve.url("/dead")).await.unwrap();
    assert_eq!(count(&browser, "#dead tr[data-dead]").await, 2);
    assert_eq!(text(&browser, ".badge").await, "read-only");
    for css in [
        "button[value=redrive]",
        "button[value=purge]",
        "input[type=checkbox]",
        "a[href='/login']",
    ] {
        assert_eq!(count(&browser, css).await, 0, "{css}");
    }
    let letter = format!("/dead/{}", scene.dead[0]);
    browser.goto(&serve.url(&letter)).await.unwrap();
    assert!(text(&browser, "#record").await.contains("cancelled"));
    assert_eq!(count(&browser, "button").await, 0);
    browser.close().await.unwrap();
}

/// The task page: looked up by the form, its state and why; a resumable task asleep, with its
/// steps done and its sleep's end; a task nowhere is a 404 that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_says_why_a_task_waits() {
    let t = TestQueue::new().await;
    let envelope = event_bridge::Envelope::new("email.send", json!({}));
    let name = t.queue.publish_many(&[envelope]).await.unwrap().remove(0);
    let email = event_bridge::features::pause::PauseTarget::Type("email.send".into());
    t.queue.pauses().pause(&email).await.unwrap();
    let nap = event_bridge::Envelope::new("nap", json!({}));
    let nap_id = nap.id.clone();
    t.queue.publish_many(&[nap]).await.unwrap();
    let resumable = event_bridge::handler::FnHandler(|task: event_bridge::Task| async move {
        task.steps.step("book", async { Ok(1) }).await?;
        task.steps.sleep(std::time::Duration::from_secs(3600)).await
    });
    let options = harness::options(1, 1);
    let ran = event_bridge::process::run(&t.queue, &resumable, &options).await;
    assert_eq!(ran.unwrap().suspended, 1);
    let serve = Serve::start(&t, &[], &[]).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&serve.url("/task")).await.unwrap();
    let field = wait_for(&browser, "input[name=key]").await;
    field.send_keys(&name).await.unwrap();
    click(&browser, "form[action='/task'] button").await;
    assert_eq!(text(&browser, "[data-figure=state]").await, "pending");
    let why = text(&browser, "#why li").await;
    assert!(why.starts_with("paused: type email.send, since "), "{why}");
    assert!(text(&browser, "#status").await.contains(&name));
    browser
        .goto(&serve.url(&format!("/task?key={nap_id}")))
        .await
        .unwrap();
    assert_eq!(text(&browser, "[data-figure=state]").await, "sleeping");
    let why = text(&browser, "#why li").await;
    assert!(why.starts_with("asleep after 1 steps until "), "{why}");
    assert!(text(&browser, "#status").await.contains("\"resume\""));
    browser
        .goto(&serve.url("/task?key=no-such-task"))
        .await
        .unwrap();
    assert!(text(&browser, "#why li").await.starts_with("not found"));
    browser.close().await.unwrap();
    let missing = crate::http::get(&serve.address, "/task?key=no-such-task").unwrap();
    assert_eq!(missing.status, 404);
}

/// The main page as a PNG, for the README.
async fn screenshot(browser: &Client) {
    let png = browser.screenshot().await.unwrap();
    let target = workspace_root().join("target/dashboard.png");
    std::fs::write(&target, &png).unwrap();
    if let Ok(path) = std::env::var("DASHBOARD_SCREENSHOT") {
        std::fs::write(path, &png).unwrap();
    }
}
