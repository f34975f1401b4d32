//! How `serve` starts: a sample period of zero is a usage error, and the "dashboard on" line
//! comes only once the address is bound (a port in use ends it without that line).

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use harness::TestQueue;

/// How `serve` ended: its exit code (`None`: still serving after a minute, then killed) and
/// what it wrote to stderr.
struct Ended {
    code: Option<i32>,
    stderr: String,
}

/// Runs `serve` with `args`, expecting it to end by itself.
async fn serve(t: &TestQueue, args: &[&str]) -> Ended {
    let mut child = crate::serve::command(t)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = || std::future::ready(child.try_wait().unwrap());
    let code = match harness::poll(Duration::from_secs(60), exited).await {
        Some(status) => status.code(),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    Ended { code, stderr }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_period_of_zero_is_a_usage_error() {
    let t = TestQueue::new().await;
    for zero in ["0s", "0", "0ms"] {
        let out = serve(&t, &["--listen", "127.0.0.1:0", "--sample-every", zero]).await;
        let stderr = out.stderr;
        assert_eq!(out.code, Some(2), "{zero}: {stderr}");
        assert!(stderr.contains("--sample-every"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_ends_serve_before_it_says_where_it_serves() {
    let t = TestQueue::new().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let out = serve(&t, &["--listen", &address]).await;
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen"), "{stderr}");
    assert!(!stderr.contains("dashboard on http"), "{stderr}");
}
