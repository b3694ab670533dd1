//! The server's part of an upgrade (SPEC section 13): which listening sockets a new process takes
//! from the handover and which it binds ([`bind`]), the duplicates the old process holds to hand
//! over ([`held`]), the state it hands over ([`snapshot`]) and restores ([`restore`]), and the end
//! of a new process's start-up ([`complete`]). A received listener is used only where the config
//! still names its address; one the config no longer names is closed.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::accept::{tls_listener, tls_listener_on};
use super::listen::{listen, listen_group};
use super::{Listeners, ServerError};
use crate::admin::drains::Drains;
use crate::config::Config;
use crate::drain;
use crate::hopper::affinity::redis::DrainRecord;
use crate::hopper::{AffinityStore, Hopper};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::upgrade::message::{BindingItem, Item, ListenerRole};
use crate::upgrade::moving::Arrivals;
use crate::upgrade::receive::Received;
use crate::upgrade::{HeldListener, StateSnapshot, Upgrader};

/// The received listeners of `role`, if they are for `addr` (a configured port 0 matches any);
/// otherwise none (those received are closed, with a WARN).
fn received_for(
    r: Option<&mut Received>,
    role: ListenerRole,
    addr: SocketAddr,
) -> Vec<std::net::TcpListener> {
    let Some(r) = r else { return Vec::new() };
    let got = r.take(role);
    let matches = |a: &SocketAddr| *a == addr || (addr.port() == 0 && a.ip() == addr.ip());
    if got.iter().all(|(a, _)| matches(a)) {
        return got.into_iter().map(|(_, l)| l).collect();
    }
    tracing::warn!(role = role.as_str(), configured = %addr, received = %got[0].0, "received listener is for another address: binding the configured one");
    Vec::new()
}

/// One tokio listener: the received one for `addr`, else bound.
fn one(
    r: Option<&mut Received>,
    role: ListenerRole,
    addr: SocketAddr,
) -> Result<TcpListener, ServerError> {
    let bind_err = |source| ServerError::Bind { addr, source };
    match received_for(r, role, addr).pop() {
        Some(l) => TcpListener::from_std(l).map_err(bind_err),
        None => listen(addr).map_err(bind_err),
    }
}

/// Every listener of `cfg` (the TLS one with its certificates loaded, counted on `metrics`): taken
/// from `received` where it holds one for the configured address, bound otherwise (the data-plane
/// and TLS ones once per worker of `workers`). Received listeners left over are closed.
///
/// # Errors
/// [`ServerError::Bind`] naming the address; [`ServerError::Tls`] for unusable certificate files.
pub(super) fn bind(
    cfg: &Config,
    metrics: &Arc<Metrics>,
    workers: usize,
    mut received: Option<&mut Received>,
) -> Result<Listeners, ServerError> {
    let addr = cfg.server.listen;
    let mut data = received_for(received.as_deref_mut(), ListenerRole::Data, addr);
    if data.is_empty() {
        data = listen_group(addr, workers).map_err(|source| ServerError::Bind { addr, source })?;
    }
    let admin = one(
        received.as_deref_mut(),
        ListenerRole::Admin,
        cfg.server.admin_listen,
    )?;
    let health = match cfg.server.health_listen {
        Some(a) => Some(one(received.as_deref_mut(), ListenerRole::Health, a)?),
        None => None,
    };
    let tls = match cfg.server.tls.clone() {
        None => None,
        Some(spec) => {
            let got = received_for(received.as_deref_mut(), ListenerRole::Tls, spec.listen);
            Some(if got.is_empty() {
                tls_listener(spec, metrics.clone(), workers)?
            } else {
                let certs = crate::tls::server::TlsCerts::load(spec, metrics.clone())
                    .map_err(ServerError::Tls)?;
                tls_listener_on(certs, got)?
            })
        }
    };
    if let Some(r) = received {
        r.drop_untaken();
    }
    Ok(Listeners {
        data,
        admin,
        health,
        tls,
    })
}

/// The listeners of `opts` (SPEC section 13 for a process started by an upgrade: the handover is
/// taken first, within `upgrade_timeout`), what else was received, and how many workers to run (as
/// many as data-plane sockets were received, else `--workers`).
///
/// # Errors
/// [`ServerError::Upgrade`] when the handover fails; those of [`bind`].
pub(super) async fn listeners(
    opts: &super::Options,
    cfg: &Config,
    metrics: &Arc<Metrics>,
) -> Result<(Option<Received>, Listeners, usize), ServerError> {
    let mut received = match &opts.upgrade_from {
        Some(src) => Some(
            crate::upgrade::receive::receive(src, cfg.server.upgrade_timeout)
                .await
                .map_err(ServerError::Upgrade)?,
        ),
        None => None,
    };
    let workers = received
        .as_ref()
        .map(|r| r.count(ListenerRole::Data))
        .filter(|n| *n > 0)
        .unwrap_or(opts.workers.max(1));
    let l = bind(cfg, metrics, workers, received.as_mut())?;
    Ok((received, l, workers))
}

/// Duplicates of every listener in `l`, for the handover of a later upgrade. A listener that cannot
/// be duplicated (out of descriptors) is left out with an ERROR: the new process then binds it
/// itself, which fails while this process listens, and the upgrade is rolled back.
pub(super) fn held(l: &Listeners) -> Vec<HeldListener> {
    let mut out = Vec::new();
    let mut hold = |role: ListenerRole,
                    fd: std::os::fd::BorrowedFd<'_>,
                    addr: std::io::Result<SocketAddr>| {
        match (fd.try_clone_to_owned(), addr) {
            (Ok(fd), Ok(addr)) => out.push(HeldListener { role, addr, fd }),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(role = role.as_str(), error = %e, "cannot hold a listener for upgrades");
            }
        }
    };
    for d in &l.data {
        hold(ListenerRole::Data, d.as_fd(), d.local_addr());
    }
    hold(ListenerRole::Admin, l.admin.as_fd(), l.admin.local_addr());
    if let Some(h) = &l.health {
        hold(ListenerRole::Health, h.as_fd(), h.local_addr());
    }
    for t in l.tls.iter().flat_map(|t| t.listeners.iter()) {
        hold(ListenerRole::Tls, t.as_fd(), t.local_addr());
    }
    out
}

/// What the handover carries besides listeners: the memory store's bindings, the operator
/// drains, the counters and histograms.
pub(super) fn snapshot(
    hopper: Arc<Hopper>,
    drains: Arc<Drains>,
    metrics: Arc<Metrics>,
) -> StateSnapshot {
    Box::new(move || {
        let mut items = Vec::new();
        if let AffinityStore::Memory(m) = hopper.store() {
            let bindings = m
                .export()
                .into_iter()
                .map(|(conn, node, ttl)| BindingItem {
                    conn,
                    node: node.to_string(),
                    ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
                })
                .collect();
            items.push(Item::Bindings { bindings });
        }
        for (node, rec) in drains.records() {
            items.push(Item::Drain {
                node: node.to_string(),
                deadline_ms: rec.deadline_ms,
                period_ms: rec.period_ms,
            });
        }
        items.push(Item::Metrics {
            samples: metrics.counter_samples(),
        });
        items
    })
}

/// What moved besides listeners, for the `upgrade complete` line.
pub(super) struct Restored {
    bindings: usize,
    drains: usize,
}

/// Restores the state of `r` (its listeners were taken by [`bind`]): counters continue, bindings
/// go into the memory store (with Redis they are shared already), drains apply to the nodes the
/// live table has.
pub(super) fn restore(
    r: &mut Received,
    hopper: &Hopper,
    drains: &Drains,
    metrics: &Metrics,
) -> Restored {
    metrics.carry(std::mem::take(&mut r.samples));
    let mut moved = Restored {
        bindings: 0,
        drains: 0,
    };
    let bindings = std::mem::take(&mut r.bindings);
    match hopper.store() {
        AffinityStore::Memory(m) => {
            for b in bindings {
                m.restore(&b.conn, &Arc::from(b.node), Duration::from_millis(b.ttl_ms));
                moved.bindings += 1;
            }
        }
        AffinityStore::Redis(_) if !bindings.is_empty() => {
            tracing::info!(
                bindings = bindings.len(),
                "bindings of the memory store not restored: this process uses Redis"
            );
        }
        AffinityStore::Redis(_) => {}
    }
    for d in std::mem::take(&mut r.drains) {
        let rec = DrainRecord {
            deadline_ms: d.deadline_ms,
            period_ms: d.period_ms,
        };
        if drains.restore(&d.node, rec) {
            moved.drains += 1;
        }
    }
    moved
}

/// Tells systemd `READY=1` once the listeners accept; for a process started by an upgrade
/// ([`complete`]) with `MAINPID`, after counting the upgrade and before telling the old process.
pub(super) async fn announce(
    received: Option<(Received, Restored)>,
    metrics: &Metrics,
    upgrader: &Upgrader,
    serve: (&Arc<Proxy>, &drain::Watch),
) {
    match received {
        Some((r, moved)) => complete(r, moved, metrics, upgrader, serve).await,
        None => crate::notify::ready(),
    }
}

/// Waits for `shutdown` or for an upgrade to hand over; returns true for the latter, after the
/// admin listeners stopped accepting (`admin_accepting`; the new process accepts on the same
/// sockets), false for the former, after an upgrade still running was rolled back. Either way the
/// held listener duplicates are closed.
pub(super) async fn until_stop(
    shutdown: impl std::future::Future<Output = ()>,
    upgrader: &Upgrader,
    admin_accepting: &tokio_util::sync::CancellationToken,
) -> bool {
    let handed_over = tokio::select! {
        () = shutdown => false,
        () = upgrader.handed_over() => true,
    };
    if handed_over {
        admin_accepting.cancel();
    } else {
        // A shutdown stops an upgrade still running (its new process is stopped): the service
        // is being stopped, not handed on.
        upgrader.join().await;
    }
    upgrader.release_listeners();
    handed_over
}

/// Ends the start-up of a process started by an upgrade, once it accepts on every listener:
/// counts the upgrade, tells systemd `MAINPID` and `READY=1`, tells the old process it is ready,
/// serves the idle connections it sends from then on ([`adopt`], with `serve`'s proxy and
/// shutdown signal), and takes triggers from then on.
async fn complete(
    r: Received,
    moved: Restored,
    metrics: &Metrics,
    upgrader: &Upgrader,
    serve: (&Arc<Proxy>, &drain::Watch),
) {
    let (listeners, from_pid) = (r.listener_count, r.from_pid);
    crate::upgrade::count_success(metrics, listeners);
    crate::notify::upgraded(std::process::id());
    match r.ready().await {
        Ok(arrivals) => {
            tracing::info!(
                from_pid,
                listeners,
                bindings = moved.bindings,
                drains = moved.drains,
                "upgrade complete"
            );
            tokio::spawn(adopt(arrivals, serve.0.clone(), serve.1.clone()));
        }
        Err(e) => {
            tracing::warn!(from_pid, error = %e, "upgrade complete, but the old process did not hear it")
        }
    }
    upgrader.idle();
}

/// Serves each idle HTTP/1.1 connection the old process sends (SPEC section 13), counted in
/// `gateway_upgrade_moved_total{kind="http1"}`, until it closes the channel or this process
/// shuts down (`watch`).
async fn adopt(mut arrivals: Arrivals, proxy: Arc<Proxy>, mut watch: drain::Watch) {
    loop {
        let batch = tokio::select! {
            b = arrivals.next() => b,
            () = watch.signaled() => None,
        };
        let Some(batch) = batch else { return };
        crate::upgrade::count_moved(&proxy.metrics, "http1", batch.len());
        for c in batch {
            tokio::spawn(super::conn::serve_moved(c, proxy.clone(), watch.clone()));
        }
    }
}

/// Spawns the upgrade triggers (SPEC section 13) onto `tasks`: `SIGUSR2` and, when configured,
/// `[server] upgrade_socket`.
pub(super) fn upgrade_tasks(
    tasks: &mut JoinSet<()>,
    upgrader: &Arc<crate::upgrade::Upgrader>,
    usr2: tokio::signal::unix::Signal,
    cfg: &Config,
    watch: &drain::Watch,
) {
    tasks.spawn(crate::upgrade::watch_signal(
        upgrader.clone(),
        usr2,
        watch.clone(),
    ));
    if let Some(path) = cfg.server.upgrade_socket.clone() {
        tasks.spawn(crate::upgrade::watch_socket(
            upgrader.clone(),
            path,
            watch.clone(),
        ));
    }
}
