//! Connecting to ZooKeeper, failing fast with the address when it cannot be reached.

use zookeeper_client as zk;

use crate::{Config, Error, Result};

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

/// The multi-op error of index `index`, if that is what failed.
pub(crate) fn failed_at(err: &zk::MultiWriteError) -> Option<(usize, &zk::Error)> {
    match err {
        zk::MultiWriteError::OperationFailed { index, source } => Some((*index, source)),
        zk::MultiWriteError::RequestFailed { .. } => None,
    }
}

/// The ACLs for the nodes the bridge creates: the authenticated user's only when
/// `ZOOKEEPER_AUTH` is set, open otherwise.
pub fn acls(config: &Config) -> zk::Acls<'static> {
    if config.zookeeper_auth.is_some() {
        zk::Acls::creator_all()
    } else {
        zk::Acls::anyone_all()
    }
}
