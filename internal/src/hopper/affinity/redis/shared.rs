//! The Redis store's shared state and schema: the scripts (the key layout is in the parent's docs),
//! the hop message, the rate-limited error log, and [`Shared`], the state the store handle and its
//! tasks hold: connection, local cache, write-back set, down/resync flags and invalidation epochs.
//!
//! Spawns nothing; never holds a lock across an await.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::{FromRedisValue, RedisResult, ToRedisArgs};
use arc_swap::ArcSwapOption;
use lru::LruCache;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::conn::Conn;
use super::target::RedisTarget;
use super::{EPOCH_SLOTS, JOURNAL_AGE, JOURNAL_CAP, LOG_INTERVAL};
use crate::hopper::affinity::MemoryStore;
use crate::hopper::ConnId;
use crate::metrics::Metrics;

/// `GET` + slide: the bound node or nil. `KEYS[1]` = key, `ARGV[1]` = ttl ms.
pub(super) const GET_SCRIPT: &str = "local v = redis.call('GET', KEYS[1])
if v then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return v";
/// Bind unless bound (then slide): returns the bound node. `KEYS[1]` = key, ARGV = node, ttl ms.
pub(super) const BIND_SCRIPT: &str = "local v = redis.call('GET', KEYS[1])
if v then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]";
/// Compare-and-set hop: set `to` only if the key holds `from` or nothing. Returns {node, changed}.
/// `KEYS[1]` = key, ARGV = from, to, ttl ms.
pub(super) const HOP_SCRIPT: &str = "local v = redis.call('GET', KEYS[1])
if (not v) or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {ARGV[2], 1}
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {v, 0}";
/// Arguments of a script that takes none besides its key.
pub(super) const NO_ARGS: &[&str] = &[];
/// Delete, returning the node it held (nil if none). `KEYS[1]` = key.
pub(super) const DEL_SCRIPT: &str = "local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v";

/// A local change Redis has not seen yet (made while it was down).
#[derive(Debug, Clone)]
pub(super) enum Pending {
    /// Bound (or used) locally: written with bind semantics (an existing binding wins).
    Bind(Arc<str>),
    /// Hopped locally away from `from`, the node Redis last held: written as a compare-and-set.
    Hop { from: Arc<str>, to: Arc<str> },
    /// Removed locally.
    Remove,
}

/// The subset of a hop message the store reads; unknown fields are ignored.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub(super) struct HopMessage {
    pub(super) conn: String,
    pub(super) from: Option<String>,
    pub(super) to: Option<String>,
}

/// Counts every error and logs at most one WARN per [`LOG_INTERVAL`].
#[derive(Debug, Default)]
pub(super) struct ErrorLog {
    pub(super) last: Mutex<Option<Instant>>,
    pub(super) suppressed: AtomicU64,
}

impl ErrorLog {
    pub(super) fn report(&self, metrics: &Metrics, op: &'static str, error: &dyn fmt::Display) {
        metrics.store_error(op);
        let now = Instant::now();
        let due = {
            let mut last = self.last.lock().expect("error log mutex is never poisoned");
            let due = last.is_none_or(|t| now.duration_since(t) >= LOG_INTERVAL);
            if due {
                *last = Some(now);
            }
            due
        };
        if due {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(op, %error, suppressed, "redis affinity store unavailable; serving bindings from the local cache");
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Acknowledged writes with the time Redis took them, oldest first.
pub(super) type Journal = VecDeque<(Instant, ConnId, Pending)>;

/// State shared by the store handle and its tasks.
pub(super) struct Shared {
    pub(super) target: RedisTarget,
    pub(super) conn: ArcSwapOption<Conn>,
    pub(super) cache: MemoryStore,
    pub(super) pending: Mutex<LruCache<ConnId, Pending>>,
    pub(super) pending_cap: usize,
    /// Redis is believed unreachable: answer locally until the maintainer clears it.
    pub(super) down: AtomicBool,
    /// Invalidations may have been missed: drop the cache once Redis is back.
    pub(super) resync: AtomicBool,
    pub(super) epochs: [AtomicU64; EPOCH_SLOTS],
    pub(super) wake: Notify,
    pub(super) refresh_tx: mpsc::Sender<(ConnId, Arc<str>)>,
    pub(super) prefix: String,
    pub(super) channel: String,
    pub(super) ttl: Duration,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) metrics: Arc<Metrics>,
    pub(super) log: ErrorLog,
    /// Sentinel: the `host:port` of the master the command connection speaks to.
    pub(super) master: Mutex<Option<String>>,
    /// Tells the subscriber to drop its subscription and open one on the current master.
    pub(super) resubscribe: Notify,
    /// Acknowledged writes of the last [`JOURNAL_AGE`]: replayed on the new master after a
    /// failover (Sentinel: the old master may have taken them after the promotion; Cluster: the
    /// promoted replica may not have them yet).
    pub(super) journal: Mutex<Journal>,
}

/// Reuses `mine` when Redis answered with the same node, to keep one allocation per node id.
pub(super) fn same_or_new(mine: &Arc<str>, answer: String) -> Arc<str> {
    if **mine == *answer {
        mine.clone()
    } else {
        Arc::from(answer)
    }
}

impl Shared {
    pub(super) fn key(&self, conn: &str) -> String {
        format!("{}conn:{conn}", self.prefix)
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(super) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// A connection for a request-path call; `None` while Redis is down or not yet connected.
    pub(super) fn conn(&self) -> Option<Conn> {
        if self.is_down() {
            return None;
        }
        self.conn.load_full().map(|c| (*c).clone())
    }

    pub(super) fn epoch_slot(&self, conn: &str) -> &AtomicU64 {
        let h = conn
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        &self.epochs[h as usize % EPOCH_SLOTS]
    }

    pub(super) fn epoch(&self, conn: &str) -> u64 {
        self.epoch_slot(conn).load(Ordering::Acquire)
    }

    pub(super) fn bump(&self, conn: &str) {
        self.epoch_slot(conn).fetch_add(1, Ordering::AcqRel);
    }

    /// Caches what Redis answered unless an invalidation for this id raced the call.
    pub(super) fn fill(&self, conn: &ConnId, epoch: u64, node: &Arc<str>) {
        if self.epoch(conn) == epoch {
            self.cache.put(conn, node);
        } else {
            self.cache.remove(conn);
        }
    }

    /// Counts and (rate-limited) logs an error, and marks Redis down so requests stop waiting on it.
    /// In Redis Cluster a failing master is replaced by its replica, which may miss the last
    /// writes the master acknowledged (replication is asynchronous): the journal of recent writes
    /// then goes to the write-back set, so the maintainer re-asserts them once the cluster answers
    /// (bind semantics: a binding another replica wrote since wins).
    pub(super) fn fail(&self, op: &'static str, error: &dyn fmt::Display) {
        self.log.report(&self.metrics, op, error);
        if !self.down.swap(true, Ordering::AcqRel) {
            if matches!(self.target, RedisTarget::Cluster { .. }) {
                self.replay_journal();
            }
            self.wake.notify_one();
        }
    }

    /// Moves every journaled write into the write-back set (see [`Shared::journal`]).
    fn replay_journal(&self) {
        let recent: Vec<(ConnId, Pending)> = {
            let mut j = self
                .journal
                .lock()
                .expect("journal mutex is never poisoned");
            j.drain(..).map(|(_, id, change)| (id, change)).collect()
        };
        for (id, change) in recent {
            self.remember(&id, change);
        }
    }

    /// The server we write to is no master any more (a `READONLY` answer, a `+switch-master`, or
    /// Sentinel naming another address): drops the command connection so the maintainer
    /// reconnects (re-asking Sentinel and checking `ROLE`), moves the journal into the write-back
    /// set so recent writes reach the new master, and has the subscriber re-subscribe there.
    pub(super) fn switch(&self, why: &dyn fmt::Display) {
        *self.master.lock().expect("master mutex is never poisoned") = None;
        if self.conn.swap(None).is_some() {
            tracing::warn!(reason = %why, "redis master changed or turned replica; reconnecting");
        }
        self.down.store(true, Ordering::Release);
        self.replay_journal();
        self.resubscribe.notify_one();
        self.wake.notify_one();
    }

    /// Records a write Redis acknowledged, for replay after a failover (bounded by count and age).
    pub(super) fn journal(&self, conn: &ConnId, change: Pending) {
        let now = Instant::now();
        let mut j = self
            .journal
            .lock()
            .expect("journal mutex is never poisoned");
        while j
            .front()
            .is_some_and(|(t, ..)| j.len() >= JOURNAL_CAP || now.duration_since(*t) > JOURNAL_AGE)
        {
            j.pop_front();
        }
        j.push_back((now, conn.clone(), change));
    }

    /// Runs one Redis call bounded by the timeout; `None` (counted, logged, Redis marked down) on failure.
    pub(super) async fn guard<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                if e.kind() == ::redis::ErrorKind::ReadOnly {
                    // A replica: the master moved. Never read as "another replica won the race".
                    self.switch(&e);
                }
                self.fail(op, &e);
                None
            }
            Err(_) => {
                self.fail(op, &format_args!("no answer within {:?}", self.timeout));
                None
            }
        }
    }

    /// `EVAL script 1 key args...`. EVAL rather than EVALSHA: the scripts are tiny, and a restarted
    /// server or a cluster node never answers NOSCRIPT.
    pub(super) async fn eval<T: FromRedisValue>(
        &self,
        c: &mut Conn,
        script: &str,
        key: &str,
        args: impl ToRedisArgs,
    ) -> RedisResult<T> {
        ::redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg(key)
            .arg(args)
            .query_async(c)
            .await
    }

    pub(super) async fn publish(
        &self,
        c: &mut Conn,
        op: &'static str,
        conn: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) {
        let msg = HopMessage {
            conn: conn.to_string(),
            from: from.map(str::to_string),
            to: to.map(str::to_string),
        };
        let payload = serde_json::to_string(&msg).expect("a struct of strings always serializes");
        let mut cmd = ::redis::cmd("PUBLISH");
        cmd.arg(&self.channel).arg(payload);
        let publish = cmd.query_async::<i64>(c);
        // A lost message only delays other replicas until their next miss or resync.
        let _receivers = self.guard(op, publish).await;
    }

    /// Remembers a local change for write-back (bounded: past the cap the oldest is forgotten).
    pub(super) fn remember(&self, conn: &ConnId, change: Pending) {
        let mut p = self
            .pending
            .lock()
            .expect("pending mutex is never poisoned");
        let merged = match (p.get(conn), change) {
            // Keep the node Redis last held, so the write-back stays a compare-and-set against it.
            (Some(Pending::Hop { from, .. }), Pending::Bind(to) | Pending::Hop { to, .. }) => {
                Pending::Hop {
                    from: from.clone(),
                    to,
                }
            }
            (_, change) => change,
        };
        let dropped = if p.len() >= self.pending_cap && !p.contains(conn) {
            p.pop_lru()
        } else {
            None
        };
        p.put(conn.clone(), merged);
        drop(p);
        if dropped.is_some() {
            self.metrics.store_error("writeback");
        }
    }

    pub(super) fn has_pending(&self) -> bool {
        !self
            .pending
            .lock()
            .expect("pending mutex is never poisoned")
            .is_empty()
    }

    /// Handles one message from `<prefix>hops`: drops the cached binding unless it already says `to`
    /// (our own message, or one we are already consistent with).
    pub(super) fn on_message(&self, payload: &[u8]) {
        let Ok(msg) = serde_json::from_slice::<HopMessage>(payload) else {
            tracing::debug!(payload = %String::from_utf8_lossy(payload), "ignoring a malformed hop message");
            return;
        };
        // Every replica publishes ids it accepted, so a valid message always holds a valid id.
        let Ok(conn) = ConnId::checked(msg.conn.as_bytes()) else {
            tracing::debug!(conn = %msg.conn, "ignoring a hop message with an invalid conn id");
            return;
        };
        self.bump(&conn);
        match self.cache.lookup(&conn) {
            Some(b) if Some(&*b.node) == msg.to.as_deref() => {}
            Some(_) => {
                self.cache.remove(&conn);
            }
            None => {}
        }
    }
}
