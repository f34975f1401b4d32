//! Connecting to ZooKeeper: retrying while servers refuse (an ensemble electing a leader does),
//! failing within the connect timeout naming the address, and naming a missing chroot.

use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::config::{Config, ConfigError};
use crate::error::{Error, Result};

/// How long to wait between two tries while servers refuse.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Opens a session, trying again while servers refuse until `config.connect_timeout` has
/// passed; checks that the connection string's chroot exists.
///
/// # Notable errors
/// - [`Error::Unreachable`] naming the address when no session opened in time;
/// - [`Error::Config`] naming `ZOOKEEPER_CONNECTION_STRING` when its chroot does not exist, or
///   when ZooKeeper refused the credentials of `ZOOKEEPER_AUTH`.
pub async fn connect(config: &Config) -> Result<zk::Client> {
    checked(open(config).await?, config).await
}

/// As [`connect`], without looking at the chroot: for a caller that reads it together with
/// other nodes ([`crate::Session::open`], with the base paths), and names it with
/// [`missing_chroot`] when it is not there.
pub(crate) async fn open(config: &Config) -> Result<zk::Client> {
    let deadline = Instant::now() + config.connect_timeout;
    let unreachable = |reason: String| Error::Unreachable {
        address: config.zookeeper.clone(),
        timeout_ms: config.connect_timeout.as_millis() as u64,
        reason,
    };
    let mut reason = "timed out".to_string();
    loop {
        match tokio::time::timeout_at(deadline, connector(config).connect(&config.zookeeper)).await
        {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(zk::Error::AuthFailed)) => return Err(refused_credentials(config)),
            Ok(Err(e)) => reason = e.to_string(),
            Err(_) => return Err(unreachable(reason)),
        }
        if Instant::now() + RETRY_PAUSE >= deadline {
            return Err(unreachable(reason));
        }
        tracing::debug!(address = %config.zookeeper, %reason, "zookeeper refused; trying again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// A session with the one server at `address` (`host:port`, no chroot), as `config` asks for
/// sessions (its credentials and timeouts), or why none opened within the connect timeout: no
/// second try, for a caller that judges each server of an ensemble alone (`doctor`).
pub(crate) async fn host(
    config: &Config,
    address: &str,
) -> std::result::Result<zk::Client, String> {
    match tokio::time::timeout(config.connect_timeout, connector(config).connect(address)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(zk::Error::NoHosts)) => Err("it refused the connection or closed it".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no session within {} ms",
            config.connect_timeout.as_millis()
        )),
    }
}

fn connector(config: &Config) -> zk::Connector {
    let mut connector = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(config.connect_timeout)
        .with_fail_eagerly();
    if let Some(auth) = &config.zookeeper_auth {
        connector = connector.with_auth("digest", auth.expose().as_bytes());
    }
    connector
}

/// `client`, once its chroot (if the connection string names one) is known to exist.
async fn checked(client: zk::Client, config: &Config) -> Result<zk::Client> {
    let Some(chroot) = chroot(&config.zookeeper) else {
        return Ok(client);
    };
    match client.check_stat("/").await {
        Ok(Some(_)) => Ok(client),
        Ok(None) | Err(zk::Error::NoNode) => Err(missing_chroot(config, chroot)),
        Err(e) => Err(Error::zk("stat", chroot, e)),
    }
}

/// The error of a connection string whose chroot `chroot` does not exist.
pub(super) fn missing_chroot(config: &Config, chroot: &str) -> Error {
    Error::Config(ConfigError {
        variable: "ZOOKEEPER_CONNECTION_STRING",
        value: config.zookeeper.clone(),
        problem: format!(
            "its chroot {chroot} does not exist on ZooKeeper: create it, or leave it out"
        ),
    })
}

fn refused_credentials(config: &Config) -> Error {
    Error::Config(ConfigError {
        variable: "ZOOKEEPER_AUTH",
        value: "<hidden>".into(),
        problem: format!(
            "ZooKeeper at {} refused these credentials: set it to user:password of a user it \
             knows",
            config.zookeeper
        ),
    })
}

/// The chroot of a connection string (`h1:2181,h2:2181/app` → `/app`), if it names one.
pub(crate) fn chroot(connection: &str) -> Option<&str> {
    let at = connection.find('/')?;
    let chroot = connection[at..].trim_end_matches('/');
    (!chroot.is_empty()).then_some(chroot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chroot_is_what_follows_the_hosts() {
        for (connection, want) in [
            ("zk1:2181,zk2:2181/app", Some("/app")),
            ("127.0.0.1:2181/a/b/", Some("/a/b")),
            ("127.0.0.1:2181/", None),
            ("127.0.0.1:2181", None),
        ] {
            assert_eq!(chroot(connection), want, "{connection}");
        }
    }
}
