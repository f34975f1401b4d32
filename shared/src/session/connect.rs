//! Connecting to ZooKeeper, failing fast with the address when it cannot be reached.

use zookeeper_client as zk;

use crate::config::Config;
use crate::error::{Error, Result};

/// Opens a session, or fails within `config.connect_timeout` naming the address.
pub async fn connect(config: &Config) -> Result<zk::Client> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(config.connect_timeout)
        .with_fail_eagerly();
    if let Some(auth) = &config.zookeeper_auth {
        connector = connector.with_auth("digest", auth.expose().as_bytes());
    }
    let connecting = connector.connect(&config.zookeeper);
    let unreachable = |reason: String| Error::Unreachable {
        address: config.zookeeper.clone(),
        timeout_ms: config.connect_timeout.as_millis() as u64,
        reason,
    };
    match tokio::time::timeout(config.connect_timeout, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable("timed out".into())),
    }
}
