//! A function binary run as Vercel runs it: an HTTP server on `127.0.0.1:$VERCEL_DEV_PORT`
//! (vercel_runtime serves so when no Vercel IPC socket is set), on the test's ZooKeeper and
//! root. The tests of the functions, of the OpenAPI description and of the Rails flow start it
//! the same way.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use event_bridge::Config;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running function binary; killed when dropped.
pub struct VercelBinary {
    pub port: u16,
    _child: Child,
    log: PathBuf,
}

impl VercelBinary {
    /// Starts `bin` on a free port with `config`'s ZooKeeper and root, and `env` (no
    /// `CRON_SECRET` or `ALLOW_UNAUTHENTICATED` but what `env` sets); returns once it listens.
    pub async fn start(bin: &str, config: &Config, env: &[(&str, &str)]) -> Self {
        Self::start_on(bin, free_port(), config, env).await
    }

    /// As [`VercelBinary::start`], on `port` (for a test that must name it before).
    pub async fn start_on(bin: &str, port: u16, config: &Config, env: &[(&str, &str)]) -> Self {
        let log = std::env::temp_dir().join(format!("{bin}-{port}.log"));
        let stderr = std::fs::File::create(&log).expect("server log");
        let mut child = Command::new(crate::binary(bin))
            .env("VERCEL_DEV_PORT", port.to_string())
            .env("ZOOKEEPER_CONNECTION_STRING", &config.zookeeper)
            .env("EVENT_BRIDGE_ROOT", &config.root)
            .env_remove("CRON_SECRET")
            .env_remove("ALLOW_UNAUTHENTICATED")
            .envs(env.iter().copied())
            .env_remove("VERCEL_IPC_PATH")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start the Vercel binary");
        // vercel_runtime prints this line once it listens.
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if line.starts_with("Dev server listening") {
                    return true;
                }
            }
            false
        };
        let ready = tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .expect("server starts");
        assert!(
            ready,
            "{bin} exited before listening:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        VercelBinary {
            port,
            _child: child,
            log,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self._child.id().expect("a running server has a pid")
    }

    /// What the server logged so far (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for VercelBinary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}
