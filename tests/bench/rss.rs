//! A command's own peak resident set, through a small helper process.
//!
//! The kernel's `ru_maxrss` of a child includes the peak of the memory it was started from:
//! a child made by `fork` or `vfork` counts the parent's pages until its `exec`. Spawned from
//! the bench straight away, every command would report the bench's own peak (22 MB after the
//! earlier sections, whatever the command used). So each measured command is started by a
//! helper: this same binary, run again with [`FLAG`], which is only a few MB when it spawns
//! the command, waits for it, and writes the command's `ru_maxrss` to a file. What a command
//! reports is therefore its own peak, or the helper's size if that is larger
//! ([`helper_floor_kb`] measures it, and the bench prints it).

use std::path::{Path, PathBuf};

use crate::Result;

/// The first argument that makes this binary the helper: `FLAG <file> <program> <args…>`.
const FLAG: &str = "--measure-rss";

/// In the helper process: runs the command, writes its peak RSS in KiB to the file, and
/// returns its exit code. `None` when this process is not the helper.
pub fn helper() -> Option<i32> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [flag, file, program, rest @ ..] = args.as_slice() else {
        return None;
    };
    if flag != FLAG {
        return None;
    }
    let run = || -> Result<i32> {
        let child = std::process::Command::new(program).args(rest).spawn()?;
        let (code, rss_kb) = wait(child)?;
        std::fs::write(file, rss_kb.to_string())?;
        Ok(code)
    };
    Some(run().unwrap_or_else(|e| {
        eprintln!("bench helper: {program}: {e}");
        127
    }))
}

/// A command for `program` that runs through the helper, which writes the peak to `file`.
pub fn command(program: &Path, file: &Path) -> Result<std::process::Command> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.arg(FLAG).arg(file).arg(program);
    Ok(command)
}

/// Where the helper writes (one file: measured commands run one at a time).
pub fn file() -> PathBuf {
    std::env::temp_dir().join(format!("eb-bench-rss-{}", std::process::id()))
}

/// Reads what the helper wrote, and removes the file.
pub fn read(file: &Path) -> Result<u64> {
    let kb = std::fs::read_to_string(file)?.trim().parse()?;
    std::fs::remove_file(file)?;
    Ok(kb)
}

/// The peak the helper reports for a command that uses next to nothing (`true`): below it,
/// a command's figure is the helper's, not its own.
pub fn helper_floor_kb() -> Result<u64> {
    let file = file();
    let mut command = command(Path::new("true"), &file)?;
    let status = command.status()?;
    if !status.success() {
        return Err("the bench's RSS helper failed on `true`".into());
    }
    read(&file)
}

/// Waits for `child`: its exit code (1 when a signal ended it), and its maximum resident set
/// in KiB (from the kernel's accounting of that child alone). The wait blocks its thread: on
/// the bench's runtime it first hands that thread's tasks to another (`block_in_place`), or a
/// ZooKeeper session's task queued there would answer no ping until the child ends (the smoke
/// run once lost its producer's link so, `ConnectionLoss` on its next create).
pub fn wait(child: std::process::Child) -> Result<(i32, u64)> {
    tokio::task::block_in_place(|| wait4(child))
}

fn wait4(child: std::process::Child) -> Result<(i32, u64)> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `usage` is a plain C struct the call fills in; `pid` is our own child, which std
    // has not waited for (the `Child` is dropped without a wait).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    drop(child);
    if waited != pid {
        return Err(std::io::Error::last_os_error().into());
    }
    let code = match libc::WIFEXITED(status) {
        true => libc::WEXITSTATUS(status),
        false => 1,
    };
    Ok((code, usage.ru_maxrss as u64))
}
