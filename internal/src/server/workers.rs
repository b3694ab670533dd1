//! `--workers N` (SPEC section 2): N data-plane workers, each a current-thread tokio runtime on a
//! thread of its own with its own listeners (one socket each of an `SO_REUSEPORT` group, so the
//! kernel spreads new connections over the workers), its own accept loops and its own upstream
//! pools ([`crate::proxy::upstream::client::NodeClient`] per worker [`Proxy`]). A connection, its requests and
//! the pooled node connections they use are all driven by one thread: no cross-thread wake-up,
//! work stealing or contended pool lock on the hot path. What must be one for the process stays
//! shared: the routing table, registry, hopper and affinity store, metrics, the drain signal and
//! the connection limits ([`ConnLimit`]).
//!
//! Worker 0 is the runtime [`super::run`] is called on (the main thread); it also runs the admin
//! and health listeners, health checks, reloads, discovery, drains and the Redis store's
//! connection tasks. Those are few and far between next to requests, and the tasks that start
//! them need no second runtime; an extra thread for them would cost a core's share on a machine
//! where every core already runs a worker. Workers 1..N run on threads started by [`spawn`].

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::accept::{accept_data, accept_tls, TlsListener, TlsPart};
use super::listen::ConnLimit;
use super::ServerError;
use crate::config::{Config, IdMode};
use crate::drain;
use crate::hopper::{ConnIds, Hopper};
use crate::metrics::Metrics;
use crate::proxy::upstream::client::NodeClient;
use crate::proxy::{Proxy, ProxySettings};
use crate::routing::reload::Routing;

/// The process-wide connection limits, one per listener kind (`[limits] max_connections` each).
#[derive(Clone)]
pub(super) struct Limits {
    /// The cleartext listeners'.
    pub(super) data: Arc<ConnLimit>,
    /// The TLS listeners'.
    pub(super) tls: Arc<ConnLimit>,
}

impl Limits {
    /// `max` connections per listener kind.
    pub(super) fn new(max: usize) -> Self {
        Limits {
            data: ConnLimit::new(max, true),
            tls: ConnLimit::new(max, false),
        }
    }
}

/// What one worker serves and with what.
pub(super) struct Worker {
    /// 0 for the main thread's runtime, then 1..N (in log lines).
    pub(super) index: usize,
    /// Its socket of the cleartext listener.
    pub(super) data: std::net::TcpListener,
    /// Its socket of the TLS listener, with `[server.tls]`.
    pub(super) tls: Option<TlsPart>,
    /// Its proxy: the shared state and its own upstream pools.
    pub(super) proxy: Arc<Proxy>,
    /// The drain signal.
    pub(super) watch: drain::Watch,
    /// The shared limits.
    pub(super) limits: Limits,
}

/// Serves `w`'s listeners on the current runtime until the drain signal, then waits for its
/// connections to end.
pub(super) async fn serve(w: Worker) {
    let Worker {
        index,
        data,
        tls,
        proxy,
        watch,
        limits: Limits {
            data: data_limit,
            tls: tls_limit,
        },
    } = w;
    // This worker's requests take their deadline timers from its own pool (proxy::deadline).
    let _timers = crate::proxy::deadline::install();
    let tls = {
        let (proxy, watch) = (proxy.clone(), watch.clone());
        async move {
            if let Some(t) = tls {
                accept_tls(t, proxy, watch, tls_limit, index).await;
            }
        }
    };
    let data = accept_data(data, proxy, watch, data_limit, index);
    tokio::join!(data, tls);
}

/// Starts `w` on a thread of its own with a current-thread runtime. Returns a future that resolves
/// once the worker's accept loops and connections have ended, and a guard that keeps the runtime
/// running until dropped: tasks a connection left behind (a WebSocket relay sending its close
/// frame, pooled node connections) keep running on it until [`super::run`] is done with the drain,
/// as they would on the main runtime. Dropping the guard drops every task still on the worker.
///
/// # Errors
/// The runtime or the thread could not be created.
pub(super) fn spawn(
    w: Worker,
) -> std::io::Result<(impl Future<Output = ()> + Send + 'static, DropGuard)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stop = CancellationToken::new();
    let guard = stop.clone().drop_guard();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(format!("hopgw-worker-{}", w.index))
        .spawn(move || {
            rt.block_on(async {
                tokio::select! {
                    () = serve(w) => {
                        let _ = done_tx.send(());
                        stop.cancelled().await;
                    }
                    () = stop.cancelled() => {}
                }
            });
            // Drops the tasks still on the runtime without waiting for blocking-pool work such
            // as a DNS lookup in flight.
            rt.shutdown_background();
        })?;
    Ok((
        async move {
            let _ = done_rx.await;
        },
        guard,
    ))
}

/// Starts one data-plane worker per socket of `data` (with its part of `tls`): worker 0 as a task
/// of `tasks` on the current runtime with `proxy`, the others on runtimes of their own
/// ([`spawn`]) with proxies of their own, each joined through a task of `tasks`. Returns
/// the guards that keep workers 1..N running.
///
/// # Errors
/// [`ServerError::Worker`] if a worker's runtime or thread cannot be created.
pub(super) fn start(
    tasks: &mut JoinSet<()>,
    data: Vec<std::net::TcpListener>,
    tls: Option<TlsListener>,
    proxy: &Arc<Proxy>,
    cfg: &Config,
    watch: &drain::Watch,
) -> Result<Vec<DropGuard>, ServerError> {
    let mut tls_parts = tls
        .map(TlsListener::into_parts)
        .unwrap_or_default()
        .into_iter();
    let limits = Limits::new(cfg.limits.max_connections);
    let mut worker_runtimes = Vec::new();
    for (index, data) in data.into_iter().enumerate() {
        let w = Worker {
            index,
            data,
            tls: tls_parts.next(),
            proxy: if index == 0 {
                proxy.clone()
            } else {
                Arc::new(worker_proxy(proxy, cfg))
            },
            watch: watch.clone(),
            limits: limits.clone(),
        };
        if index == 0 {
            tasks.spawn(serve(w));
        } else {
            let (done, running) = spawn(w).map_err(ServerError::Worker)?;
            tasks.spawn(done);
            worker_runtimes.push(running);
        }
    }
    Ok(worker_runtimes)
}

/// The proxy of worker 0 (the main runtime): the shared state, `cfg`'s settings, upstream pools of
/// its own, and `watch` as its shutdown signal.
pub(super) fn data_proxy(
    cfg: &Config,
    routing: &Arc<Routing>,
    hopper: &Arc<Hopper>,
    ids: ConnIds,
    metrics: &Arc<Metrics>,
    watch: &drain::Watch,
) -> Arc<Proxy> {
    Arc::new(Proxy {
        routing: routing.clone(),
        hopper: hopper.clone(),
        ids,
        upstream: upstream(cfg),
        metrics: metrics.clone(),
        counters: Default::default(),
        settings: ProxySettings {
            affinity_header: cfg.affinity.header.clone(),
            trusted: cfg.server.trusted_proxies.clone(),
            limits: cfg.limits.clone(),
            access_log: cfg.server.access_log,
            zone: cfg.server.zone.as_deref().map(Arc::from),
            shutdown_spread: cfg.server.shutdown_spread,
        },
        shutdown: watch.clone(),
        mover: Default::default(),
    })
}

/// The client to nodes with `cfg`'s timeouts and limits: one per worker, so each worker's pooled
/// node connections are driven by its own runtime.
pub(super) fn upstream(cfg: &Config) -> Arc<NodeClient> {
    Arc::new(
        NodeClient::new(cfg.limits.connect_timeout, cfg.limits.upstream_idle_timeout)
            .with_h2_max_header_list(cfg.limits.h2.max_header_list),
    )
}

/// A further worker's proxy: `shared`'s state and settings with upstream pools of its own.
pub(super) fn worker_proxy(shared: &Proxy, cfg: &Config) -> Proxy {
    Proxy {
        routing: shared.routing.clone(),
        hopper: shared.hopper.clone(),
        ids: shared.ids.clone(),
        upstream: upstream(cfg),
        metrics: shared.metrics.clone(),
        counters: Default::default(),
        settings: shared.settings.clone(),
        shutdown: shared.shutdown.clone(),
        mover: shared.mover.clone(),
    }
}

/// The conn id validator of `cfg` (SPEC section 4 `[affinity] ids`): signed ids take the key in
/// `secret_env` and the old keys in `old_secrets_env`.
///
/// # Errors
/// [`ServerError::MissingSecret`] when signed ids have no key.
pub(super) fn conn_ids(cfg: &Config) -> Result<ConnIds, ServerError> {
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
