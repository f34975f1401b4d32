//! The Lambda handler: every event (the schedule's, or `{}` by hand) runs the reaper once.

use event_bridge::Session;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;

/// Handles one invocation; the event's content is not read.
///
/// # Notable errors
/// - `ZooKeeperUnreachable` / `ZooKeeperError` when ZooKeeper fails us (after one more try).
pub async fn handle(session: &Session, _event: LambdaEvent<Value>) -> Result<Value, Diagnostic> {
    let report = crate::run(session)
        .await
        .map_err(|e| platform::lambda::diagnostic(&e))?;
    let config = session.config();
    if config.metrics_emf {
        let metrics = platform::metrics::reap_metrics(&report);
        let now = platform::metrics::now_ms();
        println!(
            "{}",
            platform::metrics::document(config, "reap_leases", &metrics, now)
        );
    }
    Ok(serde_json::to_value(&report).expect("reports are plain data"))
}
