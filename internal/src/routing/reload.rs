//! [`Routing`]: owns the live [`RouteTable`] behind `ArcSwap`, and every way to change it: reload
//! (file watch, SIGHUP, admin), rollback, and drain of nodes a reload removed.
//!
//! Reloads are serialised by an async mutex and each one reads the file when it gets the lock, so
//! triggers that arrive together coalesce and the newest file always ends up live (SPEC section 6).
//! Before a swap, nodes new in the table get a concurrent TCP connect probe: more than half failing
//! refuses the reload; otherwise the failing ones start ejected.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::config::{self, Config, ConfigError, ConfigIssue};
use crate::metrics::Metrics;
use crate::registry::health::HealthChecker;
use crate::registry::probe::connect_probe;
use crate::registry::Registry;

use super::table::RouteTable;

/// How long a pre-swap connect probe may take: a hung node must not stall a reload for long.
pub const DEFAULT_RELOAD_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Drain period for nodes a reload removed (SPEC section 5: they drain like an operator drain).
pub const DEFAULT_REMOVED_DRAIN: Duration = Duration::from_secs(30);

/// Why a reload or rollback was refused; the live table is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file is invalid.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    /// More than half of the new nodes failed their connect probe.
    #[error("refused: {failed} of {total} new nodes failed the connect probe")]
    ProbeFailed {
        /// Failed count.
        failed: usize,
        /// New nodes probed.
        total: usize,
        /// Per node: `key` = node id.
        issues: Vec<ConfigIssue>,
    },
    /// No config file to reload from (started with the embedded defaults).
    #[error("no config file: the gateway runs on its embedded defaults")]
    NoFile,
    /// `POST /admin/rollback` with no previous table.
    #[error("no previous route table to roll back to")]
    NoPrevious,
}

impl ReloadError {
    /// The issues in the admin API's `{"errors": [...]}` shape (SPEC section 3).
    pub fn issues(&self) -> Vec<ConfigIssue> {
        let one = |m: String| vec![ConfigIssue { key: "-".into(), line: 0, column: 0, message: m }];
        match self {
            ReloadError::Invalid(e) => e.issues.clone(),
            ReloadError::ProbeFailed { issues, .. } => {
                let mut v = one(self.to_string());
                v.extend(issues.iter().cloned());
                v
            }
            ReloadError::NoFile | ReloadError::NoPrevious => one(self.to_string()),
        }
    }
}

/// The live route table and its history.
pub struct Routing {
    live: ArcSwap<RouteTable>,
    previous: Mutex<Option<Arc<Config>>>,
    registry: Arc<Registry>,
    health: HealthChecker,
    metrics: Arc<Metrics>,
    file: Option<PathBuf>,
    overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
    lock: tokio::sync::Mutex<()>,
    removed_by_reload: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing").field("generation", &self.live.load().generation).field("file", &self.file).finish_non_exhaustive()
    }
}

impl Routing {
    /// Builds generation 1 from `config` and starts its health checks. `file` is re-read on reload;
    /// `overrides` (CLI flags) are applied to every config loaded from it.
    pub fn new(
        config: Config,
        file: Option<PathBuf>,
        overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let table = RouteTable::build(Arc::new(config), &registry, 1, None);
        let health = HealthChecker::new();
        health.reconcile(&table.nodes());
        metrics.generation.set(1);
        Routing {
            live: ArcSwap::from_pointee(table),
            previous: Mutex::new(None),
            registry,
            health,
            metrics,
            file,
            overrides,
            lock: tokio::sync::Mutex::new(()),
            removed_by_reload: Mutex::new(HashSet::new()),
        }
    }

    /// The live table; load once per request and keep the snapshot.
    pub fn table(&self) -> Arc<RouteTable> {
        self.live.load_full()
    }

    /// The registry of node runtimes.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Re-reads the config file and applies it. Returns the new generation.
    ///
    /// # Errors
    /// [`ReloadError`]; the live table stays.
    pub async fn reload(&self) -> Result<u64, ReloadError> {
        let _guard = self.lock.lock().await;
        let Some(path) = self.file.clone() else {
            return Err(ReloadError::NoFile);
        };
        // Read under the lock: whoever runs last reads the newest file.
        let loaded = tokio::task::spawn_blocking(move || config::load_path(&path))
            .await
            .expect("config loading does not panic");
        let mut cfg = match loaded {
            Ok(c) => c,
            Err(e) => {
                self.metrics.reload("invalid");
                tracing::warn!(errors = %e, "reload refused: invalid config");
                return Err(e.into());
            }
        };
        (self.overrides)(&mut cfg);
        self.apply_locked(cfg, true).await
    }

    /// Applies `cfg` as a new table (used by reload and tests). Returns the new generation.
    ///
    /// # Errors
    /// [`ReloadError::ProbeFailed`]; the live table stays.
    pub async fn apply(&self, cfg: Config) -> Result<u64, ReloadError> {
        let _guard = self.lock.lock().await;
        self.apply_locked(cfg, true).await
    }

    /// Restores the previous table (`POST /admin/rollback`, warm-up failure).
    ///
    /// # Errors
    /// [`ReloadError::NoPrevious`].
    pub async fn rollback(&self, result: &'static str) -> Result<u64, ReloadError> {
        let _guard = self.lock.lock().await;
        let prev = self.previous.lock().expect("previous mutex is never poisoned").clone();
        let Some(prev) = prev else {
            return Err(ReloadError::NoPrevious);
        };
        let g = self.swap((*prev).clone(), false);
        self.metrics.reload(result);
        tracing::warn!(generation = g, result, "route table rolled back");
        Ok(g)
    }

    async fn apply_locked(&self, cfg: Config, probe: bool) -> Result<u64, ReloadError> {
        let live = self.live.load_full();
        let old_ids: HashSet<&str> = live.config.clusters.iter().flat_map(|c| c.nodes.iter().map(|n| n.id.as_str())).collect();
        let new_nodes: Vec<(String, String)> = cfg
            .clusters
            .iter()
            .flat_map(|c| c.nodes.iter())
            .filter(|n| !old_ids.contains(n.id.as_str()))
            .map(|n| (n.id.clone(), n.addr.clone()))
            .collect();
        let mut failed_ids = Vec::new();
        if probe && !new_nodes.is_empty() {
            let probes = new_nodes.iter().map(|(id, addr)| async move { (id.clone(), connect_probe(addr, DEFAULT_RELOAD_PROBE_TIMEOUT).await) });
            for (id, r) in futures_util::future::join_all(probes).await {
                if let Err(e) = r {
                    failed_ids.push((id, e.to_string()));
                }
            }
            if failed_ids.len() * 2 > new_nodes.len() {
                self.metrics.reload("probe_failed");
                let issues = failed_ids
                    .iter()
                    .map(|(id, e)| ConfigIssue { key: format!("node {id}"), line: 0, column: 0, message: format!("connect probe failed: {e}") })
                    .collect();
                let err = ReloadError::ProbeFailed { failed: failed_ids.len(), total: new_nodes.len(), issues };
                tracing::warn!(error = %err, "reload refused");
                return Err(err);
            }
        }
        let g = self.swap(cfg, true);
        let table = self.live.load();
        let now = Instant::now();
        for (id, why) in failed_ids {
            if let Some(n) = table.node(&id) {
                n.runtime.eject(&n.settings.health, &format!("connect probe failed: {why}"), now);
            }
        }
        self.metrics.reload("ok");
        Ok(g)
    }

    /// Builds and swaps in a table for `cfg`; the old config becomes the rollback target when `remember`.
    fn swap(&self, cfg: Config, remember: bool) -> u64 {
        let live = self.live.load_full();
        let generation = live.generation + 1;
        let table = RouteTable::build(Arc::new(cfg), &self.registry, generation, Some(&live));
        let new_ids: HashSet<String> = table.nodes().iter().map(|n| n.id.to_string()).collect();
        // Nodes back in the table after a removal take work again.
        {
            let mut removed = self.removed_by_reload.lock().expect("removed mutex is never poisoned");
            for id in new_ids.iter() {
                if removed.remove(id) {
                    if let Some(rt) = self.registry.get(id) {
                        rt.undrain();
                    }
                }
            }
        }
        self.health.reconcile(&table.nodes());
        let table = Arc::new(table);
        self.live.store(table.clone());
        if remember {
            *self.previous.lock().expect("previous mutex is never poisoned") = Some(live.config.clone());
        }
        self.metrics.generation.set(generation as i64);
        tracing::info!(generation, routes = table.routes.len(), nodes = new_ids.len(), "route table swapped");
        // Removed nodes drain like an operator drain (SPEC section 5).
        let deadline = Instant::now() + DEFAULT_REMOVED_DRAIN;
        let mut removed = self.removed_by_reload.lock().expect("removed mutex is never poisoned");
        for n in live.nodes() {
            if !new_ids.contains(&*n.id) && removed.insert(n.id.to_string()) {
                n.runtime.start_drain(deadline);
            }
        }
        generation
    }

    /// Stops every health-check task and waits for them.
    pub async fn shutdown(&self) {
        self.health.shutdown().await;
    }
}

/// Debounce for file-change events: editors write a file in several steps.
const FILE_DEBOUNCE: Duration = Duration::from_millis(200);

/// Runs reload triggers until `watch` fires: SIGHUP and changes to `file` (watched through its
/// directory so editors that replace the file are seen). Triggers coalesce in [`Routing::reload`].
pub async fn watch_triggers(routing: Arc<Routing>, file: Option<PathBuf>, mut watch: crate::drain::Watch) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let _watcher = file.as_ref().and_then(|f| file_watcher(f, tx.clone()));
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let hup_fut = async {
            match hup.as_mut() {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hup_fut = std::future::pending::<Option<()>>();
        let source = tokio::select! {
            _ = watch.signaled() => return,
            _ = hup_fut => "sighup",
            Some(()) = rx.recv() => {
                // Let the burst of events settle, then swallow what queued meanwhile.
                tokio::time::sleep(FILE_DEBOUNCE).await;
                while rx.try_recv().is_ok() {}
                "file"
            }
        };
        match routing.reload().await {
            Ok(g) => tracing::info!(source, generation = g, "reloaded"),
            Err(e) => tracing::warn!(source, error = %e, "reload refused; the live table stays"),
        }
    }
}

fn file_watcher(file: &std::path::Path, tx: tokio::sync::mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let name = file.file_name()?.to_os_string();
    let dir = file.parent().filter(|p| !p.as_os_str().is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev {
            let relevant = !ev.kind.is_access() && ev.paths.iter().any(|p| p.file_name() == Some(name.as_os_str()));
            if relevant {
                // A full channel already holds a pending trigger: coalesced.
                let _ = tx.try_send(());
            }
        }
    })
    .map_err(|e| tracing::warn!(error = %e, "file watch unavailable; use SIGHUP or POST /admin/reload"))
    .ok()?;
    if let Err(e) = w.watch(&dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(error = %e, dir = %dir.display(), "file watch unavailable; use SIGHUP or POST /admin/reload");
        return None;
    }
    Some(w)
}
