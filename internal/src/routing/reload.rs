//! [`Routing`]: owns the live [`RouteTable`] behind `ArcSwap`, and every way to change it: reload
//! (file watch, SIGHUP, `POST /admin/reload`), rollback (`POST /admin/rollback`, failed warm-up),
//! and the drain of nodes a reload removed.
//!
//! - **Swap.** A new table is built and validated beside the live one and published with one
//!   `store`; a request loads the table once and keeps that snapshot, so it sees the whole old or
//!   the whole new table. Node runtime state is keyed by node id in the registry and carries over.
//! - **Coalescing.** Reloads are serialised by an async mutex and read the file only once they hold
//!   it. Every trigger takes a ticket; a reload covers every ticket issued before it read the file,
//!   and triggers still waiting behind it with such a ticket share its result instead of running
//!   again. Whatever the interleaving, the file as it was at the last trigger ends up live.
//!   Reloads act on the file's content: a file-watch event for content already read (by any
//!   trigger) does nothing, so the watcher never re-applies a file after a rollback or counts a
//!   refused file twice; SIGHUP and `POST /admin/reload` re-read and apply unless exactly that
//!   content is already live (so they retry a file refused by the probe).
//! - **Pre-swap probe.** Nodes new in the table (new id, or an id with a new address) get a
//!   concurrent TCP connect probe bounded by [`DEFAULT_RELOAD_PROBE_TIMEOUT`]: more than half
//!   failing refuses the reload; otherwise the failing ones start ejected (before the swap, so no
//!   request reaches them) and recover through their health checks.
//! - **Rollback.** The config the live table replaced is kept; rollback swaps it back in (without
//!   warm-up) and keeps the rolled-back one, so a second rollback undoes the first.
//! - **Warm-up watch.** [`super::triggers::watch_triggers`] also runs the warm-up watcher
//!   ([`super::triggers::watch_warmup`]): it rolls the live table back when a warm-up's error rate
//!   passes its `max_error_rate` (logged, counted as `gateway_reloads_total{result="rolled_back"}`).
//! - **Removed nodes** drain ([`DEFAULT_REMOVED_DRAIN`], or the cluster's `discovery.drain_period`
//!   for discovered nodes): in-flight requests finish, long-lived connections hop; their runtimes
//!   are forgotten after the drain once nothing is in flight.
//! - **Discovered nodes** ([`super::discovered`]) are filled into every table built here, and a
//!   changed DNS answer swaps in a table of its own. Every swap is announced on
//!   [`Routing::subscribe_swaps`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use crate::config::{self, Config, ConfigError};
use crate::events::Event;
use crate::metrics::Metrics;
use crate::registry::health::HealthChecker;
use crate::registry::{NodeId, Registry};

mod commit;
mod discover;
mod error;
mod probe;

use super::discovered::{Discovered, NodeSource};
use super::table::RouteTable;

use super::sources::TriggerSources;
pub(crate) use error::{ReloadError, ReloadTrigger};

/// How long a pre-swap connect probe may take: a hung node must not stall a reload for long.
pub(crate) const DEFAULT_RELOAD_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pre-swap probes run at most this many at once (a table adding hundreds of nodes stays bounded).
pub(crate) const RELOAD_PROBE_CONCURRENCY: usize = 64;
/// Drain period for nodes a reload removed (SPEC section 5: they drain like an operator drain).
pub(crate) const DEFAULT_REMOVED_DRAIN: Duration = Duration::from_secs(30);

/// Hashes of file contents, to tell a change from a repeated event.
#[derive(Debug, Default)]
struct FileSeen {
    /// Content last read by any reload.
    read: Option<u64>,
    /// Content the live table was built from (`None` after a rollback or [`Routing::apply`]).
    live: Option<u64>,
}

/// The live route table and its history.
pub struct Routing {
    live: ArcSwap<RouteTable>,
    /// The config of the table the live one replaced (rollback target).
    previous: Mutex<Option<Arc<Config>>>,
    pub(super) registry: Arc<Registry>,
    health: HealthChecker,
    metrics: Arc<Metrics>,
    file: Option<PathBuf>,
    overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
    /// Serialises reloads, applies, rollbacks and discovery changes. Never held by request handling.
    pub(super) lock: tokio::sync::Mutex<()>,
    /// Reload tickets issued (one per trigger).
    tickets: AtomicU64,
    /// The last reload: the highest ticket it covered and its result.
    last_reload: Mutex<Option<(u64, Result<u64, ReloadError>)>>,
    /// Nodes a reload removed, with their drain deadline.
    removed_by_reload: Mutex<HashMap<NodeId, Instant>>,
    /// File contents seen and live.
    seen: Mutex<FileSeen>,
    /// File watch and SIGHUP, set up at construction; taken by [`super::triggers::watch_triggers`].
    trigger_sources: Mutex<Option<TriggerSources>>,
    /// Last good DNS answers of the discovery clusters.
    pub(super) discovered: Discovered,
    /// The live generation, sent on every swap.
    swapped: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing")
            .field("generation", &self.live.load().generation)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl Routing {
    /// Builds generation 1 from `config` (no warm-up) and starts its health checks; must run
    /// inside the tokio runtime. `file` is re-read on reload; `overrides` (CLI flags) are applied
    /// to every config loaded from it.
    pub fn new(
        config: Config,
        file: Option<PathBuf>,
        overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let discovered = Discovered::default();
        let mut config = config;
        discovered.fill(&mut config);
        let table = RouteTable::build(Arc::new(config), &registry, 1, None);
        let health = HealthChecker::new();
        health.reconcile(&table.nodes());
        metrics.generation.set(1);
        let sources = TriggerSources::new(file.as_deref());
        Routing {
            live: ArcSwap::from_pointee(table),
            previous: Mutex::new(None),
            registry,
            health,
            metrics,
            file,
            overrides,
            lock: tokio::sync::Mutex::new(()),
            tickets: AtomicU64::new(0),
            last_reload: Mutex::new(None),
            removed_by_reload: Mutex::new(HashMap::new()),
            seen: Mutex::new(FileSeen::default()),
            trigger_sources: Mutex::new(Some(sources)),
            discovered,
            swapped: tokio::sync::watch::Sender::new(1),
        }
    }

    /// A receiver of the live generation, changed on every table swap (reload, rollback,
    /// discovery change).
    pub fn subscribe_swaps(&self) -> tokio::sync::watch::Receiver<u64> {
        self.swapped.subscribe()
    }

    /// Where node `id` of `cluster` in the live table comes from (static or DNS, with the time
    /// of its last resolution).
    pub fn node_source(&self, cluster: &str, id: &str) -> NodeSource {
        self.discovered.source(&self.table().config, cluster, id)
    }

    /// The reload trigger sources set up by [`Self::new`]; `None` once taken.
    pub fn take_trigger_sources(&self) -> Option<TriggerSources> {
        self.trigger_sources
            .lock()
            .expect("trigger_sources mutex is never poisoned")
            .take()
    }

    /// The live table; load once per request and keep the snapshot.
    pub fn table(&self) -> Arc<RouteTable> {
        self.live.load_full()
    }

    /// The registry of node runtimes.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// True if a rollback target exists (`GET /admin/routes`).
    pub fn has_previous(&self) -> bool {
        self.previous
            .lock()
            .expect("previous mutex is never poisoned")
            .is_some()
    }

    /// Re-reads the config file and applies it (`POST /admin/reload`); see [`Self::reload_from`].
    ///
    /// # Errors
    /// As [`Self::reload_from`].
    pub async fn reload(&self) -> Result<u64, ReloadError> {
        self.reload_from(ReloadTrigger::Admin).await
    }

    /// Re-reads the config file and applies it; returns the live generation afterwards. Concurrent
    /// calls coalesce (module docs): a call may return the result of a reload that started after
    /// it was made, which read the same or a newer file. Content already handled is not applied
    /// again (module docs), which returns the live generation.
    ///
    /// # Errors
    /// [`ReloadError::Invalid`] (counted `invalid`), [`ReloadError::ProbeFailed`] (counted
    /// `probe_failed`), [`ReloadError::NoFile`]; the live table stays in every case.
    pub async fn reload_from(&self, trigger: ReloadTrigger) -> Result<u64, ReloadError> {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel) + 1;
        let _guard = self.lock.lock().await;
        if let Some((covered, result)) = &*self
            .last_reload
            .lock()
            .expect("last_reload mutex is never poisoned")
        {
            if *covered >= ticket {
                return result.clone();
            }
        }
        // Every ticket issued so far was issued before the file is read below: this reload covers it.
        let covered = self.tickets.load(Ordering::Acquire);
        let before = self.live.load().generation;
        crate::notify::reloading();
        let result = self.reload_locked(trigger).await;
        let generation = self.live.load().generation;
        self.metrics.events.publish(Event::Reload {
            generation,
            result: match &result {
                Ok(g) if *g == before => "unchanged",
                Ok(_) => "ok",
                Err(ReloadError::Invalid(_)) => "invalid",
                Err(ReloadError::ProbeFailed { .. }) => "probe_failed",
                Err(ReloadError::NoFile) => "no_file",
                Err(ReloadError::NoPrevious) => "no_previous",
            },
        });
        // Whatever the result, the gateway serves again (the old table stays on a refusal).
        crate::notify::ready();
        *self
            .last_reload
            .lock()
            .expect("last_reload mutex is never poisoned") = Some((covered, result.clone()));
        result
    }

    async fn reload_locked(&self, trigger: ReloadTrigger) -> Result<u64, ReloadError> {
        let Some(path) = self.file.clone() else {
            return Err(ReloadError::NoFile);
        };
        let (hash, loaded) = tokio::task::spawn_blocking(move || load_file(&path))
            .await
            .expect("config loading does not panic");
        {
            let mut seen = self.seen.lock().expect("seen mutex is never poisoned");
            let skip = match trigger {
                ReloadTrigger::File => hash.is_some() && seen.read == hash,
                ReloadTrigger::Signal | ReloadTrigger::Admin => hash.is_some() && seen.live == hash,
            };
            if skip {
                let g = self.live.load().generation;
                tracing::debug!(
                    ?trigger,
                    generation = g,
                    "config file content already handled; nothing to reload"
                );
                return Ok(g);
            }
            seen.read = hash;
        }
        let mut cfg = match loaded {
            Ok(c) => c,
            Err(e) => {
                self.metrics.reload("invalid");
                tracing::warn!(?trigger, errors = %e, "reload refused: invalid config; the live table stays");
                return Err(e.into());
            }
        };
        (self.overrides)(&mut cfg);
        let g = self.apply_locked(cfg).await?;
        self.seen.lock().expect("seen mutex is never poisoned").live = hash;
        Ok(g)
    }

    /// Applies `cfg` as a new table, with the pre-swap probe and warm-up (used by reload and
    /// tests). Returns the new generation.
    ///
    /// # Errors
    /// [`ReloadError::ProbeFailed`]; the live table stays.
    pub async fn apply(&self, cfg: Config) -> Result<u64, ReloadError> {
        let _guard = self.lock.lock().await;
        let g = self.apply_locked(cfg).await?;
        self.seen.lock().expect("seen mutex is never poisoned").live = None;
        Ok(g)
    }

    /// Restores the previous table (`POST /admin/rollback`), counted as `gateway_reloads_total{result}`.
    /// Returns the new generation.
    ///
    /// # Errors
    /// [`ReloadError::NoPrevious`].
    pub async fn rollback(&self, result: &'static str) -> Result<u64, ReloadError> {
        let _guard = self.lock.lock().await;
        self.rollback_locked(result)
    }

    /// Rolls back only if generation `generation` is still live (the warm-up watcher judged that
    /// table). `Ok(None)` if another swap came first.
    ///
    /// # Errors
    /// [`ReloadError::NoPrevious`].
    pub async fn rollback_from(
        &self,
        generation: u64,
        result: &'static str,
    ) -> Result<Option<u64>, ReloadError> {
        let _guard = self.lock.lock().await;
        if self.live.load().generation != generation {
            return Ok(None);
        }
        self.rollback_locked(result).map(Some)
    }

    fn rollback_locked(&self, result: &'static str) -> Result<u64, ReloadError> {
        let prev = self
            .previous
            .lock()
            .expect("previous mutex is never poisoned")
            .clone();
        let Some(prev) = prev else {
            return Err(ReloadError::NoPrevious);
        };
        let live = self.live.load_full();
        // Discovered nodes are today's, not those of the day the previous table was live.
        let mut prev = (*prev).clone();
        self.discovered.fill(&mut prev);
        // No warm-up for a rollback: it restores a table that was already serving.
        let table = RouteTable::build(Arc::new(prev), &self.registry, live.generation + 1, None);
        let g = self.commit(table, &live);
        // The live table no longer matches the file: SIGHUP or the admin call may re-apply it.
        self.seen.lock().expect("seen mutex is never poisoned").live = None;
        self.metrics.reload(result);
        self.metrics.events.publish(Event::Reload {
            generation: g,
            result,
        });
        tracing::warn!(
            generation = g,
            from_generation = live.generation,
            result,
            "route table rolled back"
        );
        Ok(g)
    }

    /// Stops every health-check task and waits for them.
    pub async fn shutdown(&self) {
        self.health.shutdown().await;
    }
}

/// Reads and validates the file at `path`; returns a hash of its content (`None` if unreadable)
/// and the config or its errors.
fn load_file(path: &std::path::Path) -> (Option<u64>, Result<Config, ConfigError>) {
    use std::hash::{Hash, Hasher};
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            (
                Some(h.finish()),
                config::load_str(&text, &path.display().to_string()),
            )
        }
        // load_path renders the read error in the SPEC's shape.
        Err(_) => (None, config::load_path(path)),
    }
}
