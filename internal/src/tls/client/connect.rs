//! [`connect`]: the TCP connection to a node and, for a TLS cluster, the handshake within the same
//! connect timeout, with the TLS 1.3 client-authentication verdict wait (see the [`super`] module
//! docs; SPEC section 10).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, ProtocolVersion, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::stream::{client_auth_verdict, NodeStream, TlsConn};
use super::{Alpn, ClusterTls, CLIENT_AUTH_VERDICT_WAIT};

/// A TLS handshake with a node that failed: the node id and the TLS alert or verification error.
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake with {node} failed: {reason}")]
pub(crate) struct HandshakeError {
    /// Node id.
    pub node: String,
    /// rustls' error text, e.g. `invalid peer certificate: UnknownIssuer` or
    /// `received fatal alert: CertificateRequired`, or the I/O error that ended the handshake.
    pub reason: String,
}

/// The [`HandshakeError`] inside `e`, if `e` is one.
pub(crate) fn handshake_error(e: &io::Error) -> Option<&HandshakeError> {
    e.get_ref()?.downcast_ref::<HandshakeError>()
}

/// The rustls error text inside an I/O error from a TLS stream, else the I/O error's text.
pub(super) fn reason(e: &io::Error) -> String {
    match e.get_ref().and_then(|r| r.downcast_ref::<rustls::Error>()) {
        Some(tls) => tls.to_string(),
        None => e.to_string(),
    }
}

/// Passes through to the configured resolver and records that the node asked for a certificate.
#[derive(Debug)]
pub(super) struct AskWatch {
    inner: Arc<dyn ResolvesClientCert>,
    asked: Arc<AtomicBool>,
}

impl ResolvesClientCert for AskWatch {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        self.inner.resolve(root_hint_subjects, sigschemes)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.inner.only_raw_public_keys()
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

/// Connects to node `id` at `addr` within `timeout` (TCP connect and, with `tls`, the handshake
/// offering `alpn`), with `TCP_NODELAY` set.
///
/// # Errors
/// The connect error, `TimedOut`, or for a failed handshake an error of kind `ConnectionRefused`
/// wrapping a [`HandshakeError`] (see [`handshake_error`]).
pub(crate) async fn connect(
    addr: &str,
    id: &str,
    tls: Option<&ClusterTls>,
    alpn: Alpn,
    timeout: Duration,
) -> io::Result<NodeStream> {
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect timed out after {timeout:?}"),
        )
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())??;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(NodeStream::Plain(tcp));
    };
    // Boxed: the handshake's state (rustls' connection, the connector future) is ~6 KB, which
    // every plain connect's future (and every future awaiting one, e.g. a WebSocket re-dial)
    // would otherwise carry and copy when it is moved (one 6 KB copy per hop).
    Box::pin(handshake(tcp, addr, id, tls, alpn, deadline, timeout)).await
}

/// The TLS part of [`connect`]: the handshake over `tcp` with node `id` at `addr`, offering
/// `alpn`, by `deadline` (`timeout` after the connect began, named in its error).
///
/// # Errors
/// As [`connect`].
async fn handshake(
    tcp: TcpStream,
    addr: &str,
    id: &str,
    tls: &ClusterTls,
    alpn: Alpn,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> io::Result<NodeStream> {
    let name = tls.server_name(addr)?;
    let base = match alpn {
        Alpn::Http1 => &tls.h1,
        Alpn::H2 => &tls.h2,
    };
    let asked = Arc::new(AtomicBool::new(false));
    let mut config = ClientConfig::clone(base);
    config.client_auth_cert_resolver = Arc::new(AskWatch {
        inner: base.client_auth_cert_resolver.clone(),
        asked: asked.clone(),
    });
    let failed = |e: &io::Error| {
        io::Error::new(
            io::ErrorKind::ConnectionRefused,
            HandshakeError {
                node: id.to_string(),
                reason: reason(e),
            },
        )
    };
    let connector = TlsConnector::from(Arc::new(config));
    let stream = match tokio::time::timeout_at(deadline, connector.connect(name, tcp)).await {
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake with {id} timed out after {timeout:?}"),
            ))
        }
        Ok(Err(e)) => return Err(failed(&e)),
        Ok(Ok(s)) => s,
    };
    let mut conn = TlsConn {
        stream,
        prefix: Vec::new(),
    };
    let tls13 = conn.stream.get_ref().1.protocol_version() == Some(ProtocolVersion::TLSv1_3);
    if tls13 && asked.load(Ordering::Relaxed) {
        let wait = deadline.min(tokio::time::Instant::now() + CLIENT_AUTH_VERDICT_WAIT);
        client_auth_verdict(&mut conn, wait)
            .await
            .map_err(|e| failed(&e))?;
    }
    Ok(NodeStream::Tls(Box::new(conn)))
}
