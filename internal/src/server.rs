//! Listeners, connection limits, task wiring, signals, and [`run`] (the Go original's `cmd/server/main.go` wiring).
//!
//! Spawns: the data-plane workers ([`workers`]: per worker an accept loop, one task per connection,
//! bounded by a process-wide limit), the admin
//! accept loop (and the optional `health_listen` one), the node watcher of the event feed, the
//! reload triggers (file watch, SIGHUP), DNS discovery and, through [`Routing`], the health checks. systemd is
//! told `READY=1` once the listeners accept and `STOPPING=1` on shutdown ([`crate::notify`]).
//! On the shutdown future: readiness goes false (the admin and health listeners keep answering
//! until `run` returns, so `/readyz` says 503 meanwhile), data accepting stops, every connection is
//! told to wind down (GOAWAY for h2, `Connection: close` for HTTP/1.1, close 1001 for WebSockets;
//! with `shutdown_spread`, each WebSocket instead gets the reconnect hint at a random point of that
//! period), and in-flight work gets up to `shutdown_timeout` after the spread. Streams still open
//! near its end are closed as at a drain deadline (gRPC: `grpc-status: 14`), then what is left is
//! dropped.
//!
//! Upgrades (SPEC section 13, [`crate::upgrade`]): a process started by one takes its listeners and
//! state from the handover before anything else (`handover` module), and tells systemd `MAINPID`
//! and `READY=1`; a process that handed over stops accepting on every listener and shuts down as
//! above, without `STOPPING=1` (the service runs on in the new process).
//!
//! Each h2 connection that carries no affinity header is bound to the node of its first request
//! ([`crate::proxy::DownstreamConn::bound`]); when that node stops being usable (drain, ejection) the connection
//! gets GOAWAY and its binding is removed, so the client's next connection lands on a healthy node.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::drains::Drains;
use crate::admin::status::Readiness;
use crate::admin::Admin;
use crate::config::{Config, StoreKind};
use crate::drain;
use crate::hopper::affinity::{AffinityStore, MemoryStore, RedisSettings, RedisStore};
use crate::hopper::Hopper;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::registry::Registry;
use crate::routing::reload::Routing;

mod accept;
mod conn;
mod handover;
mod listen;
mod workers;

use accept::{accept_admin, TlsListener};
pub use listen::{listen, listen_group, LISTEN_BACKLOG};

/// The part of `shutdown_timeout` (at most a tenth of it) kept at its end for closing open streams
/// cleanly: enough for trailers to be written on a loopback or LAN connection.
const SHUTDOWN_CLOSE_GRACE: Duration = Duration::from_millis(500);
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
    /// A data-plane worker's runtime or thread could not be created.
    #[error("cannot start a worker: {0}")]
    Worker(#[source] std::io::Error),
    /// A process started by an upgrade could not take the handover (SPEC section 13).
    #[error("upgrade: {0}")]
    Upgrade(#[source] crate::upgrade::UpgradeError),
    /// The `SIGUSR2` handler could not be installed.
    #[error("cannot handle SIGUSR2: {0}")]
    Signal(#[source] std::io::Error),
}

/// What [`run`] needs besides the config.
pub struct Options {
    /// Validated config.
    pub config: Config,
    /// File to re-read on reload; `None` = embedded defaults.
    pub file: Option<PathBuf>,
    /// CLI overrides re-applied to every reloaded config.
    pub overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
    /// Data-plane workers (`--workers`, [`workers`] module docs); 0 counts as 1. A process started
    /// by an upgrade runs as many as it received data-plane sockets.
    pub workers: usize,
    /// The binary upgrades start (resolved at start-up, [`crate::upgrade::child::SelfExe`]).
    pub exe: crate::upgrade::child::SelfExe,
    /// Set when this process is the new one of an upgrade: where its handover channel is.
    pub upgrade_from: Option<crate::upgrade::receive::Source>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("file", &self.file)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

/// Runs the gateway until `shutdown` resolves (or an upgrade hands over, SPEC section 13), then
/// shuts down gracefully.
///
/// Kept as one function: the start-up order is the contract (listeners before state, state
/// restored from an upgrade's handover before any task serves, readiness last), read top to bottom.
/// The start-up order is here in one place (bind, store, routing, proxy, admin, then every task
/// spawned, then readiness), which the module docs and SPEC section 11 depend on; its steps with
/// logic of their own are [`handover::listeners`], [`affinity_store`], [`workers::data_proxy`],
/// [`start_admin`], [`workers::start`] and [`wind_down`].
///
/// # Errors
/// [`ServerError`] if a listener cannot bind, the affinity store cannot start, or (started by an
/// upgrade, SPEC section 13) the handover fails.
pub async fn run(opts: Options, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    let cfg = opts.config.clone();
    // One crypto provider for the process: the listener, TLS to nodes and `rediss://` alike.
    crate::tls::certs::install_provider();
    warn_unverified(&cfg);
    let metrics = Arc::new(Metrics::new());
    // Before anything else: SIGUSR2 must never take its default action (ending the process).
    let usr2 = crate::upgrade::usr2().map_err(ServerError::Signal)?;
    let (mut received, listeners, n_workers) = handover::listeners(&opts, &cfg, &metrics).await?;
    let held = handover::held(&listeners);
    let (data, admin_l, health_l, tls) = listeners.into_parts();
    let registry = Arc::new(Registry::new(metrics.clone()));
    let store = affinity_store(&cfg, &metrics).await?;
    let ids = workers::conn_ids(&cfg)?;
    let routing = Arc::new(Routing::new(
        opts.config,
        opts.file.clone(),
        opts.overrides,
        registry,
        metrics.clone(),
    ));
    let hopper = Arc::new(Hopper::new(store, metrics.clone()));
    let (signal, watch) = drain::channel();
    let proxy = workers::data_proxy(&cfg, &routing, &hopper, ids, &metrics, &watch);
    let readiness = Arc::new(Readiness::new());
    // Drains other replicas stored are applied before the first request is served (SPEC section 7).
    let drains = Arc::new(Drains::new(routing.clone(), hopper.clone()));
    drains.sync().await;
    let moved = received
        .as_mut()
        .map(|r| handover::restore(r, &hopper, &drains, &metrics));
    let state = handover::snapshot(hopper.clone(), drains.clone(), metrics.clone());
    let upgrader = crate::upgrade::Upgrader::new(
        opts.exe.clone(),
        cfg.server.upgrade_timeout,
        metrics.clone(),
        (held, state),
        proxy.mover.clone(),
        received.is_some(),
    );
    let admin = Arc::new(Admin {
        routing: routing.clone(),
        hopper: hopper.clone(),
        metrics: metrics.clone(),
        token: cfg.server.admin_token.clone(),
        readiness: readiness.clone(),
        tls: tls.as_ref().map(|t| t.certs.clone()),
        drains: drains.clone(),
        upgrade: upgrader.clone(),
    });
    let listen_addr = data.first().and_then(|l| l.local_addr().ok());
    tracing::info!(listen = %listen_addr.map(|a| a.to_string()).unwrap_or_default(), admin = %admin_l.local_addr().map(|a| a.to_string()).unwrap_or_default(), workers = n_workers, generation = routing.table().generation, "hopping-gateway started");

    let mut tasks = JoinSet::new();
    let (stop_admin, admin_accepting, mut admin_tasks) = start_admin(admin_l, health_l, admin);
    handover::upgrade_tasks(&mut tasks, &upgrader, usr2, &cfg, &watch);
    tasks.spawn(crate::admin::status::watch_nodes(
        routing.clone(),
        metrics.clone(),
        watch.clone(),
    ));
    if let Some(t) = &tls {
        tracing::info!(listen = %t.local_addr().map(|a| a.to_string()).unwrap_or_default(), "TLS listener started");
        tasks.spawn(crate::tls::server::watch_reload(
            t.certs.clone(),
            watch.clone(),
        ));
    }
    // Workers 1..N: their runtimes run until the drain is over (see workers::spawn).
    let worker_runtimes = workers::start(&mut tasks, data, tls, &proxy, &cfg, &watch)?;
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
    // The sockets listen since bind: connections queue and are accepted by the loops just spawned.
    readiness.set_listening();
    let serve = (&proxy, &watch);
    handover::announce(received.zip(moved), &metrics, &upgrader, serve).await;
    drop(watch);

    let handed_over = handover::until_stop(shutdown, &upgrader, &admin_accepting).await;
    wind_down(
        &cfg,
        &readiness,
        signal,
        proxy,
        tasks,
        &routing,
        !handed_over,
    )
    .await;
    upgrader.join().await;
    hopper.store().shutdown().await;
    drop(worker_runtimes);
    stop_admin.cancel();
    while admin_tasks.join_next().await.is_some() {}
    tracing::info!("hopping-gateway stopped");
    Ok(())
}

/// Warns once per cluster whose node certificates are not verified (`clusters.tls.verify = false`).
fn warn_unverified(cfg: &Config) {
    for c in cfg.clusters.iter() {
        if c.tls.as_ref().is_some_and(|t| !t.spec.verify) {
            tracing::warn!(cluster = %c.name, "clusters.tls.verify = false: node certificates are not verified (any certificate and name are accepted)");
        }
    }
}

/// Spawns the admin listener's accept loop and the `health_listen` one (if bound). They outlive
/// the drain: they stop only when `run` cancels the first token returned (or stop accepting when
/// it cancels the second, after an upgrade), then their tasks are joined.
fn start_admin(
    admin_l: TcpListener,
    health_l: Option<TcpListener>,
    admin: Arc<Admin>,
) -> (CancellationToken, CancellationToken, JoinSet<()>) {
    let stop_admin = CancellationToken::new();
    let accepting = stop_admin.child_token();
    let mut admin_tasks = JoinSet::new();
    admin_tasks.spawn(accept_admin(
        admin_l,
        admin.clone(),
        accepting.clone(),
        stop_admin.clone(),
        false,
    ));
    if let Some(l) = health_l {
        admin_tasks.spawn(accept_admin(
            l,
            admin,
            accepting.clone(),
            stop_admin.clone(),
            true,
        ));
    }
    (stop_admin, accepting, admin_tasks)
}

/// The sockets of the gateway, bound before anything is served (SPEC section 2 and 10).
struct Listeners {
    /// One socket per worker ([`listen_group`]).
    data: Vec<std::net::TcpListener>,
    admin: TcpListener,
    health: Option<TcpListener>,
    tls: Option<TlsListener>,
}

impl Listeners {
    /// The data-plane sockets, the admin, `health_listen` and TLS listeners.
    fn into_parts(
        self,
    ) -> (
        Vec<std::net::TcpListener>,
        TcpListener,
        Option<TcpListener>,
        Option<TlsListener>,
    ) {
        (self.data, self.admin, self.health, self.tls)
    }
}

/// The affinity store `[affinity] store` names (SPEC section 7): in memory, or Redis once connected.
///
/// # Errors
/// [`ServerError::Store`] when Redis cannot be reached at start.
async fn affinity_store(
    cfg: &Config,
    metrics: &Arc<Metrics>,
) -> Result<AffinityStore, ServerError> {
    Ok(match &cfg.affinity.store {
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
    })
}

/// The graceful part of shutdown (module docs, SPEC section 5): readiness false, the drain signal
/// to every connection, up to `shutdown_spread` + `shutdown_timeout` for `tasks` to end (the
/// WebSockets' reconnect hints go out over the spread; streams still open near the end are closed
/// as at a drain deadline), then what is left is aborted and the health checks stop.
/// `STOPPING=1` goes to systemd only when `notify` (not after an upgrade: the service runs on in
/// the new process).
async fn wind_down(
    cfg: &Config,
    readiness: &Readiness,
    signal: drain::Signal,
    proxy: Arc<Proxy>,
    mut tasks: JoinSet<()>,
    routing: &Routing,
    notify: bool,
) {
    if notify {
        crate::notify::stopping();
    }
    let (timeout, spread) = (cfg.server.shutdown_timeout, cfg.server.shutdown_spread);
    tracing::info!(?timeout, ?spread, "shutting down: draining connections");
    readiness.set_stopping();
    signal.fire();
    drop(proxy);
    // The last part of shutdown_timeout is kept for closing streams still open at its end
    // cleanly (gRPC: grpc-status 14 trailers) before the connections are dropped.
    let grace = (cfg.server.shutdown_timeout / 10).min(SHUTDOWN_CLOSE_GRACE);
    // The wait for in-flight work comes after the spread (SPEC section 5).
    let until_close = (timeout - grace).saturating_add(spread.unwrap_or_default());
    let finished = {
        let wait = async {
            while tasks.join_next().await.is_some() {}
            signal.closed().await;
        };
        tokio::pin!(wait);
        match tokio::time::timeout(until_close, &mut wait).await {
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
}
