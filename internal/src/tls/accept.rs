//! The TLS handshake of one accepted connection (SPEC section 10): bounded by a timeout, abandoned
//! on shutdown, counted in `gateway_tls_handshakes_total{result}`; the TLS listener's accept loop
//! (the server's, shared with the cleartext listener) runs it in each connection's task and hands
//! the decrypted stream to the same data plane as cleartext.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::certs;
use super::server::TlsInfo;
use crate::drain;
use crate::metrics::Metrics;

/// Runs `acceptor`'s handshake on `tcp` (from `peer`) and counts its result on `metrics`: the
/// established stream with what the handshake settled, or `None` when it failed, took longer than
/// `timeout` (counted `timeout`), or `watch` fired first (a connection still handshaking has no
/// request to finish; not counted).
pub(crate) async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    metrics: &Metrics,
    watch: &mut drain::Watch,
) -> Option<(TlsStream<TcpStream>, TlsInfo)> {
    let handshake = tokio::select! {
        r = tokio::time::timeout(timeout, acceptor.accept(tcp)) => r,
        // Shutdown: a connection still handshaking has no request to finish.
        _ = watch.signaled() => return None,
    };
    let stream = match handshake {
        Err(_) => {
            metrics.tls_handshake("timeout");
            tracing::debug!(peer = %peer, "TLS handshake timed out");
            return None;
        }
        Ok(Err(e)) => {
            metrics.tls_handshake("error");
            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
            return None;
        }
        Ok(Ok(stream)) => stream,
    };
    metrics.tls_handshake("ok");
    let info = info(&stream);
    Some((stream, info))
}

/// SNI, ALPN and the client certificate's subject of an established session.
fn info(stream: &TlsStream<TcpStream>) -> TlsInfo {
    let (_, conn) = stream.get_ref();
    TlsInfo {
        sni: conn.server_name().map(str::to_string),
        alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        client_subject: conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(certs::subject)
            .map(Arc::from),
    }
}
