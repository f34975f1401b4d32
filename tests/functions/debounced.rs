//! A debounced publish over HTTP: its answer's status URL finds it while it is pending under
//! its key, as `GET ?status=<id>`.

use process_events::App;
use serde_json::json;

use crate::requests::url_request;
use harness::TestQueue;

#[tokio::test]
async fn a_debounced_publish_answers_a_status_url_that_finds_it_while_pending() {
    let tq = TestQueue::new().await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let id = "doc 7/a&b+c";
    let line = json!({"type": "search.reindex", "payload": 1, "id": id,
        "debounce_key": "doc-7", "debounce": "30s"});
    let (status, _, body) = url_request(&app, "POST", "", &line.to_string()).await;
    assert_eq!(status, 202, "{body}");
    let item = &body["published"][0];
    assert_eq!(item["published"], "debounced", "{body}");
    let url = item["status_url"].as_str().expect("a status URL");
    assert_eq!(url, "/?status=doc%207%2Fa%26b%2Bc");

    let query = url.strip_prefix("/?").expect("the request's path");
    let (status, _, found) = url_request(&app, "GET", query, "").await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        (&found["state"], &found["id"]),
        (&json!("debounced"), &json!(id))
    );
    assert_eq!(found["key"], "doc-7");
}
