//! An HTTP publish item's `expires_at` (RFC 3339) is the task's expiry; one that is no time
//! refuses the body with 400, naming the line and the field, and publishes nothing.

use event_bridge::features::expiry::ExpiresAt;
use process_events::App;
use serde_json::json;

use crate::requests::url_request;
use harness::TestQueue;

#[tokio::test]
async fn an_http_publish_sets_expires_at_and_refuses_one_that_is_no_time() {
    let tq = TestQueue::new().await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let item = json!({"type": "report.send", "payload": 1, "expires_at": "2030-01-01T00:00:00Z"});
    let (status, _, body) = url_request(&app, "POST", "", &item.to_string()).await;
    assert_eq!(status, 202, "{body}");
    let name = body["published"][0]["task"].as_str().expect("a task");
    let task = tq.read_json(&format!("tasks/{name}")).await;
    let at: ExpiresAt = serde_json::from_value(task["expires_at"].clone()).expect("a time");
    assert_eq!(at.ms(), 1_893_456_000_000);

    let bad = json!({"type": "report.send", "payload": 1, "expires_at": "next week"});
    let lines = format!("{item}\n{bad}");
    let (status, _, body) = url_request(&app, "POST", "", &lines).await;
    assert_eq!(status, 400, "{body}");
    let error = body["message"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("line 2: \"expires_at\" is malformed"),
        "{body}"
    );
    assert_eq!(tq.children("tasks").await.len(), 1);
}
