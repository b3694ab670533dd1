//! DNS-discovery test helpers: a real `dnsmasq` serving a hosts file the test rewrites, and
//! mock nodes on other loopback addresses (127.0.0.2, 127.0.0.3, ...) sharing one port
//! (`mock-backend --listen-host`), as the nodes behind a headless Service would.

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::{bin, free_port, request, wait_until, Logs, Resp};

/// The dnsmasq binary: Debian's path, else whatever `dnsmasq` is on `PATH`.
fn dnsmasq_bin() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/dnsmasq");
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from("dnsmasq")
    }
}

/// A running `dnsmasq` on `127.0.0.1:<port>` (UDP and TCP) answering only from its hosts file.
pub struct Dnsmasq {
    pub port: u16,
    ttl: u32,
    hosts: PathBuf,
    child: Option<Child>,
    pub logs: Logs,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    /// Starts dnsmasq answering `records` (`(ip, name)`) with TTL `ttl` seconds; waits until it
    /// accepts TCP queries.
    pub async fn start(records: &[(&str, &str)], ttl: u32) -> Dnsmasq {
        let dir = tempfile::tempdir().expect("tempdir");
        let hosts = dir.path().join("hosts");
        let mut d = Dnsmasq {
            port: free_port(),
            ttl,
            hosts,
            child: None,
            logs: Logs::default(),
            _dir: dir,
        };
        d.write(records);
        d.spawn().await;
        d
    }

    fn write(&self, records: &[(&str, &str)]) {
        let text: String = records
            .iter()
            .map(|(ip, name)| format!("{ip} {name}\n"))
            .collect();
        let tmp = self.hosts.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write hosts");
        std::fs::rename(&tmp, &self.hosts).expect("rename hosts");
    }

    async fn spawn(&mut self) {
        let mut cmd = Command::new(dnsmasq_bin());
        cmd.args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port",
            &self.port.to_string(),
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            "--addn-hosts",
            &self.hosts.display().to_string(),
            "--local-ttl",
            &self.ttl.to_string(),
            "--pid-file=",
            // Stay root (as started): the hosts file lives in a private temp directory.
            "--user=root",
            "--log-facility=-",
        ]);
        self.child = Some(self.logs.spawn(
            &mut cmd,
            "dnsmasq runs (scripts/test-deps.sh installs dnsmasq-base)",
        ));
        let port = self.port;
        let logs = self.logs.clone();
        wait_until(Duration::from_secs(10), "dnsmasq to accept", || {
            let logs = logs.clone();
            async move {
                let ok = TcpStream::connect(("127.0.0.1", port)).await.is_ok();
                if !ok {
                    assert!(
                        !logs.lines().iter().any(|l| l.contains("FAILED")),
                        "dnsmasq failed to start: {:?}",
                        logs.lines()
                    );
                }
                ok
            }
        })
        .await;
    }

    /// Replaces the records and makes dnsmasq re-read them (SIGHUP re-reads `--addn-hosts`).
    pub fn set_records(&self, records: &[(&str, &str)]) {
        self.write(records);
        crate::process::signal_child(self.child.as_ref(), "-HUP", "dnsmasq");
    }

    /// `127.0.0.1:<port>`, for `[server] resolver`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL: every query now goes unanswered (refused).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Starts again on the same port with `records`.
    pub async fn restart(&mut self, records: &[(&str, &str)]) {
        self.stop().await;
        self.write(records);
        self.spawn().await;
    }
}

/// A `mock-backend` listening on `host:port` (`--listen-host`), named by its gateway node id
/// `<host>:<port>` so a WebSocket greeting names the node the gateway sees.
pub struct HostMock {
    pub host: String,
    pub port: u16,
    child: Option<Child>,
    pub logs: Logs,
}

impl HostMock {
    /// Starts the mock on `host:port` and waits until it accepts.
    pub async fn start(host: &str, port: u16) -> HostMock {
        let mut m = HostMock {
            host: host.to_string(),
            port,
            child: None,
            logs: Logs::default(),
        };
        let mut cmd = Command::new(bin("mock-backend"));
        cmd.arg(port.to_string())
            .arg(m.id())
            .args(["--listen-host", host]);
        m.child = Some(m.logs.spawn(&mut cmd, "spawn mock-backend"));
        let addr = m.id();
        wait_until(
            Duration::from_secs(10),
            &format!("{addr} to accept"),
            || {
                let addr = addr.clone();
                async move { TcpStream::connect(addr.as_str()).await.is_ok() }
            },
        )
        .await;
        m
    }

    /// `<host>:<port>`: the node id and address the gateway gives it.
    pub fn id(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// SIGKILL.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// `GET /control/stats` as JSON (`requests`, `paths` in arrival order).
    pub async fn stats(&self) -> serde_json::Value {
        let r: Resp = request(
            "GET",
            &format!("http://{}/control/stats", self.id()),
            &[],
            Vec::new(),
        )
        .await
        .expect("stats call");
        r.json()
    }
}
