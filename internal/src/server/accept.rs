//! The accept loops (data plane, TLS, admin and `health_listen`) and the serving of one downstream
//! connection (SPEC section 4 and 10; shutdown as in the [`super`] module docs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::listen::{listen_group, ConnLimit};
use super::ServerError;
use crate::admin::Admin;
use crate::drain;
use crate::metrics::Metrics;
use crate::proxy::downstream::http1 as own_h1;
use crate::proxy::downstream::http1::rewind::Rewind;
use crate::proxy::{DownstreamConn, Proxy};

/// hyper's server for what the gateway's own HTTP/1.x driver ([`crate::proxy::downstream::http1`]) does not
/// serve: HTTP/2 connections.
pub(super) struct DataServers {
    h2: http2::Builder<TokioExecutor>,
}

pub(super) fn data_builder(p: &Proxy) -> DataServers {
    let l = &p.settings.limits;
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_header_list_size(l.h2.max_header_list)
        .max_concurrent_streams(l.h2.max_concurrent_streams)
        // A lifetime count of resets the library sends cuts honest long-lived connections
        // (hyperium/h2 #856); resets are limited as a rate by proxy::downstream::h2::watch instead.
        .max_local_error_reset_streams(None)
        // h2 ends a connection with more than 20 client-reset streams waiting to be accepted
        // (its rapid-reset guard). Every client RST_STREAM is already charged by proxy::downstream::h2::watch at
        // read time, within a burst of `h2_max_resets_per_second`; h2's cap of 20 only cut honest
        // cancellers whose frames queued up while the gateway's worker was busy for ~130 ms
        // (h2_abuse::honest_canceller_below_the_cap_is_never_cut on a loaded machine). Twice the
        // burst keeps it as a backstop the meter always reaches first.
        .max_pending_accept_reset_streams(
            (l.h2.max_resets_per_second.get() as usize)
                .saturating_mul(2)
                .max(20),
        )
        .keep_alive_interval(Duration::from_secs(30));
    DataServers { h2 }
}

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
    let mut conns = JoinSet::new();
    let mut accepted: u64 = 0;
    loop {
        let (tcp, peer) = tokio::select! {
            _ = watch.signaled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(permit) = limit.take(&mut watch).await else {
            break;
        };
        accepted += 1;
        let _ = tcp.set_nodelay(true);
        conns.spawn(serve_data(
            tcp,
            peer,
            proxy.clone(),
            builder.clone(),
            watch.clone(),
            permit,
            None,
        ));
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
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
    let config = certs.server_config().map_err(ServerError::Tls)?;
    let listeners =
        listen_group(addr, workers).map_err(|source| ServerError::Bind { addr, source })?;
    Ok(TlsListener {
        listeners,
        certs: Arc::new(certs),
        acceptor: tokio_rustls::TlsAcceptor::from(config),
    })
}

/// Worker `worker`'s TLS listener (`t`): the cleartext data plane over each decrypted stream (SPEC section 10), with
/// RFC 8441 extended CONNECT enabled when `h2` is offered; connections hold permits of `limit`.
pub(super) async fn accept_tls(
    t: TlsPart,
    proxy: Arc<Proxy>,
    watch: drain::Watch,
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
    let limits = crate::tls::accept::AcceptLimits {
        connections: limit.permits(),
        handshake_timeout: proxy.settings.limits.header_read_timeout,
    };
    let metrics = proxy.metrics.clone();
    let serve_watch = watch.clone();
    let serve = Arc::new(move |stream, peer, info, permit| {
        serve_data(
            stream,
            peer,
            proxy.clone(),
            builder.clone(),
            serve_watch.clone(),
            permit,
            Some(info),
        )
    });
    crate::tls::accept::accept_tls(listener, t.acceptor, metrics, limits, watch, serve).await;
}

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves one downstream connection over any byte stream (TCP, or TLS over TCP with `tls` set):
/// the first bytes tell HTTP/2 (its preface, hyper's h2 server) from HTTP/1.x (the gateway's own
/// driver, [`crate::proxy::downstream::http1::conn`], which also hands an accepted WebSocket upgrade's socket
/// to the relay).
pub(super) async fn serve_data<I>(
    mut io: I,
    peer: SocketAddr,
    proxy: Arc<Proxy>,
    builder: Arc<DataServers>,
    mut watch: drain::Watch,
    _permit: OwnedSemaphorePermit,
    tls: Option<crate::tls::server::TlsInfo>,
) where
    I: own_h1::upgrade::Socket,
{
    let _gauge = proxy
        .metrics
        .connection(if tls.is_some() { "https" } else { "http" });
    let dc = Arc::new(DownstreamConn::new(peer).with_tls(tls));
    let mut first = BytesMut::new();
    while first.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&first) {
        if first.capacity() == 0 {
            first.reserve(8 * 1024);
        }
        tokio::select! {
            r = io.read_buf(&mut first) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = watch.signaled() => return,
        }
    }
    if first.starts_with(H2_PREFACE) {
        serve_h2(
            Rewind::new(first.freeze(), io),
            &proxy,
            &builder,
            watch,
            &dc,
        )
        .await;
    } else {
        own_h1::conn::serve(io, first, proxy.clone(), dc.clone(), watch).await;
    }
    // The connection was its own affinity key: with it gone, so is the binding.
    if let Some(id) = dc.conn_id.get() {
        proxy.hopper.store().remove(id).await;
    }
}

/// hyper's service over the proxy for connection `dc`.
fn service(
    proxy: &Arc<Proxy>,
    dc: &Arc<DownstreamConn>,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = http::Response<crate::proxy::ProxyBody>,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<
        Output = Result<http::Response<crate::proxy::ProxyBody>, std::convert::Infallible>,
    > + Send,
> + Clone {
    let (proxy, dc) = (proxy.clone(), dc.clone());
    service_fn(move |req: http::Request<Incoming>| {
        let req = req.map(|b| b.map_err(Into::into).boxed_unsync());
        // Boxed: hyper's h2 server spawns one task per stream and moves the service future into
        // it (and tokio moves it again into the task cell and its output stage); the request's
        // future is tens of KiB, so unboxed those moves were half of the instructions of a gRPC
        // call (issue 16, bench/README "HTTP/2 and gRPC per call").
        // The box is allocated before the future is made, so the future can be written into it
        // in place rather than built on the stack and copied (~11,000 instructions per call).
        let slot = Box::new_uninit();
        Box::into_pin(Box::write(slot, proxy.clone().handle(req, dc.clone())))
    })
}

/// Serves an HTTP/2 connection (its preface in `io`) with hyper's h2 server.
///
/// Longer than 80 lines on purpose: the connection's whole life (serve, the drain signal, the
/// GOAWAY of an h2 connection bound to a node that stops being usable, the close grace) is one
/// `select!` loop whose arms share the connection state.
async fn serve_h2<I>(
    io: Rewind<I>,
    proxy: &Arc<Proxy>,
    builder: &DataServers,
    mut watch: drain::Watch,
    dc: &Arc<DownstreamConn>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = dc.peer;
    let limits = &proxy.settings.limits;
    // HTTP/2 abuse limits on the raw frames (SPEC section 4; CASE-25, CASE-26).
    let abuse_metrics = proxy.metrics.clone();
    let io = crate::proxy::downstream::h2::watch::H2Watch::new(
        io,
        limits.h2.max_resets_per_second.get(),
        limits.header_read_timeout,
        Arc::new(move |a: crate::proxy::downstream::h2::frames::Abuse| {
            abuse_metrics
                .h2_goaway
                .get_or_create(&crate::metrics::ReasonLabel { reason: a.reason() })
                .inc();
        }),
    )
    .from_source(peer.ip());
    // The watch must see the preface before hyper writes its SETTINGS (it takes a connection
    // the gateway speaks on first for HTTP/1.x): it is read through the watch here, then
    // replayed to hyper, as hyper-util's version detection did.
    let mut io = io;
    let mut preface = [0u8; H2_PREFACE.len()];
    if io.read_exact(&mut preface).await.is_err() {
        return;
    }
    let io = Rewind::new(bytes::Bytes::from_static(H2_PREFACE), io);
    let conn = builder
        .h2
        .serve_connection(TokioIo::new(io), service(proxy, dc));
    tokio::pin!(conn);
    let mut bound = dc.bound.subscribe();
    let mut node_signal: Option<tokio::sync::watch::Receiver<crate::registry::NodeSignal>> = None;
    let mut closing = false;
    loop {
        let node_changed = async {
            match node_signal.as_mut() {
                Some(rx) => rx.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %peer, error = %e, "downstream connection ended with error");
                }
                return;
            }
            _ = watch.signaled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            r = bound.changed() => {
                if r.is_err() { continue; }
                // Marked changed so its current state is checked at once: the node may have
                // started draining between the placement and this subscription.
                node_signal = bound.borrow_and_update().as_ref().map(|rt| {
                    let mut rx = rt.subscribe();
                    rx.mark_changed();
                    rx
                });
            }
            alive = node_changed, if !closing => {
                let usable = node_signal.as_ref().is_none_or(|rx| rx.borrow().usable);
                if alive && !usable {
                    // The h2 connection's node drains or was ejected: GOAWAY, in-flight streams finish,
                    // the client's next connection binds to a healthy node (SPEC section 5).
                    closing = true;
                    tracing::info!(peer = %peer, "node of this h2 connection is going away; sending GOAWAY");
                    if let Some(id) = dc.conn_id.get() {
                        proxy.hopper.store().remove(id).await;
                    }
                    conn.as_mut().graceful_shutdown();
                } else if !alive {
                    node_signal = None;
                }
            }
        }
    }
}

/// Serves the admin listener (`health_only` = false) or the `health_listen` one until `stop`.
pub(super) async fn accept_admin(
    listener: TcpListener,
    admin: Arc<Admin>,
    stop: CancellationToken,
    health_only: bool,
) {
    let mut conns = JoinSet::new();
    loop {
        let (tcp, _) = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let a = admin.clone();
        conns.spawn(async move {
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
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}
