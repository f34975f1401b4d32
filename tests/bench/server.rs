//! The bench's ZooKeeper: chroots of its own, deleting them, closing sessions, and the
//! server's own counters (four-letter words).

use std::io::{Read, Write};
use std::time::Duration;

use event_bridge::Config;
use zookeeper_client as zk;

use crate::{BENCH_ROOT, PERSISTENT, Result, WINDOW};

/// A chroot of its own under `BENCH_ROOT`: an admin client outside it, its path, and a config
/// whose connection string points into it.
pub async fn fresh_chroot(addr: &str) -> Result<(zk::Client, String, Config)> {
    let chroot = format!("{BENCH_ROOT}/{:016x}", fastrand::u64(..));
    let admin = admin_client(addr).await?;
    admin.mkdir(&chroot, &PERSISTENT).await?;
    let mut config = Config::default();
    config.zookeeper = format!("{addr}{chroot}");
    config.root = "/queue".into();
    Ok((admin, chroot, config))
}

/// A client outside the chroots, for setting them up and deleting them. Its session outlasts a
/// server that stalls for seconds (a client drops a link that answers nothing for two fifths
/// of its session timeout: listing the 10^6 tasks of the curve's chroot once took longer than
/// the default's 2.4 s, and failed the bench at its very end).
pub async fn admin_client(addr: &str) -> Result<zk::Client> {
    let connector = zk::Client::connector().with_session_timeout(Duration::from_secs(30));
    Ok(connector.connect(addr).await?)
}

/// Deletes `path` and everything under it: children first, pipelined. One session's
/// requests are handled in order, so deleting deepest levels first is enough.
pub async fn delete_tree(client: &zk::Client, path: &str) -> Result<()> {
    let mut levels = vec![vec![path.to_string()]];
    while let Some(parents) = levels.last().filter(|l| !l.is_empty()) {
        let lists: Vec<_> = parents.iter().map(|p| client.list_children(p)).collect();
        let mut children = Vec::new();
        for (parent, listed) in parents.iter().zip(futures::future::join_all(lists).await) {
            let base = parent.trim_end_matches('/');
            children.extend(listed?.into_iter().map(|c| format!("{base}/{c}")));
        }
        levels.push(children);
    }
    let nodes: Vec<String> = levels.into_iter().rev().flatten().collect();
    for window in nodes.chunks(WINDOW) {
        let deletes: Vec<_> = window.iter().map(|p| client.delete(p, None)).collect();
        for deleted in futures::future::join_all(deletes).await {
            deleted?;
        }
    }
    Ok(())
}

/// Closes a session and waits until the server has seen the close.
pub async fn close(client: zk::Client) {
    let mut state = client.state_watcher();
    drop(client);
    let closed = async {
        while !state.state().is_terminated() {
            state.changed().await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), closed).await;
}

/// The server's counters, from the four-letter word `mntr`.
pub struct Mntr {
    pub packets_received: u64,
    pub connections: u64,
    /// Bytes the server sent to clients.
    pub response_bytes: u64,
}

impl Mntr {
    pub fn read(addr: &str) -> Result<Self> {
        let text = four_letter(addr, "mntr")?;
        let field = |name: &str| -> Result<u64> {
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('\t'));
            Ok(value
                .ok_or_else(|| format!("mntr has no {name}"))?
                .trim()
                .parse()?)
        };
        Ok(Mntr {
            packets_received: field("zk_packets_received")?,
            connections: field("zk_num_alive_connections")?,
            response_bytes: field("zk_response_bytes")?,
        })
    }
}

/// Sends a four-letter word on a connection of its own and returns the answer.
pub fn four_letter(addr: &str, word: &str) -> Result<String> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}
