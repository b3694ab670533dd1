//! The new process of an upgrade (SPEC section 13): the binary at the gateway's own path, started
//! with the same arguments and environment ([`SelfExe`], [`spawn`]), and stopped when the upgrade is
//! rolled back ([`stop`]).
//!
//! The path is resolved at start-up from `argv[0]` (against the working directory, or `PATH` for a
//! bare name), not from `/proc/self/exe`: once a package manager renames a new file over the old,
//! `/proc/self/exe` names the deleted old file, while the path names the new one.
//!
//! The child's end of the handover channel (a Unix socket pair) becomes the child's standard input
//! and [`UPGRADE_FD_ENV`] says so (`0`): the child adopts it with safe code (`Stdin::as_fd`), which
//! no other descriptor number allows in a crate that forbids unsafe code. The gateway reads nothing
//! from its standard input. Standard output and error are inherited.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// The variable naming the descriptor number of the handover channel in a new process started by
/// an upgrade; its one value is `0` (standard input).
pub const UPGRADE_FD_ENV: &str = "HOPGW_UPGRADE_FD";

/// The flag a supervisor passes to a new process it starts itself (`--upgrade-from <socket>`);
/// not passed on to the next upgrade's process.
const UPGRADE_FROM_FLAG: &str = "--upgrade-from";

/// How long a stopped new process is waited for after `SIGKILL`.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The gateway's own binary as started: its path resolved at start-up and its arguments.
#[derive(Debug, Clone)]
pub struct SelfExe {
    /// Absolute path of the binary (not canonicalised: a symlink swapped to a new version is
    /// followed at upgrade time).
    pub path: PathBuf,
    /// The arguments after `argv[0]`, `--upgrade-from` and its value left out.
    pub args: Vec<OsString>,
}

impl SelfExe {
    /// Resolves the running binary from this process's `argv` and working directory, and `PATH`;
    /// call it at start-up, before anything could change them. Falls back to
    /// `std::env::current_exe` when `argv[0]` cannot be resolved.
    pub fn at_start() -> SelfExe {
        let mut argv = std::env::args_os();
        let argv0 = argv.next().unwrap_or_default();
        let cwd = std::env::current_dir().ok();
        let path = resolve(&argv0, cwd.as_deref(), std::env::var_os("PATH").as_deref())
            .or_else(|| std::env::current_exe().ok())
            .unwrap_or_else(|| PathBuf::from(&argv0));
        SelfExe {
            path,
            args: without_upgrade_from(argv),
        }
    }
}

/// `argv0` resolved: a path with a `/` against `cwd`; a bare name against `path` (the first
/// directory holding a file of that name). `None` when neither applies.
fn resolve(
    argv0: &std::ffi::OsStr,
    cwd: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    let p = Path::new(argv0);
    if p.as_os_str().is_empty() {
        return None;
    }
    if p.is_absolute() {
        return Some(p.to_path_buf());
    }
    if p.components().count() > 1 {
        return cwd.map(|c| c.join(p));
    }
    std::env::split_paths(path?)
        .map(|dir| match (dir.is_absolute(), cwd) {
            (true, _) => dir.join(p),
            (false, Some(c)) => c.join(dir).join(p),
            (false, None) => dir.join(p),
        })
        .find(|candidate| candidate.is_file())
}

/// `args` without `--upgrade-from <socket>` / `--upgrade-from=<socket>`.
fn without_upgrade_from(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let s = a.to_string_lossy();
        if s == UPGRADE_FROM_FLAG {
            skip_next = true;
        } else if !s.starts_with("--upgrade-from=") {
            out.push(a);
        }
    }
    out
}

/// Starts `exe` with its arguments and this process's environment, `channel` as its standard
/// input (named by [`UPGRADE_FD_ENV`]), standard output and error inherited.
///
/// # Errors
/// The spawn's I/O error (no such file, not executable, ...).
pub fn spawn(exe: &SelfExe, channel: OwnedFd) -> std::io::Result<Child> {
    Command::new(&exe.path)
        .args(&exe.args)
        .env(UPGRADE_FD_ENV, "0")
        .stdin(Stdio::from(channel))
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
}

/// Stops a new process that did not take over: `SIGKILL`, then waits for it (so no zombie stays).
/// A process this one did not start (the `--upgrade-from` form) is signalled by `pid` only.
pub async fn stop(child: Option<&mut Child>, pid: Option<u32>) {
    if let Some(c) = child {
        if let Err(e) = c.start_kill() {
            tracing::debug!(error = %e, "new process already gone");
        }
        if tokio::time::timeout(STOP_WAIT, c.wait()).await.is_err() {
            tracing::warn!(pid = ?c.id(), "new process not gone after SIGKILL");
        }
        return;
    }
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    if let Err(e) = rustix::process::kill_process(pid, rustix::process::Signal::KILL) {
        tracing::debug!(error = %e, "new process already gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv0_resolves_against_cwd_or_path() {
        let cwd = Path::new("/srv/gw");
        assert_eq!(
            resolve("bin/hopping-gateway".as_ref(), Some(cwd), None),
            Some(PathBuf::from("/srv/gw/bin/hopping-gateway"))
        );
        assert_eq!(
            resolve("/usr/bin/hopping-gateway".as_ref(), Some(cwd), None),
            Some(PathBuf::from("/usr/bin/hopping-gateway"))
        );
        // A bare name is looked up on PATH: `sh` is in /bin or /usr/bin everywhere.
        let found = resolve(
            "sh".as_ref(),
            Some(cwd),
            Some("/nonexistent:/usr/bin:/bin".as_ref()),
        );
        assert!(found.is_some_and(|p| p.ends_with("sh") && p.is_absolute()));
        assert_eq!(resolve("".as_ref(), Some(cwd), None), None);
    }

    #[test]
    fn upgrade_from_is_not_passed_on() {
        let args = [
            "--config",
            "g.toml",
            "--upgrade-from",
            "/run/s",
            "--upgrade-from=/x",
            "-v",
        ]
        .map(OsString::from);
        assert_eq!(
            without_upgrade_from(args.into_iter()),
            ["--config", "g.toml", "-v"].map(OsString::from)
        );
    }
}
