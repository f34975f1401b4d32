//! Requests to the functions as their platforms send them: Function URL events from
//! `events/`, and HTTP requests to a Vercel binary run as a local server.

use event_bridge::Config;
use lambda_runtime::{Context, LambdaEvent};
use process_events::App;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use harness::workspace_root;

/// The Lambda event in `events/<name>`.
pub(crate) fn event_file(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A function binary run as Vercel runs it, and requests to it.
pub(crate) struct VercelServer {
    server: harness::vercel::VercelBinary,
}

impl VercelServer {
    /// Starts `bin` with the test's ZooKeeper and `env` (no `CRON_SECRET` or
    /// `ALLOW_UNAUTHENTICATED` but what `env` sets).
    pub(crate) async fn start(bin: &str, config: &Config, env: &[(&str, &str)]) -> Self {
        VercelServer {
            server: harness::vercel::VercelBinary::start(bin, config, env).await,
        }
    }

    /// What the server logged so far.
    pub(crate) fn log(&self) -> String {
        self.server.log()
    }

    /// `GET path` with an optional `Authorization` header: the status and the JSON body.
    pub(crate) async fn get(&self, path: &str, authorization: Option<&str>) -> (u16, Value) {
        self.request("GET", path, authorization, b"").await
    }

    /// `POST path` with `body`.
    pub(crate) async fn post(
        &self,
        path: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        self.request("POST", path, authorization, body).await
    }

    async fn request(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        let answer = self.send(method, path, authorization, body).await;
        let json = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", answer.status, answer.body));
        (answer.status, json)
    }

    /// `method path` with an optional `Authorization` header and `body`: the answer as sent.
    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> Answer {
        let mut stream = TcpStream::connect(("127.0.0.1", self.server.port))
            .await
            .expect("connect");
        let auth = authorization
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let length = body.len();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Length: {length}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("send");
        stream.write_all(body).await.expect("send the body");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        Answer::read(&response)
    }
}

/// An HTTP answer: its status, headers (names in lower case) and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    fn read(response: &str) -> Self {
        let (head, body) = response
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{response}"));
        let mut lines = head.lines();
        let status = (lines.next().and_then(|l| l.split(' ').nth(1)))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{head}"));
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_string()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_string(),
        }
    }

    /// The value of header `name` (lower case), if sent.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let found = self.headers.iter().find(|(n, _)| n == name);
        found.map(|(_, value)| value.as_str())
    }
}

/// A Function URL request (`events/publish.json` with its method, query string and body
/// changed) given to `process_events`' Lambda handler: the reply's status, headers and JSON
/// body.
pub(crate) async fn url_request(
    app: &App,
    method: &str,
    query: &str,
    body: &str,
) -> (u16, Value, Value) {
    let mut event = event_file("publish.json");
    event["requestContext"]["http"]["method"] = json!(method);
    event["rawQueryString"] = json!(query);
    event["body"] = json!(body);
    let reply = process_events::lambda::handle(app, LambdaEvent::new(event, Context::default()))
        .await
        .expect("an HTTP reply");
    let status = reply["statusCode"].as_u64().expect("a status") as u16;
    let json = serde_json::from_str(reply["body"].as_str().expect("a body")).expect("JSON");
    (status, reply["headers"].clone(), json)
}
