//! Listeners, connection limits, task wiring, signals, and [`run`] (the Go original's `cmd/server/main.go` wiring).
//!
//! Spawns: the data-plane accept loop (one task per connection, bounded by a semaphore), the admin
//! accept loop (and the optional `health_listen` one), the node watcher of the event feed, the
//! reload triggers (file watch, SIGHUP), DNS discovery and, through [`Routing`], the health checks. systemd is
//! told `READY=1` once the listeners accept and `STOPPING=1` on shutdown ([`crate::notify`]).
//! On the shutdown future: readiness goes false (the admin and health listeners keep answering
//! until `run` returns, so `/readyz` says 503 meanwhile), data accepting stops, every connection is
//! told to wind down (GOAWAY for h2, `Connection: close` for HTTP/1.1, close 1001 for WebSockets),
//! and in-flight work gets up to `shutdown_timeout`. Streams still open near its end are closed as
//! at a drain deadline (gRPC: `grpc-status: 14`), then what is left is dropped.
//!
//! Each h2 connection that carries no affinity header is bound to the node of its first request
//! ([`DownstreamConn::bound`]); when that node stops being usable (drain, ejection) the connection
//! gets GOAWAY and its binding is removed, so the client's next connection lands on a healthy node.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::drains::Drains;
use crate::admin::status::Readiness;
use crate::admin::Admin;
use crate::config::{Config, IdMode, StoreKind};
use crate::drain;
use crate::hopper::affinity::{AffinityStore, MemoryStore, RedisSettings, RedisStore};
use crate::hopper::{ConnIds, Hopper};
use crate::metrics::Metrics;
use crate::proxy::upstream::Upstream;
use crate::proxy::{DownstreamConn, Proxy, ProxySettings};
use crate::registry::Registry;
use crate::routing::reload::Routing;

/// The part of `shutdown_timeout` (at most a tenth of it) kept at its end for closing open streams
/// cleanly: enough for trailers to be written on a loopback or LAN connection.
const SHUTDOWN_CLOSE_GRACE: Duration = Duration::from_millis(500);
/// Accept queue length of the listeners (capped by the kernel's `net.core.somaxconn`). Rust's
/// default of 128 drops the SYNs of a burst of clients (e.g. a fleet of WebSockets reconnecting
/// after a gateway restart), each dropped SYN costing the client a 1 s retransmit (RFC 6298
/// section 2: initial RTO of 1 s).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener on `addr` with `SO_REUSEADDR` and [`LISTEN_BACKLOG`].
///
/// # Errors
/// The socket, bind or listen call's I/O error (e.g. the address is in use).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Signed ids without a key.
    #[error("affinity.ids = \"signed\" needs a key in env var {0}")]
    MissingSecret(String),
    /// The affinity store could not start.
    #[error("affinity store: {0}")]
    Store(String),
    /// A `[server.tls]` certificate, key or client CA file is unusable.
    #[error("{0}")]
    Tls(#[source] crate::config::ConfigError),
}

/// What [`run`] needs besides the config.
pub struct Options {
    /// Validated config.
    pub config: Config,
    /// File to re-read on reload; `None` = embedded defaults.
    pub file: Option<PathBuf>,
    /// CLI overrides re-applied to every reloaded config.
    pub overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// Runs the gateway until `shutdown` resolves, then shuts down gracefully.
///
/// # Errors
/// [`ServerError`] if a listener cannot bind or the affinity store cannot start.
pub async fn run(opts: Options, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    let cfg = opts.config.clone();
    // One crypto provider for the process: the listener, TLS to nodes and `rediss://` alike.
    crate::tls::certs::install_provider();
    for c in cfg.clusters.iter() {
        if c.tls.as_ref().is_some_and(|t| !t.spec.verify) {
            tracing::warn!(cluster = %c.name, "clusters.tls.verify = false: node certificates are not verified (any certificate and name are accepted)");
        }
    }
    let data = listen(cfg.server.listen).map_err(|source| ServerError::Bind {
        addr: cfg.server.listen,
        source,
    })?;
    let admin_l = listen(cfg.server.admin_listen).map_err(|source| ServerError::Bind {
        addr: cfg.server.admin_listen,
        source,
    })?;
    let health_l = match cfg.server.health_listen {
        Some(addr) => Some(listen(addr).map_err(|source| ServerError::Bind { addr, source })?),
        None => None,
    };
    let metrics = Arc::new(Metrics::new());
    let tls = match cfg.server.tls.clone() {
        None => None,
        Some(spec) => Some(tls_listener(spec, metrics.clone())?),
    };
    let registry = Arc::new(Registry::new(metrics.clone()));
    let store = match &cfg.affinity.store {
        StoreKind::Memory => {
            AffinityStore::Memory(MemoryStore::new(cfg.affinity.max_entries, cfg.affinity.ttl))
        }
        StoreKind::Redis { url } => {
            let settings = RedisSettings {
                url: url.clone(),
                key_prefix: cfg.affinity.key_prefix.clone(),
                ttl: cfg.affinity.ttl,
                timeout: cfg.affinity.redis_timeout,
                max_entries: cfg.affinity.max_entries,
                ca: cfg.affinity.redis_ca.clone(),
            };
            AffinityStore::Redis(
                RedisStore::connect(settings, metrics.clone())
                    .await
                    .map_err(|e| ServerError::Store(e.to_string()))?,
            )
        }
    };
    let ids = conn_ids(&cfg)?;
    let routing = Arc::new(Routing::new(
        opts.config,
        opts.file.clone(),
        opts.overrides,
        registry,
        metrics.clone(),
    ));
    let hopper = Arc::new(Hopper::new(store, metrics.clone()));
    let (signal, watch) = drain::channel();
    let proxy = Arc::new(Proxy {
        routing: routing.clone(),
        hopper: hopper.clone(),
        ids,
        upstream: Arc::new(
            Upstream::new(cfg.limits.connect_timeout, cfg.limits.upstream_idle_timeout)
                .with_h2_max_header_list(cfg.limits.h2.max_header_list),
        ),
        metrics: metrics.clone(),
        settings: ProxySettings {
            affinity_header: cfg.affinity.header.clone(),
            trusted: cfg.server.trusted_proxies.clone(),
            limits: cfg.limits.clone(),
            access_log: cfg.server.access_log,
            zone: cfg.server.zone.clone(),
        },
        shutdown: watch.clone(),
    });
    let readiness = Arc::new(Readiness::new());
    // Drains other replicas stored are applied before the first request is served (SPEC section 7).
    let drains = Arc::new(Drains::new(routing.clone(), hopper.clone()));
    drains.sync().await;
    let admin = Arc::new(Admin {
        routing: routing.clone(),
        hopper: hopper.clone(),
        metrics: metrics.clone(),
        token: cfg.server.admin_token.clone(),
        readiness: readiness.clone(),
        tls: tls.as_ref().map(|t| t.certs.clone()),
        drains: drains.clone(),
    });
    tracing::info!(listen = %data.local_addr().map(|a| a.to_string()).unwrap_or_default(), admin = %admin_l.local_addr().map(|a| a.to_string()).unwrap_or_default(), generation = routing.table().generation, "hopping-gateway started");

    let mut tasks = JoinSet::new();
    tasks.spawn(accept_data(data, proxy.clone(), watch.clone()));
    // The admin and health listeners outlive the drain: they stop only when `run` returns.
    let stop_admin = CancellationToken::new();
    let mut admin_tasks = JoinSet::new();
    admin_tasks.spawn(accept_admin(
        admin_l,
        admin.clone(),
        stop_admin.clone(),
        false,
    ));
    if let Some(l) = health_l {
        admin_tasks.spawn(accept_admin(l, admin, stop_admin.clone(), true));
    }
    tasks.spawn(crate::admin::status::watch_nodes(
        routing.clone(),
        metrics.clone(),
        watch.clone(),
    ));
    if let Some(t) = tls {
        tracing::info!(listen = %t.listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "TLS listener started");
        tasks.spawn(crate::tls::server::watch_reload(
            t.certs.clone(),
            watch.clone(),
        ));
        tasks.spawn(accept_tls(t, proxy.clone(), watch.clone()));
    }
    tasks.spawn(drains.run(watch.clone()));
    tasks.spawn(crate::routing::triggers::watch_triggers(
        routing.clone(),
        opts.file,
        watch.clone(),
    ));
    tasks.spawn(crate::discovery::run(
        routing.clone(),
        cfg.server.resolver,
        metrics.clone(),
        watch.clone(),
    ));
    drop(watch);
    // The sockets listen since bind: connections queue and are accepted by the loops just spawned.
    readiness.set_listening();
    crate::notify::ready();

    shutdown.await;
    crate::notify::stopping();
    tracing::info!(timeout = ?cfg.server.shutdown_timeout, "shutting down: draining connections");
    readiness.set_stopping();
    signal.fire();
    drop(proxy);
    // The last part of shutdown_timeout is kept for closing streams still open at its end
    // cleanly (gRPC: grpc-status 14 trailers) before the connections are dropped.
    let grace = (cfg.server.shutdown_timeout / 10).min(SHUTDOWN_CLOSE_GRACE);
    let finished = {
        let wait = async {
            while tasks.join_next().await.is_some() {}
            signal.closed().await;
        };
        tokio::pin!(wait);
        match tokio::time::timeout(cfg.server.shutdown_timeout - grace, &mut wait).await {
            Ok(()) => true,
            Err(_) => {
                tracing::warn!("shutdown timeout reached; closing streams still open");
                // Exactly what a drain deadline does to what is left on a node (SPEC section 5).
                let now = tokio::time::Instant::now();
                for node in routing.table().nodes() {
                    node.runtime.start_drain(now);
                }
                tokio::time::timeout(grace, &mut wait).await.is_ok()
            }
        }
    };
    if !finished {
        tracing::warn!("closing what is left");
        tasks.abort_all();
    }
    routing.shutdown().await;
    hopper.store().shutdown().await;
    stop_admin.cancel();
    while admin_tasks.join_next().await.is_some() {}
    tracing::info!("hopping-gateway stopped");
    Ok(())
}

fn conn_ids(cfg: &Config) -> Result<ConnIds, ServerError> {
    if cfg.affinity.ids == IdMode::Client {
        return Ok(ConnIds::new(IdMode::Client, Vec::new()));
    }
    let key = std::env::var(&cfg.affinity.secret_env)
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ServerError::MissingSecret(cfg.affinity.secret_env.clone()))?;
    let mut keys = vec![key.into_bytes()];
    if let Ok(old) = std::env::var(&cfg.affinity.old_secrets_env) {
        keys.extend(
            old.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| k.as_bytes().to_vec()),
        );
    }
    Ok(ConnIds::new(IdMode::Signed, keys))
}

fn data_builder(p: &Proxy) -> auto::Builder<TokioExecutor> {
    let l = &p.settings.limits;
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(l.header_read_timeout)
        // hyper's own limits sit above ours so that proxy::guard answers 414/431 with a JSON body;
        // past these hyper refuses by itself (414 for targets over 65,534 bytes, 431 otherwise).
        .max_headers(l.max_headers.saturating_mul(4).max(l.max_headers + 1))
        .max_buf_size(
            (l.max_request_line + l.max_header_bytes)
                .saturating_mul(2)
                .max(128 * 1024),
        );
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(l.h2.max_header_list)
        .max_concurrent_streams(l.h2.max_concurrent_streams)
        // A lifetime count of resets the library sends cuts honest long-lived connections
        // (hyperium/h2 #856); resets are limited as a rate by proxy::h2_watch instead.
        .max_local_error_reset_streams(None)
        .keep_alive_interval(Duration::from_secs(30));
    b
}

async fn accept_data(listener: TcpListener, proxy: Arc<Proxy>, mut watch: drain::Watch) {
    let limit = Arc::new(Semaphore::new(proxy.settings.limits.max_connections));
    let builder = Arc::new(data_builder(&proxy));
    let mut conns = JoinSet::new();
    let mut warned = false;
    loop {
        let permit = tokio::select! {
            _ = watch.signaled() => break,
            p = limit.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        if limit.available_permits() == 0 && !warned {
            warned = true;
            tracing::warn!(
                max_connections = proxy.settings.limits.max_connections,
                "connection limit reached; new connections wait"
            );
        } else if limit.available_permits() > 0 {
            warned = false;
        }
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
    while conns.join_next().await.is_some() {}
}

/// The TLS listener's pieces, set up before the gateway reports started.
struct TlsListener {
    listener: TcpListener,
    certs: Arc<crate::tls::server::TlsCerts>,
    acceptor: tokio_rustls::TlsAcceptor,
}

fn tls_listener(
    spec: crate::config::server_tls::ServerTlsConfig,
    metrics: Arc<Metrics>,
) -> Result<TlsListener, ServerError> {
    let addr = spec.listen;
    let certs = crate::tls::server::TlsCerts::load(spec, metrics).map_err(ServerError::Tls)?;
    let config = certs.server_config().map_err(ServerError::Tls)?;
    let listener = listen(addr).map_err(|source| ServerError::Bind { addr, source })?;
    Ok(TlsListener {
        listener,
        certs: Arc::new(certs),
        acceptor: tokio_rustls::TlsAcceptor::from(config),
    })
}

/// The TLS listener: the cleartext data plane over each decrypted stream (SPEC section 10), with
/// RFC 8441 extended CONNECT enabled when `h2` is offered.
async fn accept_tls(t: TlsListener, proxy: Arc<Proxy>, watch: drain::Watch) {
    let mut builder = data_builder(&proxy);
    if t.certs.offers_h2() {
        builder.http2().enable_connect_protocol();
    }
    let builder = Arc::new(builder);
    let limits = crate::tls::accept::AcceptLimits {
        max_connections: proxy.settings.limits.max_connections,
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
    crate::tls::accept::accept_tls(t.listener, t.acceptor, metrics, limits, watch, serve).await;
}

/// Serves one downstream connection over any byte stream (TCP, or TLS over TCP with `tls` set).
async fn serve_data<I>(
    io: I,
    peer: SocketAddr,
    proxy: Arc<Proxy>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut watch: drain::Watch,
    _permit: tokio::sync::OwnedSemaphorePermit,
    tls: Option<crate::tls::server::TlsInfo>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let _gauge = proxy
        .metrics
        .connection(if tls.is_some() { "https" } else { "http" });
    let dc = Arc::new(DownstreamConn::new(peer).with_tls(tls));
    let svc_proxy = proxy.clone();
    let svc_dc = dc.clone();
    let svc = service_fn(move |req| svc_proxy.clone().handle(req, svc_dc.clone()));
    // The framing watch follows HTTP/1.x framing on the raw bytes (CASE-13: CL together with TE).
    // It also judges each head before hyper reads it, so malformed heads get JSON answers.
    let limits = &proxy.settings.limits;
    let io = crate::proxy::framing::FramingWatch::new(
        io,
        dc.framing.clone(),
        limits.into(),
        limits.header_read_timeout,
    );
    // HTTP/2 abuse limits on the raw frames (SPEC section 4; CASE-25, CASE-26).
    let abuse_metrics = proxy.metrics.clone();
    let io = crate::proxy::h2_watch::H2Watch::new(
        io,
        limits.h2.max_resets_per_second.get(),
        limits.header_read_timeout,
        Arc::new(move |a: crate::proxy::h2_frames::Abuse| {
            abuse_metrics
                .h2_goaway
                .get_or_create(&crate::metrics::ReasonLabel { reason: a.reason() })
                .inc();
        }),
    );
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
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
                // The connection was its own affinity key: with it gone, so is the binding.
                if let Some(id) = dc.conn_id.get() {
                    proxy.hopper.store().remove(id).await;
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
async fn accept_admin(
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
