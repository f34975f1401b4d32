//! Every server of the connection string, alone.
//!
//! Each server is asked for a session of its own (the client protocol's handshake, with the
//! configured credentials and connect timeout), all at once, rather than the four-letter
//! `ruok` or `srvr`: those answer only where `4lw.commands.whitelist` lets them (3.5 and later
//! allow `srvr` alone by default, and operators often allow none), and `ruok` answers `imok` from
//! a server that has lost its quorum and serves nobody. A session is what a consumer needs of a
//! server, so a server that gives one passes. A refused connection fails at once; a silent
//! address after the connect timeout.

use std::time::Instant;

use super::Check;
use crate::config::Config;

/// One check per server of `config.zookeeper`, in the order the connection string names them.
pub(super) async fn check(config: &Config) -> Vec<Check> {
    let hosts = hosts(&config.zookeeper);
    if hosts.is_empty() {
        let fix = "set ZOOKEEPER_CONNECTION_STRING to host:port[,host:port…][/chroot]";
        return vec![Check::fail("zookeeper", "no server named", fix)];
    }
    futures::future::join_all(hosts.iter().map(|host| one(config, host))).await
}

/// The servers of a connection string (`zk1:2181,zk2:2181/app` → `zk1:2181`, `zk2:2181`).
fn hosts(connection: &str) -> Vec<String> {
    let servers = connection.split('/').next().unwrap_or("");
    servers
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(String::from)
        .collect()
}

async fn one(config: &Config, host: &str) -> Check {
    let started = Instant::now();
    match crate::session::host(config, host).await {
        Ok(client) => {
            let ms = started.elapsed().as_millis();
            drop(client);
            Check::pass("zookeeper", format!("opened a session in {ms} ms")).on(host)
        }
        Err(reason) => {
            tracing::debug!(%host, %reason, "zookeeper server did not answer");
            let fix = format!(
                "start ZooKeeper on {host} (check the port, and that nothing between blocks \
                 it), or take {host} out of ZOOKEEPER_CONNECTION_STRING"
            );
            Check::fail("zookeeper", format!("no session: {reason}"), fix).on(host)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_are_what_precedes_the_chroot() {
        for (connection, want) in [
            ("zk1:2181,zk2:2181/app", vec!["zk1:2181", "zk2:2181"]),
            ("127.0.0.1:2181", vec!["127.0.0.1:2181"]),
            (" a:1 , b:2 /x/y", vec!["a:1", "b:2"]),
            ("/app", vec![]),
        ] {
            assert_eq!(hosts(connection), want, "{connection}");
        }
    }
}
