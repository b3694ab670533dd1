//! Test harness: real `hopping-gateway`, `mock-backend` and `redis-server` processes on ephemeral
//! loopback ports, with readiness waits against deadlines (never fixed sleeps) and handles to kill,
//! restart and steer them. Children are killed on drop.

#![allow(missing_docs, unreachable_pub)]

pub mod certs;
pub mod config;
pub mod dns;
pub mod h2c;
pub mod h2raw;
pub mod h2ws;
pub mod http;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod tls;
pub mod webdriver;

// Scenario helpers: raw HTTP/1.1, answer checks, load and measurement, hand-made nodes.
pub mod check;
pub mod load;
pub mod nodes;
pub mod raw;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub use self::config::{Cluster, Config, Health, Route};
pub use self::http::{get, request, Resp};
pub use self::redis_cluster::RedisCluster;
pub use self::redis_sentinel::RedisSentinel;

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

/// Captured output lines of a child.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<String>>>);

impl Logs {
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

/// A running `mock-backend`.
pub struct Mock {
    pub id: String,
    pub port: u16,
    pub grpc_port: Option<u16>,
    args: Vec<String>,
    child: Option<Child>,
    pub logs: Logs,
}

impl Mock {
    /// Starts `mock-backend <port> <id> [extra...]` on a free port and waits until it accepts.
    pub async fn start(id: &str) -> Mock {
        Mock::start_with(id, &[]).await
    }

    /// As [`Mock::start`] with extra flags (`--version v2`, `--zone z`); `--grpc-port` is added
    /// when `grpc` is in `extra` as the literal `"--grpc"`.
    pub async fn start_with(id: &str, extra: &[&str]) -> Mock {
        let port = free_port();
        let mut args: Vec<String> = Vec::new();
        let mut grpc_port = None;
        for e in extra {
            if *e == "--grpc" {
                let p = free_port();
                grpc_port = Some(p);
                args.push("--grpc-port".into());
                args.push(p.to_string());
            } else {
                args.push(e.to_string());
            }
        }
        let mut m = Mock {
            id: id.to_string(),
            port,
            grpc_port,
            args,
            child: None,
            logs: Logs::default(),
        };
        m.spawn().await;
        m
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new(bin("mock-backend"));
        cmd.arg(self.port.to_string())
            .arg(&self.id)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn mock-backend");
        self.logs.capture(&mut child);
        self.child = Some(child);
        wait_port(self.port, Duration::from_secs(10)).await;
        if let Some(p) = self.grpc_port {
            wait_port(p, Duration::from_secs(10)).await;
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Starts again on the same port.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// POSTs a `/control/...` knob (path with query) and asserts its 200.
    pub async fn control(&self, path: &str) -> Resp {
        let r = request("POST", &format!("{}{path}", self.url()), &[], Vec::new())
            .await
            .expect("control call");
        assert_eq!(r.status, 200, "control {path}: {}", r.text());
        r
    }

    /// Business health down (process stays alive).
    pub async fn set_down(&self) {
        self.control("/control/health?state=down").await;
    }

    /// Business health up.
    pub async fn set_up(&self) {
        self.control("/control/health?state=up").await;
    }

    /// Flapping health: `down` health answers down, then `up` answers up, repeating, counted per
    /// health request (so per probe); `set_up`/`set_down` end it.
    pub async fn flap(&self, down: u64, up: u64) {
        self.control(&format!("/control/health?state=flap&down={down}&up={up}"))
            .await;
    }

    /// Adds `ms` latency to every response.
    pub async fn delay(&self, ms: u64) {
        self.control(&format!("/control/delay?ms={ms}")).await;
    }

    /// Stops answering while keeping sockets open.
    pub async fn hang(&self) {
        self.control("/control/hang").await;
    }

    /// Requests received (excluding /control/*).
    pub async fn requests(&self) -> u64 {
        self.stats().await["requests"]
            .as_u64()
            .expect("requests count")
    }

    /// The node's `GET /control/stats` JSON.
    pub async fn stats(&self) -> serde_json::Value {
        get(&format!("{}/control/stats", self.url()), &[])
            .await
            .expect("stats")
            .json()
    }

    /// Zeroes the request counter.
    pub async fn reset_stats(&self) {
        self.control("/control/reset-stats").await;
    }
}

/// A running `hopping-gateway`.
pub struct Gateway {
    pub port: u16,
    pub admin_port: u16,
    pub config_path: PathBuf,
    child: Option<Child>,
    pub logs: Logs,
    _dir: tempfile::TempDir,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

impl Gateway {
    /// Writes `toml` to a temp file and starts the gateway on free ports; waits for `/readyz`.
    pub async fn start(toml: &str) -> Gateway {
        Gateway::start_with(toml, &[]).await
    }

    /// As [`Gateway::start`] with extra CLI flags.
    pub async fn start_with(toml: &str, extra: &[&str]) -> Gateway {
        Gateway::start_with_env(toml, extra, &[]).await
    }

    /// As [`Gateway::start_with`], with extra environment variables for the process
    /// (e.g. `HOPGW_SECRET` for signed ids); they apply again on [`Gateway::restart`].
    pub async fn start_with_env(toml: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("gateway.toml");
        std::fs::write(&config_path, toml).expect("write config");
        let mut g = Gateway {
            port: free_port(),
            admin_port: free_port(),
            config_path,
            child: None,
            logs: Logs::default(),
            _dir: dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        g.spawn().await;
        g
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new(bin("hopping-gateway"));
        cmd.arg("--config")
            .arg(&self.config_path)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{}", self.admin_port))
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(
                "RUST_LOG",
                std::env::var("HOPGW_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn hopping-gateway");
        self.logs.capture(&mut child);
        self.child = Some(child);
        let url = self.admin("/readyz");
        let logs = self.logs.clone();
        wait_until(Duration::from_secs(15), "gateway /readyz", || {
            let url = url.clone();
            let logs = logs.clone();
            async move {
                match get(&url, &[]).await {
                    Ok(r) => r.status == 200,
                    Err(_) => {
                        let l = logs.lines();
                        assert!(
                            !l.iter().any(|x| x.contains("hopping-gateway: ")),
                            "gateway failed to start: {l:?}"
                        );
                        false
                    }
                }
            }
        })
        .await;
    }

    /// Data-plane URL for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Admin URL for `path`.
    pub fn admin(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin_port)
    }

    /// `GET` an admin path as JSON.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        get(&self.admin(path), &[])
            .await
            .expect("admin call")
            .json()
    }

    /// The admin view of node `id`.
    pub async fn node(&self, id: &str) -> serde_json::Value {
        let nodes = self.admin_json("/admin/nodes").await;
        nodes
            .as_array()
            .expect("array")
            .iter()
            .find(|n| n["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("node {id} not in {nodes}"))
    }

    /// Waits until node `id` is in `state`.
    pub async fn wait_node_state(&self, id: &str, state: &str, timeout: Duration) {
        wait_until(
            timeout,
            &format!("node {id} to be {state}"),
            || async move { self.node(id).await["state"] == state },
        )
        .await;
    }

    /// The value of the metric line starting with `series` (e.g. `hopping_count_total{reason="ejected"}`); 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = get(&self.admin("/metrics"), &[])
            .await
            .expect("metrics")
            .text();
        metric_value(&text, series)
    }

    /// Rewrites the config file (a reload trigger via file watch).
    pub fn write_config(&self, toml: &str) {
        // Write-then-rename so a watcher never sees a half file.
        let tmp = self.config_path.with_extension("tmp");
        std::fs::write(&tmp, toml).expect("write config");
        std::fs::rename(&tmp, &self.config_path).expect("rename config");
    }

    /// PID of the process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Sends `signal` (e.g. `"HUP"`, `"TERM"`) to the gateway.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("running");
        let ok = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let c = self.child.as_mut()?;
        tokio::time::timeout(timeout, c.wait())
            .await
            .ok()?
            .ok()?
            .code()
    }

    /// SIGKILL then start again on the same ports with the same config.
    pub async fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
        self.spawn().await;
    }

    /// Resident set size in KiB (from /proc).
    pub fn rss_kib(&self) -> u64 {
        let pid = self.pid().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS")
    }
}

/// Parses one series value out of Prometheus text; 0 if absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .filter(|rest| rest.starts_with(' '))
                .and_then(|rest| rest.trim().split(' ').next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0.0)
}

/// A running `redis-server` on a free port (no persistence).
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
}

impl Redis {
    /// Starts redis-server and waits for it to accept.
    pub async fn start() -> Redis {
        let mut r = Redis {
            port: free_port(),
            child: None,
        };
        r.spawn().await;
        r
    }

    async fn spawn(&mut self) {
        // Its own working directory: a replica's full sync writes an RDB file there, never into
        // the source tree.
        let dir = std::env::temp_dir().join(format!("hopgw-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("redis dir");
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir.to_string_lossy(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server on PATH");
        self.child = Some(child);
        wait_port(self.port, Duration::from_secs(10)).await;
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// SIGKILL.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// SIGSTOP: the kernel still accepts TCP connections but nothing answers (a black hole).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Redis::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self
            .child
            .as_ref()
            .and_then(Child::id)
            .expect("redis-server running");
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Starts again on the same port (empty: no persistence).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// A client connection.
    pub async fn client(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connect")
    }
}

/// A `[[clusters]]` block named `name` with `nodes` (id, addr) and the given extra cluster lines.
pub fn cluster_toml(name: &str, nodes: &[(&str, String)], extra: &str) -> String {
    let mut s = format!("[[clusters]]\nname = \"{name}\"\n{extra}\n");
    for (id, addr) in nodes {
        s.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
    }
    s
}

/// Fast probes so tests see state changes within a second or two.
pub const FAST_HEALTH: &str = "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";

/// The first index of `needle` in `hay`, if any.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads from `s` into `buf` until it holds a whole HTTP/1.1 head (through the blank line);
/// returns the head's length in bytes, or `None` if the peer closed or failed first (e.g. a TCP
/// health probe). Bytes past the head stay in `buf`. For the hand-made nodes of the scenarios.
pub async fn read_head<S>(s: &mut S, buf: &mut Vec<u8>) -> Option<usize>
where
    S: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            return Some(p + 4);
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
