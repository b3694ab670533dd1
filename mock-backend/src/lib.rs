//! The mock backend node used by hopping-gateway's tests (SPEC section 9).
//!
//! One process (or one in-process instance, via [`bind`] + [`BoundMock::serve`]) plays one node:
//! - the main port serves HTTP/1.1 and h2c prior knowledge: `GET /health`,
//!   `GET /actuator/health/business`, `GET /data`, `ANY /echo[/...][?read_rate=BYTES_PER_SEC]`, `GET /ws` (query knobs in `ws.rs`, e.g. `fragments=N&fragment_ms=M`), `GET /sse`,
//!   `GET /download?bytes=N[&chunked=1]`, `ANY /status/<code>`, `ANY /abort[?after_bytes=N]`;
//! - `/control/*` turns the knobs: `POST health?state=down|up|flap[&down=N&up=M]`,
//!   `POST grpc-health?state=down|up` (gRPC `Health/Check` only), `POST delay?ms=N`,
//!   `POST hang` / `POST unhang`, `GET stats` (`requests`, `paths`, `ws_messages`), `POST reset-stats`,
//!   `POST keepalive?idle_ms=N[&advertise=1][&reset=1]` (idle close by RST with `reset=1`), `POST goaway?after=N`,
//!   `POST abort-all[?after_bytes=N]` / `POST abort-all?state=off` (every request behaves as `/abort`);
//! - the optional gRPC port serves h2c ([`grpc`]: `hopping.test.v1.Echo`, `GET /health` and
//!   `grpc.health.v1.Health/Check`);
//! - with [`MockConfig::tls`] both ports speak TLS instead of cleartext ([`tls`]: ALPN `h2`,
//!   `http/1.1` on the main port, `h2` on the gRPC port).
//!
//! Every response carries `x-node-id`. The knobs live in one shared `State` of atomics and watch
//! channels, so every connection sees a change at once. Every connection and WebSocket task is
//! spawned into one tracked task set; [`BoundMock::serve`] stops accepting when its shutdown
//! future completes, asks every connection to close gracefully, waits a short grace period and
//! aborts what is left. This crate never exits the process itself.

mod conn;
mod control;
pub mod grpc;
mod http;
mod respond;
mod state;
pub mod tls;
mod tracker;
mod ws;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use hyper::header::HeaderValue;
use tokio::net::TcpListener;
use tokio::sync::watch;

use state::{Flap, State, Stats, TaskSet};

/// How long connections get to finish after shutdown before they are aborted: a test backend
/// must stop promptly, and hung requests would otherwise hold it forever.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// Size of one `/download` chunk (64 KiB).
const DOWNLOAD_CHUNK: usize = 64 * 1024;
/// `/download` byte `i` is `i % DOWNLOAD_PERIOD`: a prime period, so chunk boundaries never align with it.
const DOWNLOAD_PERIOD: u64 = 251;

/// Configuration of one mock node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockConfig {
    /// Main port (HTTP/1.1 + h2c). `0` binds an ephemeral port; see [`BoundMock::local_addr`].
    pub port: u16,
    /// Node id, returned in bodies and in the `x-node-id` response header. Must be a valid header value.
    pub id: String,
    /// Optional version label, sent back in the `x-node-version` response header.
    pub version: Option<String>,
    /// Optional zone label, sent back in the `x-node-zone` response header.
    pub zone: Option<String>,
    /// gRPC (h2c only) port; `None` serves no gRPC, `Some(0)` binds an ephemeral port.
    pub grpc_port: Option<u16>,
    /// Address both listeners bind to. Default `127.0.0.1`.
    pub listen_host: IpAddr,
    /// TLS on both ports instead of cleartext; `None` = cleartext.
    pub tls: Option<tls::TlsFiles>,
}

impl MockConfig {
    /// Takes a port (0 = ephemeral) and a node id; returns a config with no version, zone or
    /// gRPC port, listening on `127.0.0.1`.
    pub fn new(port: u16, id: impl Into<String>) -> Self {
        Self {
            port,
            id: id.into(),
            version: None,
            zone: None,
            grpc_port: None,
            listen_host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            tls: None,
        }
    }
}

/// A mock node whose listeners are bound but not yet serving.
#[derive(Debug)]
pub struct BoundMock {
    http: TcpListener,
    grpc: Option<TcpListener>,
    http_addr: SocketAddr,
    grpc_addr: Option<SocketAddr>,
    /// TLS acceptors of the main and gRPC ports, when TLS is on.
    tls: Option<(tls::Acceptor, tls::Acceptor)>,
    state: Arc<State>,
}

/// Binds `addr` with an accept queue of 1024 (Rust's default of 128 drops SYNs when a fleet of
/// WebSockets hops onto this node at once; real backends, e.g. Go's, use the kernel's maximum).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Takes a config and binds its listeners; returns the bound node, ready for [`BoundMock::serve`].
///
/// # Errors
/// Fails when the node id is not a valid header value or a port cannot be bound.
pub async fn bind(config: MockConfig) -> anyhow::Result<BoundMock> {
    let id_header = HeaderValue::from_str(&config.id)
        .with_context(|| format!("node id {:?} is not a valid header value", config.id))?;
    let label = |name: &str, value: &Option<String>| -> anyhow::Result<Option<HeaderValue>> {
        value
            .as_deref()
            .map(HeaderValue::from_str)
            .transpose()
            .with_context(|| format!("{name} {value:?} is not a valid header value"))
    };
    let version_header = label("version", &config.version)?;
    let zone_header = label("zone", &config.zone)?;

    let tls = match &config.tls {
        None => None,
        Some(files) => Some((
            tls::Acceptor(tls::acceptor(files, &[b"h2", b"http/1.1"])?),
            tls::Acceptor(tls::acceptor(files, &[b"h2"])?),
        )),
    };
    let http = listen((config.listen_host, config.port).into())
        .with_context(|| format!("binding {}:{}", config.listen_host, config.port))?;
    let http_addr = http.local_addr().context("reading the bound address")?;
    let grpc = match config.grpc_port {
        Some(port) => Some(
            listen((config.listen_host, port).into())
                .with_context(|| format!("binding gRPC {}:{port}", config.listen_host))?,
        ),
        None => None,
    };
    let grpc_addr = grpc
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()
        .context("reading the bound gRPC address")?;

    let state = Arc::new(State {
        id: config.id,
        port: http_addr.port(),
        id_header,
        version_header,
        zone_header,
        down: AtomicBool::new(false),
        grpc_down: AtomicBool::new(false),
        flap: Mutex::new(None),
        delay_ms: AtomicU64::new(0),
        hang: watch::Sender::new(false),
        idle_ms: watch::Sender::new(0),
        advertise_keepalive: AtomicBool::new(false),
        idle_reset: AtomicBool::new(false),
        goaway_after: AtomicU64::new(0),
        grpc_read_delay_ms: AtomicU64::new(0),
        grpc_connections: AtomicU64::new(0),
        grpc_open_ticks: Arc::default(),
        abort_all: AtomicBool::new(false),
        abort_after: AtomicU64::new(u64::MAX),
        status_all: AtomicU64::new(0),
        stats: Mutex::new(Stats::default()),
        shutdown: watch::Sender::new(false),
        tasks: TaskSet::default(),
        pattern: download_pattern(),
    });
    Ok(BoundMock {
        http,
        grpc,
        http_addr,
        grpc_addr,
        tls,
        state,
    })
}

impl BoundMock {
    /// Returns the bound address of the main (HTTP/1.1 + h2c) port.
    pub fn local_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Returns the bound gRPC address, or `None` when no gRPC port was configured.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// Serves until `shutdown` completes, then closes connections gracefully (h2 GOAWAY,
    /// WebSocket close 1001), waits up to one second and aborts what is left.
    ///
    /// # Errors
    /// None today (accept errors are retried); the `Result` leaves room for fatal listener errors.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let state = self.state;
        let (http_tls, grpc_tls) = self.tls.map(|(h, g)| (h.0, g.0)).unzip();
        let http_loop = conn::accept_http(self.http, Arc::clone(&state), http_tls);
        let grpc_loop = async {
            match self.grpc {
                Some(listener) => conn::accept_grpc(listener, Arc::clone(&state), grpc_tls).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = http_loop => {}
            () = grpc_loop => {}
            () = shutdown => {}
        }
        state.shutdown.send_replace(true);
        state.tasks.drain(SHUTDOWN_GRACE).await;
        Ok(())
    }
}

/// Takes a config and a stop signal; binds, prints `mock-backend <id> listening on <addr>` (plus a
/// `mock-backend <id> grpc listening on <addr>` line when gRPC is on) to stdout, and serves until
/// `shutdown` completes.
///
/// # Errors
/// Fails when binding fails (see [`bind`]) or stdout cannot be written.
pub async fn run(config: MockConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    use std::io::Write as _;

    let id = config.id.clone();
    let bound = bind(config).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "mock-backend {id} listening on {}", bound.local_addr())?;
        if let Some(addr) = bound.grpc_addr() {
            writeln!(out, "mock-backend {id} grpc listening on {addr}")?;
        }
        out.flush()?;
    }
    bound.serve(shutdown).await
}

/// Builds the `/download` pattern: one chunk plus one period, so any chunk is a slice of it.
fn download_pattern() -> Bytes {
    let len = DOWNLOAD_CHUNK as u64 + DOWNLOAD_PERIOD;
    (0..len)
        .map(|i| u8::try_from(i % DOWNLOAD_PERIOD).expect("i % 251 fits in a byte"))
        .collect::<Vec<u8>>()
        .into()
}
