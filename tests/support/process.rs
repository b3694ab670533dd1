//! Child processes and waits: the workspace root, release binaries, free loopback ports,
//! deadline-bound polling (never fixed sleeps) and captured output lines.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio::time::Instant;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// Path of a release binary, built once per test process so tests never run stale binaries.
/// With `HOPGW_TEST_BIN_DIR` set, the binaries are taken from that directory as they are (no build):
/// for running a copied test binary against a fixed build while the tree changes.
pub fn bin(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("HOPGW_TEST_BIN_DIR") {
        let p = PathBuf::from(dir).join(name);
        assert!(p.exists(), "{} missing", p.display());
        return p;
    }
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // `make test` builds everything first and says so; a plain `cargo test` builds here.
        if std::env::var_os("HOPGW_PREBUILT").is_some() {
            return;
        }
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "hopping-gateway",
                "-p",
                "mock-backend",
            ])
            .current_dir(root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
    });
    let p = root().join("target/release").join(name);
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// A free loopback port for a child process to listen on (bound then released).
///
/// Picked at random below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, from
/// 11000 up): a port from that range (what binding port 0 gives) can be taken as the source port of
/// another test's outgoing connection between its release here and the child's bind, which then
/// fails with "Address already in use". Falls back to port 0 when the range leaves no room.
pub fn free_port() -> u16 {
    use std::hash::BuildHasher;
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    const LOWEST: u16 = 11000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if let Some(span) = ephemeral_low.checked_sub(LOWEST).filter(|s| *s >= 1000) {
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let seed =
            std::collections::hash_map::RandomState::new().hash_one((std::process::id(), call));
        for i in 0..64u64 {
            let port =
                LOWEST + ((seed.wrapping_add(i.wrapping_mul(7919))) % u64::from(span)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind :0")
        .local_addr()
        .expect("addr")
        .port()
}

/// Polls `f` every 20 ms until it is true; panics with `what` at the deadline.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until loopback `port` accepts TCP connections, failing after `timeout`.
pub async fn wait_port(port: u16, timeout: Duration) {
    wait_until(timeout, &format!("port {port} to accept"), || async move {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
}

/// Sends `sig` (e.g. `-HUP`, `-STOP`) to the running `child` with `kill`; `name` names the
/// process if it is not running. Panics if there is no such process or `kill` fails.
pub fn signal_child(child: Option<&Child>, sig: &str, name: &str) {
    let pid = child
        .and_then(Child::id)
        .unwrap_or_else(|| panic!("{name} running"));
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} {name} ({pid})");
}

/// Captured output lines of a child.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
    /// Spawns `cmd` with stdout and stderr piped into these logs ([`Logs::capture`]), killed on
    /// drop; returns the child. Panics with `what` and the error if it cannot start.
    pub fn spawn(&self, cmd: &mut tokio::process::Command, what: &str) -> Child {
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        self.capture(&mut child);
        child
    }

    /// Collects the stdout and stderr lines of `child`.
    pub fn capture(&self, child: &mut Child) {
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child.stderr.take().map(|s| Box::new(s) as _),
        ]
        .into_iter()
        .flatten()
        {
            let lines = self.0.clone();
            tokio::spawn(async move {
                let mut r = BufReader::new(stream).lines();
                while let Ok(Some(l)) = r.next_line().await {
                    if std::env::var_os("HOPGW_TEST_ECHO").is_some() {
                        eprintln!("{l}");
                    }
                    lines.lock().expect("logs").push(l);
                }
            });
        }
    }

    /// All lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().expect("logs").clone()
    }

    /// Lines containing every one of `parts`.
    pub fn matching(&self, parts: &[&str]) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .collect()
    }

    /// Waits for a line containing every one of `parts`.
    pub async fn wait_for(&self, parts: &[&str], timeout: Duration) -> String {
        let mut found = None;
        wait_until(timeout, &format!("a log line with {parts:?}"), || {
            found = self.matching(parts).into_iter().next();
            let ok = found.is_some();
            async move { ok }
        })
        .await;
        found.expect("found")
    }
}
