//! Batches over HTTP: a publish's items join a batch with the field `batch`, and `GET
//! ?batch=<name>` answers its counts, on Lambda's Function URL and on Vercel (behind the
//! publish secret); an unknown batch is 404, and a publish naming one creates nothing.

use event_bridge::batch::{self, Open};
use process_events::App;
use serde_json::{Value, json};

use crate::requests::{VercelServer, url_request};
use harness::TestQueue;

const PATH: &str = "/api/process_events_vercel";

async fn open(tq: &TestQueue, name: &str) {
    let open = Open {
        on_complete: "import.done".into(),
        ..Open::default()
    };
    batch::open(&tq.queue, name, open).await.unwrap();
}

#[tokio::test]
async fn a_function_url_publishes_members_and_answers_the_batch_counts() {
    let tq = TestQueue::new().await;
    open(&tq, "import/7").await;
    let app = App::open(tq.config.clone(), "test").await.expect("app");
    let lines = [
        json!({"type": "import.row", "payload": 1, "batch": "import/7"}),
        json!({"type": "import.row", "payload": 2, "batch": "import/7"}),
    ]
    .map(|l| l.to_string())
    .join("\n");
    let (status, _, body) = url_request(&app, "POST", "", &lines).await;
    assert_eq!(status, 202, "{body}");

    let (status, _, counts) = url_request(&app, "GET", "batch=import%2F7", "").await;
    assert_eq!(status, 200, "{counts}");
    let fields = [
        "total",
        "pending",
        "completed",
        "dead",
        "sealed",
        "callback",
    ];
    let got: Vec<&Value> = fields.iter().map(|f| &counts[f]).collect();
    assert_eq!(
        got,
        [
            &json!(2),
            &json!(2),
            &json!(0),
            &json!(0),
            &json!(false),
            &Value::Null
        ]
    );

    let (status, _, missing) = url_request(&app, "GET", "batch=nope", "").await;
    assert_eq!(status, 404, "{missing}");
    let stray = json!({"type": "import.row", "payload": 3, "batch": "nope"}).to_string();
    let (status, _, refused) = url_request(&app, "POST", "", &stray).await;
    assert!((400..500).contains(&status), "{status} {refused}");
    assert!(refused.to_string().contains("no such batch"), "{refused}");
    assert_eq!(
        tq.children("tasks").await.len(),
        2,
        "nothing more published"
    );
}

#[tokio::test]
async fn vercel_answers_batch_counts_only_with_the_publish_secret() {
    let tq = TestQueue::new().await;
    open(&tq, "b").await;
    let env = [("CRON_SECRET", "cron"), ("PUBLISH_SECRET", "pub")];
    let server = VercelServer::start("process_events_vercel", &tq.config, &env).await;
    let url = format!("{PATH}?batch=b");
    let refused = server.send("GET", &url, None, b"").await;
    assert_eq!(refused.status, 401, "{refused:?}");
    let answer = server.send("GET", &url, Some("Bearer pub"), b"").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let counts: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        (&counts["name"], &counts["total"]),
        (&json!("b"), &json!(0))
    );
}
