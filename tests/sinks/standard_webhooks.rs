//! Standard Webhooks signatures on the HTTP sink, checked by the spec's reference verifiers
//! (PyPI's and npm's `standardwebhooks`) on a request our real receiver recorded: they accept
//! what the sink sent, and refuse it with one byte of the body changed.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use event_bridge::Secret;
use event_bridge::sink::http::{HttpSink, HttpSpec};
use event_bridge::sink::route::SignatureScheme;
use event_bridge::{Envelope, Task};
use serde_json::json;

use crate::sink_http::{Receiver, Reply, Request};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the request's headers are to a verifier: the three of the spec.
fn headers(request: &Request) -> serde_json::Value {
    json!({
        "webhook-id": request.header("webhook-id"),
        "webhook-timestamp": request.header("webhook-timestamp"),
        "webhook-signature": request.header("webhook-signature"),
    })
}

/// Runs `program args…` with `body` on stdin; whether it exited 0, and its stderr.
fn verify(program: &str, args: &[&str], body: &[u8]) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        // npm's verifier comes with the event-bridge npm package `make packages` installs.
        .env(
            "NODE_PATH",
            harness::workspace_root().join("target/packages/node/node_modules"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program}: {e} (make tools and make packages install the verifiers)")
        });
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Both reference verifiers' answers for `body` with `request`'s headers.
fn verifiers(request: &Request, body: &[u8]) -> [(bool, String); 2] {
    let headers = headers(request).to_string();
    let python = "import sys, json\n\
        from standardwebhooks.webhooks import Webhook\n\
        Webhook(sys.argv[1]).verify(sys.stdin.buffer.read(), json.loads(sys.argv[2]))";
    let node = "const { Webhook } = require('standardwebhooks');\n\
        const body = require('fs').readFileSync(0);\n\
        new Webhook(process.argv[1]).verify(body.toString('utf8'), JSON.parse(process.argv[2]));";
    [
        verify("python3", &["-c", python, SECRET, &headers], body),
        verify("node", &["-e", node, SECRET, &headers], body),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_verifiers_accept_a_standard_signature_and_refuse_a_changed_body() {
    let receiver = Receiver::start([Reply::status(200)]).await;
    let sink = HttpSink::new(HttpSpec {
        url: receiver.url("/hook"),
        secret: Some(Secret::new(SECRET)),
        signature: SignatureScheme::Standard,
        timeout: Duration::from_secs(10),
    })
    .unwrap();
    let task = Task {
        name: "task-0000000042".into(),
        envelope: Envelope::new("invoice.paid", json!({ "invoice": "in_7", "amount": 1200 })),
        fencing_token: 9,
        progress: Default::default(),
        steps: Default::default(),
    };
    assert_eq!(sink.deliver(&task).await.unwrap().status, 200);
    let request = receiver.requests().remove(0);
    assert_eq!(request.header("webhook-id"), task.envelope.id);
    assert!(request.header("x-event-bridge-signature").is_empty());
    for (ok, stderr) in verifiers(&request, &request.body) {
        assert!(ok, "a verifier refused it: {stderr}");
    }
    let mut changed = request.body.clone();
    let last = changed.len() - 2;
    changed[last] = b'9';
    for (ok, stderr) in verifiers(&request, &changed) {
        assert!(!ok, "a verifier accepted a changed body");
        assert!(!stderr.is_empty());
    }
}
