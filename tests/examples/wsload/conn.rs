//! Dialing: `ws://` over TCP or `wss://` over rustls, the WebSocket handshake, the node's hello,
//! and opening many sockets with a bounded number of handshakes in flight.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{stream, StreamExt};
use nix::sys::socket::{setsockopt, sockopt::IpBindAddressNoPort};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A client byte stream: TCP for `ws://`, TLS over TCP for `wss://`.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One client WebSocket over either stream.
pub(crate) type Ws = WebSocketStream<Box<dyn Io>>;

/// Bound on one handshake plus hello, and on one echo round trip.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how to dial: the URL, for `wss://` the TLS connector (trusting `--ca`), the source
/// addresses (`--source-addrs`) and the WebSocket settings (`--read-buffer`).
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) tls: Option<tokio_rustls::TlsConnector>,
    /// Each connection binds the next of these in turn; empty: the kernel picks the source.
    sources: Arc<[Ipv4Addr]>,
    /// The turn of the next connection in `sources` (shared by the clones).
    next_source: Arc<AtomicUsize>,
    /// None: tokio-tungstenite's defaults (a 128 KiB read buffer per socket).
    ws_config: Option<WebSocketConfig>,
}

impl Target {
    /// `url` (`ws://` or `wss://`); `ca` (PEM file) is required for `wss://`. Errors: no `ca`
    /// for `wss://`, an unreadable or invalid PEM file, no TLS protocol version available.
    pub(crate) fn new(url: &str, ca: Option<&str>) -> Result<Target> {
        let tls = if url.starts_with("wss://") {
            let ca = ca.context("wss:// needs --ca FILE")?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("read {ca}"))? {
                roots.add(c.context("CA PEM")?).context("add CA")?;
            }
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)))
        } else {
            None
        };
        Ok(Target {
            url: url.to_owned(),
            tls,
            sources: Arc::from(Vec::new()),
            next_source: Arc::new(AtomicUsize::new(0)),
            ws_config: None,
        })
    }

    /// Binds connection `i` to `sources[i % len]` (`--source-addrs`): one host then holds more
    /// than the ~64k client ports one source address has towards one listener.
    pub(crate) fn with_sources(mut self, sources: Vec<Ipv4Addr>) -> Target {
        self.sources = Arc::from(sources);
        self
    }

    /// A WebSocket read buffer of `bytes` per socket (`--read-buffer`) instead of 128 KiB.
    pub(crate) fn with_read_buffer(mut self, bytes: usize) -> Target {
        self.ws_config = Some(WebSocketConfig::default().read_buffer_size(bytes));
        self
    }

    /// The TCP connection: from the next source address when `--source-addrs` is set.
    async fn tcp(&self, host: &str, port: u16) -> Result<TcpStream> {
        if self.sources.is_empty() {
            return TcpStream::connect((host, port)).await.context("connect");
        }
        let i = self.next_source.fetch_add(1, Ordering::Relaxed) % self.sources.len();
        let dst = tokio::net::lookup_host((host, port))
            .await
            .context("resolve")?
            .find(SocketAddr::is_ipv4)
            .context("the url's host has no IPv4 address (--source-addrs are IPv4)")?;
        let sock = TcpSocket::new_v4().context("socket")?;
        // The port is picked at connect time, unique per 4-tuple (IP_BIND_ADDRESS_NO_PORT): a
        // bind to port 0 would reserve the port for every destination, and the ports so held are
        // skipped by every other connect on the host (the proxies' own dials to their nodes).
        setsockopt(&sock, IpBindAddressNoPort, &true).context("IP_BIND_ADDRESS_NO_PORT")?;
        sock.bind(SocketAddr::new(IpAddr::V4(self.sources[i]), 0))
            .context("bind the source address")?;
        sock.connect(dst).await.context("connect")
    }

    /// TCP connect (from the next `--source-addrs` address, if any), the TLS handshake for
    /// `wss://`, then the WebSocket handshake (RFC 6455 section 4); errors name the step that
    /// failed.
    async fn connect(&self) -> Result<Ws> {
        let req = self.url.as_str().into_client_request().context("url")?;
        let host = req.uri().host().context("url has no host")?.to_owned();
        let port = req
            .uri()
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = self.tcp(&host, port).await?;
        let io: Box<dyn Io> = match &self.tls {
            None => Box::new(tcp),
            Some(c) => {
                let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
                    .context("server name")?;
                Box::new(c.connect(name, tcp).await.context("TLS handshake")?)
            }
        };
        let (ws, _) = tokio_tungstenite::client_async_with_config(req, io, self.ws_config)
            .await
            .context("handshake")?;
        Ok(ws)
    }
}

/// One connection: handshake, then the node's hello (any first data message); returns the socket
/// and the hello's text (lossy UTF-8 for a binary one). Errors: the handshake, a read error, a
/// close before the hello, or [`IO_TIMEOUT`] for the whole.
async fn open(target: Target) -> Result<(Ws, String)> {
    timeout(IO_TIMEOUT, async move {
        let mut ws = target.connect().await?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => return Ok((ws, t.as_str().to_owned())),
                Some(Ok(Message::Binary(b))) => {
                    return Ok((ws, String::from_utf8_lossy(&b).into_owned()))
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e).context("hello"),
                None => bail!("closed before the hello"),
            }
        }
    })
    .await
    .context("handshake timed out")?
}

/// Opens `want` sockets to `target` with `concurrency` handshakes in flight; returns the open ones
/// (with their hellos), the number that failed and the first failure.
pub(crate) async fn open_many(
    target: &Target,
    want: usize,
    concurrency: usize,
) -> (Vec<(Ws, String)>, usize, Option<String>) {
    let results: Vec<Result<(Ws, String)>> = stream::iter(0..want)
        .map(|_| open(target.clone()))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut open = Vec::with_capacity(want);
    let mut failed = 0usize;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(c) => open.push(c),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    (open, failed, first_error)
}
