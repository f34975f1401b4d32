//! An `event-bridge serve` process on a free loopback port, for one test's queue.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harness::{TestQueue, binary};

use crate::http;

/// `event-bridge serve` on the test's queue, with no token and no opt-out of authentication
/// but what a test adds, stdin closed.
pub fn command(t: &TestQueue) -> Command {
    let mut command = Command::new(binary("event-bridge"));
    command
        .arg("serve")
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .env_remove("DASHBOARD_TOKEN")
        .env_remove("ALLOW_UNAUTHENTICATED")
        .stdin(Stdio::null());
    command
}

/// A running dashboard; killed when dropped.
pub struct Serve {
    pub address: String,
    child: Child,
}

impl Serve {
    /// Starts `serve` with `args` and `env` on the test's root; waits until it answers.
    pub async fn start(t: &TestQueue, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let address = format!("127.0.0.1:{}", free_port());
        let mut command = command(t);
        command
            .args(["--listen", &address, "--sample-every", "1s"])
            .args(args)
            .stdout(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut serve = Serve {
            address,
            child: command.spawn().expect("event-bridge serve"),
        };
        let mut tries = harness::Tries::within(Duration::from_secs(10));
        while tries.again().await {
            if http::get(&serve.address, "/metrics").is_some() {
                return serve;
            }
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!("serve ended at start: {status}");
            }
        }
        panic!("serve did not answer on {}", serve.address)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
