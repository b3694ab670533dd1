//! Third-party WebSocket peers: `tests/peers/ws_peer.py`, over the PyPI `websockets` library
//! (`scripts/test-deps.sh` installs the pinned version), as nodes ([`PyNode`]) and as a client
//! ([`PyClient`]) driven line by line over its stdin and stdout. Processes are killed on drop.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::{root, wait_until, Cluster, Logs};

/// A peer's `permessage-deflate` setting (RFC 7692): the library's default offer or answer, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// `compression="deflate"`, the library's default (context takeover both ways).
    Deflate,
    /// `compression=None`: no extension offered or accepted.
    Off,
}

impl Compression {
    fn arg(self) -> &'static str {
        match self {
            Compression::Deflate => "deflate",
            Compression::Off => "none",
        }
    }
}

fn peer_command() -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("tests/peers/ws_peer.py"));
    cmd
}

/// Panics with the peer's output when it has exited: a missing `websockets` shows here.
fn assert_running(child: &mut Child, logs: &Logs, what: &str) {
    if let Ok(Some(status)) = child.try_wait() {
        panic!(
            "{what} exited ({status}); is Python websockets installed (scripts/test-deps.sh)? output: {:?}",
            logs.lines()
        );
    }
}

/// A `ws_peer.py server`: an echo node that answers the text `whoami` with its id and
/// `GET /health` with 200, and prints a `conn {json}` line per accepted socket.
pub struct PyNode {
    /// The node id (its `--name`, and its id in the gateway's cluster).
    pub id: String,
    /// Its loopback port.
    pub port: u16,
    child: Option<Child>,
    /// Its stdout and stderr lines.
    pub logs: Logs,
}

impl PyNode {
    /// Starts a node named `id` with `compression` that selects the first of `subprotocols` a
    /// client offers (none: it selects none, so it refuses any offer), on an ephemeral port;
    /// returns once the port is known and accepts connections. Panics if the peer cannot start.
    pub async fn start(id: &str, compression: Compression, subprotocols: &[&str]) -> PyNode {
        let logs = Logs::default();
        let mut cmd = peer_command();
        cmd.args(["server", "--name", id, "--compression", compression.arg()])
            .args(["--subprotocols", &subprotocols.join(",")]);
        let mut child = logs.spawn(&mut cmd, "spawn ws_peer.py server");
        let mut port = None;
        wait_until(
            Duration::from_secs(10),
            &format!("{id} to print its port"),
            || {
                assert_running(&mut child, &logs, id);
                // The first number printed (a warning on stderr may come first).
                port = logs
                    .lines()
                    .iter()
                    .find_map(|l| l.trim().parse::<u16>().ok());
                let found = port.is_some();
                async move { found }
            },
        )
        .await;
        let port = port.expect("found");
        crate::wait_port(port, Duration::from_secs(5)).await;
        PyNode {
            id: id.to_string(),
            port,
            child: Some(child),
            logs,
        }
    }

    /// Starts one node per `(id, compression, subprotocols)` in `specs` ([`PyNode::start`]), all at
    /// once (a Python start is mostly its imports); returns them in the order given.
    pub async fn start_all(specs: &[(&str, Compression, &[&str])]) -> Vec<PyNode> {
        futures_util::future::join_all(specs.iter().map(|(id, c, p)| PyNode::start(id, *c, p)))
            .await
    }

    /// `host:port` for the cluster.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL (no Close frame, no FIN handshake of its own), and waits for the process to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// The sockets this node accepted so far, in order: each `{"conn_id", "hopped_from",
    /// "extensions", "subprotocol"}` as the node saw its handshake (JSON null when absent).
    pub fn conns(&self) -> Vec<Value> {
        self.logs
            .lines()
            .iter()
            .filter_map(|l| l.strip_prefix("conn "))
            .map(|j| serde_json::from_str(j).expect("conn line is JSON"))
            .collect()
    }
}

/// Cluster `name` over `nodes`, each by its id and address (SPEC section 3 `[[clusters]]`).
pub fn cluster(name: &str, nodes: &[&PyNode]) -> Cluster {
    nodes
        .iter()
        .fold(Cluster::new(name), |c, n| c.node(&n.id, &n.addr()))
}

/// A `ws_peer.py client` with one open socket, driven by commands on its stdin.
pub struct PyClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
    /// What the client negotiated: `{"extensions": <Sec-WebSocket-Extensions or null>,
    /// "subprotocol": <or null>}`.
    pub opened: Value,
    /// Its stderr lines.
    pub logs: Logs,
}

impl PyClient {
    /// Opens `url` (`ws://...`) with `X-Conn-Id: conn_id`, `compression` and, when given, the
    /// one `subprotocol` offered; returns once the handshake is done. Panics if it fails.
    pub async fn connect(
        url: &str,
        conn_id: &str,
        compression: Compression,
        subprotocol: Option<&str>,
    ) -> PyClient {
        let mut cmd = peer_command();
        cmd.args(["client", url, "--conn-id", conn_id])
            .args(["--compression", compression.arg()])
            .args(["--subprotocol", subprotocol.unwrap_or("")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn ws_peer.py client");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        // With stdout taken, only stderr goes to the logs.
        let logs = Logs::default();
        logs.capture(&mut child);
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut c = PyClient {
            child,
            stdin,
            lines,
            opened: Value::Null,
            logs,
        };
        let first = c.next_line(Duration::from_secs(10), "the handshake").await;
        let open = first
            .strip_prefix("open ")
            .unwrap_or_else(|| panic!("client did not open: {first} {:?}", c.logs.lines()));
        c.opened = serde_json::from_str(open).expect("open line is JSON");
        c
    }

    async fn next_line(&mut self, t: Duration, what: &str) -> String {
        match timeout(t, self.lines.recv()).await {
            Ok(Some(l)) => l,
            Ok(None) => panic!(
                "client exited before {what}; stderr: {:?} ({:?})",
                self.logs.lines(),
                self.child.try_wait()
            ),
            Err(_) => panic!("no answer for {what} within {t:?}"),
        }
    }

    /// Writes `command` (one line) and returns the client's next output line within `t`.
    pub async fn command(&mut self, command: &str, t: Duration) -> String {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("client stdin");
        self.stdin.flush().await.expect("client stdin");
        self.next_line(t, command).await
    }

    /// `send n size kind` (kind `text`, `random` or `mixed`): asserts every one of the `n`
    /// distinct messages came back exactly and in order, the socket never closing meanwhile.
    pub async fn echo(&mut self, n: usize, size: usize, kind: &str) {
        let answer = self
            .command(&format!("send {n} {size} {kind}"), Duration::from_secs(30))
            .await;
        assert_eq!(answer, format!("ok {n}"), "{n} {kind} messages of {size} B");
    }

    /// The id of the node the socket is on (it answers `whoami`).
    pub async fn whoami(&mut self) -> String {
        let answer = self.command("whoami", Duration::from_secs(10)).await;
        answer
            .strip_prefix("node ")
            .unwrap_or_else(|| panic!("whoami: {answer}"))
            .to_string()
    }

    /// Asserts the socket is still open: no `closed` line came, and the process lives.
    pub fn assert_open(&mut self) {
        if let Ok(l) = self.lines.try_recv() {
            panic!("unexpected client output (the socket must stay open): {l}");
        }
        assert!(
            matches!(self.child.try_wait(), Ok(None)),
            "client exited; stderr: {:?}",
            self.logs.lines()
        );
    }
}
