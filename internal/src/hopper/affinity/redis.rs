//! The Redis affinity store (SPEC section 7): Redis is the source of truth for bindings, shared by
//! gateway replicas; a bounded local cache ([`MemoryStore`]) in front of it keeps Redis off the
//! per-request path.
//!
//! Schema (documented for other gateways in the README): key `<prefix>conn:<conn-id>` holds the
//! node id as a plain string with a sliding TTL (`PX`); hops are an atomic compare-and-set script;
//! hop and remove messages go to channel `<prefix>hops` as JSON `{"conn":..,"from":..,"to":..}`
//! (`to` is `null` for a remove).
//!
//! Request path: a cached binding costs no Redis call; when less than half of its TTL is left, a
//! refresh is queued (bounded) for the refresher task. A miss is one `EVAL` bounded by
//! `affinity.redis_timeout`. Any error or timeout marks Redis *down*: from then on every operation is
//! answered locally (fresh bindings stay local and are remembered, bounded, for write-back) until the
//! maintainer sees Redis answer again. Redis never fails a request.
//!
//! Tasks (spawned by [`RedisStore::connect`], cancelled and joined by [`RedisStore::shutdown`]):
//! the subscriber (`<prefix>hops` invalidations; a lost subscription marks Redis down and makes the
//! cache be dropped once it is back), the maintainer (reconnect, probe, write-back) and the refresher
//! (sliding TTL). Errors are counted per op and logged at most once per [`LOG_INTERVAL`].

mod conn;
mod events;
mod maintain;
mod shared;
mod target;
mod tasks;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use lru::LruCache;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Binding, MemoryStore};
use crate::hopper::ConnId;
use crate::metrics::Metrics;

pub(crate) use self::events::{DrainRecord, EventMessage, FleetEvent};
use self::shared::{
    same_or_new, ErrorLog, Pending, Shared, BIND_SCRIPT, DEL_SCRIPT, GET_SCRIPT, HOP_SCRIPT,
    NO_ARGS,
};
pub(crate) use self::target::{RedisTarget, TargetError};

/// At most one WARN line about Redis errors per this interval; the rest are counted only.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// How often the maintainer probes a down Redis and flushes write-backs.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Queued TTL refreshes; past this, a refresh is skipped and retried on a later use.
const REFRESH_QUEUE: usize = 1024;
/// Write-backs taken from the pending set per round, and run concurrently.
const WRITEBACK_BATCH: usize = 256;
const WRITEBACK_CONCURRENCY: usize = 16;
/// Acknowledged writes kept for replay on a new master after a failover: at most this many, and
/// none older than [`JOURNAL_AGE`] (longer than Sentinel takes to demote an old master, ~10 s).
const JOURNAL_CAP: usize = 16_384;
const JOURNAL_AGE: Duration = Duration::from_secs(30);
/// Invalidation counters (per hash slot of the conn id) that stop a racing cache fill.
const EPOCH_SLOTS: usize = 64;

/// Why the Redis store cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `affinity.redis_url` cannot be used.
    #[error(transparent)]
    Url(#[from] TargetError),
}

/// What the Redis store needs from `[affinity]` (SPEC section 3).
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `affinity.redis_url` (any SPEC section 7 scheme).
    pub url: String,
    /// `affinity.key_prefix`, e.g. `hopgw:`.
    pub key_prefix: String,
    /// `affinity.ttl`: sliding TTL of a binding.
    pub ttl: Duration,
    /// `affinity.redis_timeout`: bound on each Redis call.
    pub timeout: Duration,
    /// `affinity.max_entries`: bound of the local cache and of the write-back set.
    pub max_entries: usize,
    /// `affinity.redis_ca`: PEM bytes of the CA for `rediss://`; `None` = the system roots.
    pub ca: Option<Vec<u8>>,
}

/// Redis-backed bindings with a local cache; see the module docs. Cheap to share behind the hopper.
pub struct RedisStore {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.shared.target)
            .field("prefix", &self.shared.prefix)
            .field("down", &self.shared.is_down())
            .finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        // A store dropped without `shutdown` still stops its tasks.
        self.cancel.cancel();
    }
}

impl RedisStore {
    /// Parses the URL, tries to connect (bounded by `max(4 x timeout, 1 s)`), and starts the
    /// subscriber, maintainer and refresher tasks. An unreachable Redis is not an error: the store
    /// starts down, serves locally, and connects and writes back when Redis answers.
    ///
    /// # Errors
    /// [`StoreError::Url`] when `settings.url` is malformed or needs a feature not compiled in (TLS).
    pub async fn connect(
        settings: RedisSettings,
        metrics: Arc<Metrics>,
    ) -> Result<RedisStore, StoreError> {
        let target = RedisTarget::parse(&settings.url)?.with_ca(settings.ca.clone());
        let follow = target.resolves_master();
        let (refresh_tx, refresh_rx) = mpsc::channel(REFRESH_QUEUE);
        let cap = settings.max_entries.max(1);
        let journal = Mutex::new(std::collections::VecDeque::new());
        let shared = Arc::new(Shared {
            target,
            conn: ArcSwapOption::empty(),
            cache: MemoryStore::new(cap, settings.ttl),
            pending: Mutex::new(LruCache::unbounded()),
            pending_cap: cap,
            down: AtomicBool::new(true),
            resync: AtomicBool::new(false),
            epochs: std::array::from_fn(|_| AtomicU64::new(0)),
            wake: Notify::new(),
            refresh_tx,
            channel: format!("{}hops", settings.key_prefix),
            prefix: settings.key_prefix,
            ttl: settings.ttl,
            timeout: settings.timeout,
            connect_timeout: (settings.timeout * 4).max(Duration::from_secs(1)),
            metrics,
            log: ErrorLog::default(),
            master: Mutex::new(None),
            resubscribe: Notify::new(),
            journal,
        });
        match tokio::time::timeout(
            shared.connect_timeout,
            shared
                .target
                .connect(shared.timeout, shared.connect_timeout),
        )
        .await
        {
            Ok(Ok((c, master))) => {
                shared.conn.store(Some(Arc::new(c)));
                *shared
                    .master
                    .lock()
                    .expect("master mutex is never poisoned") = master;
                shared.down.store(false, Ordering::Release);
                tracing::info!(url = %redact(&settings.url), "redis affinity store connected");
            }
            Ok(Err(e)) => shared.log.report(&shared.metrics, "writeback", &e),
            Err(_) => shared.log.report(
                &shared.metrics,
                "writeback",
                &format_args!("no connection within {:?}", shared.connect_timeout),
            ),
        }
        let cancel = CancellationToken::new();
        let mut tasks = vec![
            tokio::spawn(tasks::subscribe(shared.clone(), cancel.clone())),
            tokio::spawn(maintain::maintain(shared.clone(), cancel.clone())),
            tokio::spawn(tasks::refresh(shared.clone(), refresh_rx, cancel.clone())),
        ];
        if follow {
            tasks.push(tokio::spawn(tasks::follow_sentinel(
                shared.clone(),
                cancel.clone(),
            )));
        }
        Ok(RedisStore {
            shared,
            cancel,
            tasks: Mutex::new(tasks),
        })
    }

    /// See [`super::AffinityStore::get`]. A cached binding costs no Redis call (a TTL refresh is
    /// queued when less than half of it is left); a miss is one bounded `EVAL`.
    pub async fn get(&self, conn: &ConnId) -> Option<Arc<str>> {
        let s = &*self.shared;
        if let Some(b) = s.cache.lookup(conn) {
            let refresh = b.ttl < s.ttl / 2;
            if s.is_down() {
                if refresh {
                    s.cache.put(conn, &b.node);
                }
                s.remember(conn, Pending::Bind(b.node.clone()));
            } else if refresh
                && s.refresh_tx
                    .try_send((conn.clone(), b.node.clone()))
                    .is_ok()
            {
                // Slide locally now so later uses do not queue the same refresh again.
                s.cache.put(conn, &b.node);
            }
            return Some(b.node);
        }
        let mut c = s.conn()?;
        let epoch = s.epoch(conn);
        let node: Arc<str> = s
            .guard(
                "get",
                s.eval::<Option<String>>(&mut c, GET_SCRIPT, &s.key(conn), s.ttl_ms()),
            )
            .await??
            .into();
        s.fill(conn, epoch, &node);
        Some(node)
    }

    /// See [`super::AffinityStore::bind`]. Atomic in Redis (an existing binding wins and slides);
    /// while Redis is down the binding is made locally and written back later.
    pub async fn bind(&self, conn: &ConnId, node: &Arc<str>) -> Arc<str> {
        let s = &*self.shared;
        if let Some(mut c) = s.conn() {
            let epoch = s.epoch(conn);
            if let Some(won) = s
                .guard(
                    "bind",
                    s.eval::<String>(&mut c, BIND_SCRIPT, &s.key(conn), (&**node, s.ttl_ms())),
                )
                .await
            {
                let won = same_or_new(node, won);
                s.fill(conn, epoch, &won);
                s.journal(conn, Pending::Bind(won.clone()));
                return won;
            }
        }
        let won = s.cache.bind(conn, node);
        s.remember(conn, Pending::Bind(won.clone()));
        won
    }

    /// See [`super::AffinityStore::hop`]. A compare-and-set script in Redis; a hop that changed the
    /// key is published on `<prefix>hops`. While Redis is down the hop is made locally. `true`
    /// when the script changed the key (or, while Redis is down, the local hop did).
    pub async fn hop(&self, conn: &ConnId, from: &str, to: &Arc<str>) -> (Arc<str>, bool) {
        let s = &*self.shared;
        if let Some(mut c) = s.conn() {
            let epoch = s.epoch(conn);
            if let Some((won, changed)) = s
                .guard(
                    "hop",
                    s.eval::<(String, i64)>(
                        &mut c,
                        HOP_SCRIPT,
                        &s.key(conn),
                        (from, &**to, s.ttl_ms()),
                    ),
                )
                .await
            {
                let won = same_or_new(to, won);
                s.fill(conn, epoch, &won);
                if changed == 1 {
                    s.journal(
                        conn,
                        Pending::Hop {
                            from: from.into(),
                            to: won.clone(),
                        },
                    );
                    s.publish(&mut c, "hop", conn, Some(from), Some(&won)).await;
                }
                return (won, changed == 1);
            }
        }
        let (won, swapped) = s.cache.hop(conn, from, to);
        s.remember(
            conn,
            Pending::Hop {
                from: from.into(),
                to: won.clone(),
            },
        );
        (won, swapped)
    }

    /// See [`super::AffinityStore::remove`]. Deletes the key and publishes `{"conn","from","to":null}`.
    pub async fn remove(&self, conn: &ConnId) -> bool {
        let s = &*self.shared;
        let local = s.cache.remove(conn);
        s.bump(conn);
        if let Some(mut c) = s.conn() {
            if let Some(old) = s
                .guard(
                    "remove",
                    s.eval::<Option<String>>(&mut c, DEL_SCRIPT, &s.key(conn), NO_ARGS),
                )
                .await
            {
                s.pending
                    .lock()
                    .expect("pending mutex is never poisoned")
                    .pop(conn);
                if let Some(old) = &old {
                    s.journal(conn, Pending::Remove);
                    s.publish(&mut c, "remove", conn, Some(old), None).await;
                }
                return old.is_some();
            }
        }
        s.remember(conn, Pending::Remove);
        local
    }

    /// See [`super::AffinityStore::lookup`]: `GET` + `PTTL` in Redis, the local cache while it is down.
    pub async fn lookup(&self, conn: &ConnId) -> Option<Binding> {
        let s = &*self.shared;
        if let Some(mut c) = s.conn() {
            let key = s.key(conn);
            let mut pipe = ::redis::pipe();
            pipe.get(&key).pttl(&key);
            let call = pipe.query_async::<(Option<String>, i64)>(&mut c);
            if let Some((node, pttl)) = s.guard("get", call).await {
                let ttl = match pttl {
                    ms if ms > 0 => Duration::from_millis(ms.unsigned_abs()),
                    // A key without expiry (written by hand): report the configured TTL.
                    -1 => s.ttl,
                    _ => return None,
                };
                return node.map(|n| Binding {
                    node: Arc::from(n),
                    ttl,
                });
            }
        }
        s.cache.lookup(conn)
    }

    /// Bindings per node in the local cache (this replica's view; the status page's column).
    pub fn cached_per_node(&self) -> std::collections::HashMap<Arc<str>, usize> {
        self.shared.cache.per_node()
    }

    /// True while Redis is believed unreachable (answers come from the local cache).
    pub fn is_down(&self) -> bool {
        self.shared.is_down()
    }

    /// Cancels the subscriber, maintainer and refresher tasks and waits for them to end.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks mutex is never poisoned"));
        for t in tasks {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "redis affinity store task ended abnormally");
            }
        }
    }
}

/// The URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_outage;
