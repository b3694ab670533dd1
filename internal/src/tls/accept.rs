//! The TLS listener's accept loop (SPEC section 10): one task per connection, bounded by a
//! semaphore like the cleartext listener; each task runs the handshake (bounded by a timeout and
//! abandoned on shutdown), counts it in `gateway_tls_handshakes_total{result}`, and hands the
//! decrypted stream to the caller's `serve`, which runs the same data plane as cleartext.
//! The loop stops accepting when the drain signal fires and joins its connection tasks. With
//! `--workers N` each worker runs this loop on its own listener, all sharing one set of permits.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::certs;
use super::server::TlsInfo;
use crate::drain;
use crate::metrics::Metrics;

/// Limits of the TLS accept loop.
#[derive(Debug, Clone)]
pub(crate) struct AcceptLimits {
    /// Permits for concurrent connections (handshaking or served), shared by every worker's TLS
    /// listener (`[limits] max_connections` holds for the process); accepted connections wait for one.
    pub connections: Arc<Semaphore>,
    /// A handshake not done within this is dropped (counted `timeout`).
    pub handshake_timeout: Duration,
}

/// Accepts TLS connections on `listener` until `watch` fires, then waits for its connection tasks.
/// `serve` gets each established stream with its peer, what the handshake settled, and the
/// connection's permit (drop it when the connection ends).
pub(crate) async fn accept_tls<F, Fut>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    metrics: Arc<Metrics>,
    limits: AcceptLimits,
    mut watch: drain::Watch,
    serve: Arc<F>,
) where
    F: Fn(TlsStream<TcpStream>, SocketAddr, TlsInfo, OwnedSemaphorePermit) -> Fut
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let limit = limits.connections;
    let handshake_timeout = limits.handshake_timeout;
    let mut conns = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = watch.signaled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "TLS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Accepted first, then a permit (waiting for one if none is free): a permit taken before
        // `accept` would sit idle in every worker's loop while the others' connections wait.
        let permit = match limit.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::select! {
                _ = watch.signaled() => break,
                p = limit.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            },
        };
        // Small writes (WebSocket frames, h2 frames) must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let metrics = metrics.clone();
        let serve = serve.clone();
        let mut conn_watch = watch.clone();
        conns.spawn(async move {
            let handshake = tokio::select! {
                r = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)) => r,
                // Shutdown: a connection still handshaking has no request to finish.
                _ = conn_watch.signaled() => return,
            };
            let stream = match handshake {
                Err(_) => {
                    metrics.tls_handshake("timeout");
                    tracing::debug!(peer = %peer, "TLS handshake timed out");
                    return;
                }
                Ok(Err(e)) => {
                    metrics.tls_handshake("error");
                    tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                    return;
                }
                Ok(Ok(stream)) => stream,
            };
            metrics.tls_handshake("ok");
            let info = info(&stream);
            serve(stream, peer, info, permit).await;
        });
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
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
