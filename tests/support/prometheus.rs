//! Reading Prometheus text with a real parser: the `prometheus_client` Python package's
//! (`make tools` installs it).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Every sample of a Prometheus text as the parser reads it: `[name, labels, value]`.
/// Panics, with the text, when the parser refuses it.
pub fn parse(text: &str) -> Vec<Value> {
    let script = "import sys, json\n\
        from prometheus_client.parser import text_string_to_metric_families as families\n\
        print(json.dumps([[s.name, s.labels, s.value] for f in families(sys.stdin.read()) for s in f.samples]))";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (make tools installs prometheus-client)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the parser refused the text:\n{text}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the sample `name` whose labels include `labels` (an object).
pub fn sample(samples: &[Value], name: &str, labels: Value) -> Option<f64> {
    let labels = labels.as_object().cloned().unwrap_or_default();
    samples
        .iter()
        .find(|s| s[0] == name && labels.iter().all(|(k, v)| &s[1][k] == v))
        .and_then(|s| s[2].as_f64())
}
