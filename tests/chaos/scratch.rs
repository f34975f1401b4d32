//! The run's scratch directory under the system's temp dir: ZooKeeper's data and configs, and
//! every process's log. Removed when the run ends well; kept (and named) when it fails or when
//! `CHAOS_KEEP` is set, so the logs can be read.

use std::path::{Path, PathBuf};

/// A directory of its own for one run.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let path = std::env::temp_dir().join(format!(
            "event-bridge-chaos-{}-{nanos:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("create the scratch directory");
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("CHAOS_KEEP").is_some() {
            eprintln!("chaos: logs and data kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
