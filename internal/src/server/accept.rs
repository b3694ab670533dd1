//! The accept loops of the listeners (data plane, TLS, admin and `health_listen`), each the one
//! loop of [`accept_each`] with what its listener does per connection (SPEC section 4 and 10;
//! shutdown as in the [`super`] module docs).

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::conn::{data_builder, serve_data};
use super::listen::{accept_each, listen_group, ConnLimit};
use super::ServerError;
use crate::admin::Admin;
use crate::drain;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::tls::accept::handshake;

/// `l` registered with the current runtime's I/O driver; `None` (logged) if it cannot be.
fn registered(l: std::net::TcpListener, worker: usize) -> Option<TcpListener> {
    TcpListener::from_std(l)
        .map_err(|e| tracing::error!(worker, error = %e, "listener unusable"))
        .ok()
}

/// Worker `worker`'s cleartext accept loop (SPEC section 4): one task per connection, each holding
/// a permit of `limit`, until `watch` fires; then the listener closes, the loop logs how many
/// connections it accepted (`data-plane listener closed`, `worker`, `connections`), and waits for
/// its connection tasks to end.
pub(super) async fn accept_data(
    listener: std::net::TcpListener,
    proxy: Arc<Proxy>,
    mut watch: drain::Watch,
    limit: Arc<ConnLimit>,
    worker: usize,
) {
    let Some(listener) = registered(listener, worker) else {
        return;
    };
    let builder = Arc::new(data_builder(&proxy));
    let conn_watch = watch.clone();
    let serve = |tcp: tokio::net::TcpStream, peer, permit| {
        // Small writes (WebSocket frames, h2 frames) must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let (proxy, builder, watch) = (proxy.clone(), builder.clone(), conn_watch.clone());
        serve_data(tcp, peer, proxy, builder, watch, permit, None)
    };
    let (accepted, mut conns) =
        accept_each(listener, &mut watch, Some(&limit), "accept failed", serve).await;
    tracing::info!(worker, connections = accepted, "data-plane listener closed");
    while conns.join_next().await.is_some() {}
}

/// The TLS listener's pieces, set up before the gateway reports started: one socket per worker
/// (an `SO_REUSEPORT` group past one worker, [`listen_group`]) and what every worker shares.
pub(super) struct TlsListener {
    pub(super) listeners: Vec<std::net::TcpListener>,
    pub(super) certs: Arc<crate::tls::server::TlsCerts>,
    acceptor: tokio_rustls::TlsAcceptor,
}

/// One worker's part of the [`TlsListener`].
pub(super) struct TlsPart {
    pub(super) listener: std::net::TcpListener,
    certs: Arc<crate::tls::server::TlsCerts>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsListener {
    /// The listener's local address (for the start-up log line).
    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        self.listeners.first().and_then(|l| l.local_addr().ok())
    }

    /// One part per worker, each with its own socket and the shared certificates.
    pub(super) fn into_parts(self) -> Vec<TlsPart> {
        let TlsListener {
            listeners,
            certs,
            acceptor,
        } = self;
        listeners
            .into_iter()
            .map(|listener| TlsPart {
                listener,
                certs: certs.clone(),
                acceptor: acceptor.clone(),
            })
            .collect()
    }
}

/// Loads `spec`'s certificates (counted on `metrics`) and binds its address for `workers` workers.
///
/// # Errors
/// [`ServerError::Tls`] for unusable certificate files; [`ServerError::Bind`] naming the address.
pub(super) fn tls_listener(
    spec: crate::config::server_tls::ServerTlsConfig,
    metrics: Arc<Metrics>,
    workers: usize,
) -> Result<TlsListener, ServerError> {
    let addr = spec.listen;
    let certs = crate::tls::server::TlsCerts::load(spec, metrics).map_err(ServerError::Tls)?;
    let listeners =
        listen_group(addr, workers).map_err(|source| ServerError::Bind { addr, source })?;
    tls_listener_on(certs, listeners)
}

/// The TLS listener over `listeners` (bound here, or received in an upgrade) with `certs`.
///
/// # Errors
/// [`ServerError::Tls`] when the certificates make no server config.
pub(super) fn tls_listener_on(
    certs: crate::tls::server::TlsCerts,
    listeners: Vec<std::net::TcpListener>,
) -> Result<TlsListener, ServerError> {
    let config = certs.server_config().map_err(ServerError::Tls)?;
    Ok(TlsListener {
        listeners,
        certs: Arc::new(certs),
        acceptor: tokio_rustls::TlsAcceptor::from(config),
    })
}
/// Worker `worker`'s TLS listener (`t`): the cleartext data plane over each decrypted stream (SPEC
/// section 10), with RFC 8441 extended CONNECT enabled when `h2` is offered. One task per
/// connection, holding a permit of `limit` (shared by every worker's TLS listener, so `[limits]
/// max_connections` holds for the process), runs the handshake ([`crate::tls::accept::handshake`],
/// bounded by `header_read_timeout`) and then serves the stream. On `watch` the listener closes and
/// the loop waits for its connection tasks.
pub(super) async fn accept_tls(
    t: TlsPart,
    proxy: Arc<Proxy>,
    mut watch: drain::Watch,
    limit: Arc<ConnLimit>,
    worker: usize,
) {
    let Some(listener) = registered(t.listener, worker) else {
        return;
    };
    let mut builder = data_builder(&proxy);
    if t.certs.offers_h2() {
        builder.h2.enable_connect_protocol();
    }
    let builder = Arc::new(builder);
    let handshake_timeout = proxy.settings.limits.header_read_timeout;
    let conn_watch = watch.clone();
    let serve = |tcp: tokio::net::TcpStream, peer, permit| {
        // Small writes (WebSocket frames, h2 frames) must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let acceptor = t.acceptor.clone();
        let (proxy, builder, mut watch) = (proxy.clone(), builder.clone(), conn_watch.clone());
        async move {
            let (metrics, timeout) = (&proxy.metrics, handshake_timeout);
            let handshake = handshake(&acceptor, tcp, peer, timeout, metrics, &mut watch);
            let Some((stream, info)) = handshake.await else {
                return;
            };
            serve_data(stream, peer, proxy, builder, watch, permit, Some(info)).await;
        }
    };
    let (_, mut conns) = accept_each(
        listener,
        &mut watch,
        Some(&limit),
        "TLS accept failed",
        serve,
    )
    .await;
    while conns.join_next().await.is_some() {}
}

/// Serves the admin listener (`health_only` = false) or the `health_listen` one: accepts until
/// `accepting` is cancelled (a child of `stop`; alone after an upgrade handed the listener over),
/// then serves the connections still open until they end or `stop` drops them.
pub(super) async fn accept_admin(
    listener: TcpListener,
    admin: Arc<Admin>,
    mut accepting: CancellationToken,
    stop: CancellationToken,
    health_only: bool,
) {
    let serve = |tcp, _, _| {
        let a = admin.clone();
        async move {
            let svc = service_fn(move |req| {
                let a = a.clone();
                async move {
                    if health_only {
                        a.handle_health(req).await
                    } else {
                        a.handle(req).await
                    }
                }
            });
            let b = hyper::server::conn::http1::Builder::new();
            if let Err(e) = b.serve_connection(TokioIo::new(tcp), svc).await {
                tracing::debug!(error = %e, "admin connection ended with error");
            }
        }
    };
    let (_, mut conns) =
        accept_each(listener, &mut accepting, None, "admin accept failed", serve).await;
    tokio::select! {
        () = stop.cancelled() => conns.abort_all(),
        () = async { while conns.join_next().await.is_some() {} } => {}
    }
}
