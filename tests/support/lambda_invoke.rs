//! Lambda's Invoke API on loopback: `lambda_invoke_api.py` as a child process, which checks
//! each request's SigV4 signature with botocore (independently of our signer) and answers a
//! signed asynchronous invocation `202`, as Lambda does; and the invocations it saw so far.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// The credentials and region the emulator checks signatures with.
pub const ACCESS_KEY: &str = "AKIDKICKTEST";
pub const SECRET_KEY: &str = "kick/test/secret/key";
pub const REGION: &str = "eu-west-1";

/// The emulator, and each request it saw: `{"function", "invocation_type", "payload",
/// "signed"}`.
pub struct InvokeApi {
    _child: Child,
    /// `http://127.0.0.1:<port>`, for `AWS_ENDPOINT_URL_LAMBDA`.
    pub endpoint: String,
    seen: Arc<Mutex<Vec<Value>>>,
    count: watch::Receiver<usize>,
}

impl InvokeApi {
    pub async fn start() -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/lambda_invoke_api.py");
        let mut child = Command::new("python3")
            .args([script, ACCESS_KEY, SECRET_KEY, REGION])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 with botocore (moto brings it: `make tools`)");
        let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        let first = (lines.next_line().await.ok().flatten())
            .expect("the emulator's port: python3 with botocore (`make tools`)");
        let port: u16 = (first.trim_start_matches("listening ").parse())
            .expect("the emulator says its port first");
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (counted, count) = watch::channel(0);
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let request = serde_json::from_str(&line).expect("a request as a JSON line");
                kept.lock().expect("requests lock").push(request);
                counted.send_modify(|n| *n += 1);
            }
        });
        InvokeApi {
            _child: child,
            endpoint: format!("http://127.0.0.1:{port}"),
            seen,
            count,
        }
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().expect("requests lock").clone()
    }

    /// The requests once `n` have been seen (30 s at most: a hang guard).
    pub async fn wait_for(&self, n: usize) -> Vec<Value> {
        let mut count = self.count.clone();
        let waited = tokio::time::timeout(Duration::from_secs(30), count.wait_for(|c| *c >= n));
        waited
            .await
            .unwrap_or_else(|_| panic!("{n} invocations: {:?}", self.requests()))
            .expect("the emulator's reader");
        self.requests()
    }

    /// The environment a publisher kicking through this emulator needs: the target, the
    /// endpoint, and static credentials in a region (nothing else of the AWS chain is tried).
    pub fn publisher_env(&self, function: &str) -> Vec<(&'static str, String)> {
        vec![
            ("EVENT_BRIDGE_KICK", "on".into()),
            ("EVENT_BRIDGE_KICK_URL", format!("lambda:{function}")),
            ("AWS_ENDPOINT_URL_LAMBDA", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", REGION.into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ]
    }
}
