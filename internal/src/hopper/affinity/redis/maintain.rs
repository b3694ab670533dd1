//! [`maintain`], the Redis store's recovery task (see [`super::tasks`]): (re)connects, probes a down
//! Redis, writes back the changes made locally while it was down, then marks it up (SPEC section 7).
//! Holds no lock across an await; every Redis call is bounded by the store timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::conn::{check_master, Conn};
use super::shared::{same_or_new, Pending, Shared, BIND_SCRIPT, DEL_SCRIPT, HOP_SCRIPT, NO_ARGS};
use super::target::RedisTarget;
use super::{PROBE_INTERVAL, WRITEBACK_BATCH, WRITEBACK_CONCURRENCY};
use crate::hopper::ConnId;

/// Every [`PROBE_INTERVAL`] (or when woken) while Redis is down, changes are pending or a resync
/// is due: reconnects, probes, writes back, drops the cache on resync, and marks Redis up.
pub(super) async fn maintain(s: Arc<Shared>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
            () = s.wake.notified() => {}
        }
        if !s.is_down() && !s.has_pending() && !s.resync.load(Ordering::Acquire) {
            continue;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = recover(&s) => {}
        }
    }
}

/// One recovery round; see [`maintain`].
async fn recover(s: &Shared) {
    let conn = match s.conn.load_full() {
        Some(c) => (*c).clone(),
        None => match tokio::time::timeout(
            s.connect_timeout,
            s.target.connect(s.timeout, s.connect_timeout),
        )
        .await
        {
            Ok(Ok((c, master))) => {
                s.conn.store(Some(Arc::new(c.clone())));
                *s.master.lock().expect("master mutex is never poisoned") = master;
                c
            }
            Ok(Err(e)) => return s.fail("writeback", &e),
            Err(_) => {
                return s.fail(
                    "writeback",
                    &format_args!("no connection within {:?}", s.connect_timeout),
                )
            }
        },
    };
    if s.is_down() {
        let mut probe = conn.clone();
        // A single server or Sentinel's master must still be a master (`ROLE`); a cluster routes
        // each key itself, so any answer will do.
        let cluster = matches!(s.target, RedisTarget::Cluster { .. });
        let answered = if cluster {
            s.guard(
                "writeback",
                ::redis::cmd("PING").query_async::<String>(&mut probe),
            )
            .await
            .is_some()
        } else {
            s.guard("writeback", check_master(&mut probe))
                .await
                .is_some()
        };
        if !answered {
            if s.target.resolves_master() {
                // The master may have moved: ask the sentinels again next round.
                s.conn.store(None);
            }
            return;
        }
    }
    let mut written = match flush(s, &conn).await {
        Some(n) => n,
        None => return,
    };
    if s.resync.swap(false, Ordering::AcqRel) {
        s.cache.clear();
        for e in &s.epochs {
            e.fetch_add(1, Ordering::AcqRel);
        }
    }
    if s.down.swap(false, Ordering::AcqRel) {
        // Changes made between the flush and now are still local: write them at once.
        written += flush(s, &conn).await.unwrap_or(0);
        tracing::info!(
            written_back = written,
            "redis affinity store reachable again; bindings written back"
        );
    }
}

/// Writes back pending changes in bounded batches. `Some(count)` when the set was emptied (or a
/// round's budget used), `None` when a write failed (the failed ones are re-queued).
async fn flush(s: &Shared, conn: &Conn) -> Option<usize> {
    let mut written = 0;
    // A budget, so a set refilled as fast as it drains cannot keep this round going.
    for _ in 0..=(s.pending_cap / WRITEBACK_BATCH) {
        let batch: Vec<(ConnId, Pending)> = {
            let mut p = s.pending.lock().expect("pending mutex is never poisoned");
            std::iter::from_fn(|| p.pop_lru())
                .take(WRITEBACK_BATCH)
                .collect()
        };
        if batch.is_empty() {
            break;
        }
        let results: Vec<(ConnId, Pending, bool)> = stream::iter(batch)
            .map(|(id, change)| async move {
                let ok = write_back(s, conn.clone(), &id, &change).await;
                (id, change, ok)
            })
            .buffer_unordered(WRITEBACK_CONCURRENCY)
            .collect()
            .await;
        let mut failed = false;
        let mut p = s.pending.lock().expect("pending mutex is never poisoned");
        for (id, change, ok) in results {
            if ok {
                written += 1;
            } else {
                failed = true;
                // A newer local change for the id supersedes the failed one.
                if !p.contains(&id) && p.len() < s.pending_cap {
                    p.put(id, change);
                }
            }
        }
        drop(p);
        if failed {
            return None;
        }
    }
    Some(written)
}

/// Writes one local change to Redis and adopts what Redis ends up holding. False on a failed call.
async fn write_back(s: &Shared, mut c: Conn, id: &ConnId, change: &Pending) -> bool {
    let key = s.key(id);
    let epoch = s.epoch(id);
    match change {
        Pending::Bind(node) => {
            let Some(won) = s
                .guard(
                    "writeback",
                    s.eval::<String>(&mut c, BIND_SCRIPT, &key, (&**node, s.ttl_ms())),
                )
                .await
            else {
                return false;
            };
            if *won == **node {
                s.journal(id, change.clone());
            } else {
                s.fill(id, epoch, &same_or_new(node, won));
            }
        }
        Pending::Hop { from, to } => {
            let Some((won, changed)) = s
                .guard(
                    "writeback",
                    s.eval::<(String, i64)>(&mut c, HOP_SCRIPT, &key, (&**from, &**to, s.ttl_ms())),
                )
                .await
            else {
                return false;
            };
            if changed == 1 {
                s.journal(id, change.clone());
                s.publish(&mut c, "writeback", id, Some(from), Some(to))
                    .await;
            } else if *won != **to {
                s.fill(id, epoch, &same_or_new(to, won));
            }
        }
        Pending::Remove => {
            let Some(old) = s
                .guard(
                    "writeback",
                    s.eval::<Option<String>>(&mut c, DEL_SCRIPT, &key, NO_ARGS),
                )
                .await
            else {
                return false;
            };
            if let Some(old) = old {
                s.publish(&mut c, "writeback", id, Some(&old), None).await;
            }
        }
    }
    true
}
