//! The Redis store's background tasks, each cancelled by the store's token and joined by
//! `RedisStore::shutdown`:
//! - [`subscribe`]: listens on `<prefix>hops` and invalidates cached bindings; a lost subscription
//!   marks Redis down and asks for a resync (cache dropped) once it is back.
//! - [`maintain`]: (re)connects, probes a down Redis, writes back local changes, then marks it up.
//! - [`refresh`]: slides the Redis TTL of bindings served from the cache (one bounded queue).
//! - [`follow_sentinel`] (Sentinel only): listens for `+switch-master` on a sentinel and polls the
//!   master's address, and switches to the new master as soon as it changes.
//!
//! None of them holds a lock across an await, and every Redis call is bounded by the store timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::conn::{check_master, Conn};
use super::shared::{same_or_new, Pending, Shared, BIND_SCRIPT, DEL_SCRIPT, HOP_SCRIPT, NO_ARGS};
use super::target::RedisTarget;
use super::{PROBE_INTERVAL, WRITEBACK_BATCH, WRITEBACK_CONCURRENCY};

/// First and longest wait between subscription attempts.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);
/// A `PING` on the subscription this often detects a server that stopped answering without closing.
const SUBSCRIPTION_PING: Duration = Duration::from_secs(2);
/// How often the Sentinel follower asks a sentinel for the master's address (besides the
/// `+switch-master` messages), so a missed message costs at most this long.
const SENTINEL_POLL: Duration = Duration::from_millis(500);

/// Sleeps `d` unless cancelled first; false when cancelled.
async fn pause(cancel: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(d) => true,
    }
}

/// Subscribes to `<prefix>hops` and applies each message until cancelled, resubscribing with backoff.
pub(super) async fn subscribe(s: Arc<Shared>, cancel: CancellationToken) {
    // Set after any failed or lost subscription: messages may have been missed.
    let mut missed = false;
    let mut backoff = RESUBSCRIBE_MIN;
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let pubsub = tokio::select! {
            () = cancel.cancelled() => return,
            p = open_subscription(&s) => p,
        };
        let Some(pubsub) = pubsub else {
            missed = true;
            if !pause(&cancel, backoff).await {
                return;
            }
            backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
            continue;
        };
        backoff = RESUBSCRIBE_MIN;
        if std::mem::take(&mut missed) {
            s.resync.store(true, Ordering::Release);
            s.wake.notify_one();
        }
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(SUBSCRIPTION_PING);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ping.tick().await;
        let lost = loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = s.resubscribe.notified() => break None,
                m = messages.next() => match m {
                    Some(m) => s.on_message(m.get_payload_bytes()),
                    None => break Some("subscription connection closed".to_string()),
                },
                _ = ping.tick() => {
                    match tokio::time::timeout(s.timeout.max(Duration::from_secs(1)), sink.ping::<::redis::Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => break Some(e.to_string()),
                        Err(_) => break Some("subscription ping unanswered".to_string()),
                    }
                }
            }
        };
        missed = true;
        match lost {
            Some(lost) => s.fail("subscribe", &lost),
            None => tracing::info!("redis master changed; re-subscribing to hop messages there"),
        }
    }
}

/// One subscribed connection, or `None` (counted and logged) when no candidate accepts.
async fn open_subscription(s: &Shared) -> Option<::redis::aio::PubSub> {
    let clients = match tokio::time::timeout(
        s.connect_timeout,
        s.target.pubsub_clients(s.connect_timeout),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            s.fail("subscribe", &e);
            return None;
        }
        Err(_) => {
            s.fail("subscribe", &"no sentinel answered in time");
            return None;
        }
    };
    let mut last = String::from("no server to subscribe to");
    for client in clients {
        let attempt = async {
            let mut p = client.get_async_pubsub().await?;
            p.subscribe(&s.channel).await?;
            Ok::<_, ::redis::RedisError>(p)
        };
        match tokio::time::timeout(s.connect_timeout, attempt).await {
            Ok(Ok(p)) => return Some(p),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no subscription within {:?}", s.connect_timeout),
        }
    }
    s.fail("subscribe", &last);
    None
}

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
        let batch: Vec<(Box<str>, Pending)> = {
            let mut p = s.pending.lock().expect("pending mutex is never poisoned");
            std::iter::from_fn(|| p.pop_lru())
                .take(WRITEBACK_BATCH)
                .collect()
        };
        if batch.is_empty() {
            break;
        }
        let results: Vec<(Box<str>, Pending, bool)> = stream::iter(batch)
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
async fn write_back(s: &Shared, mut c: Conn, id: &str, change: &Pending) -> bool {
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

/// Slides the Redis TTL of bindings served from the cache (queued by `get`). The bind script also
/// recreates a key that expired in Redis meanwhile and reports a node another replica set.
pub(super) async fn refresh(
    s: Arc<Shared>,
    mut queue: mpsc::Receiver<(Box<str>, Arc<str>)>,
    cancel: CancellationToken,
) {
    loop {
        let (id, node) = tokio::select! {
            () = cancel.cancelled() => return,
            m = queue.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        let Some(mut c) = s.conn() else {
            s.remember(&id, Pending::Bind(node));
            continue;
        };
        let epoch = s.epoch(&id);
        let key = s.key(&id);
        let refreshed = tokio::select! {
            () = cancel.cancelled() => return,
            r = s.guard("bind", s.eval::<String>(&mut c, BIND_SCRIPT, &key, (&*node, s.ttl_ms()))) => r,
        };
        match refreshed {
            Some(won) if *won != *node => s.fill(&id, epoch, &same_or_new(&node, won)),
            Some(_) => {}
            None => s.remember(&id, Pending::Bind(node)),
        }
    }
}

/// Sentinel only: follows the master the sentinels name. Subscribes to `+switch-master` on a
/// sentinel (re-subscribing on loss) and also asks for the master's address every
/// [`SENTINEL_POLL`]; when it differs from the master the command connection speaks to, calls
/// [`Shared::switch`], so writes go to the new master at once instead of to the old one until
/// Sentinel demotes it.
pub(super) async fn follow_sentinel(s: Arc<Shared>, cancel: CancellationToken) {
    let RedisTarget::Sentinel {
        sentinels, master, ..
    } = &s.target
    else {
        return;
    };
    let mut poll = tokio::time::interval(SENTINEL_POLL);
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let sub = tokio::select! {
            () = cancel.cancelled() => return,
            p = s.target.switch_subscription(s.connect_timeout) => p.ok(),
        };
        let mut messages = sub.map(|p| p.into_on_message());
        loop {
            let named = tokio::select! {
                () = cancel.cancelled() => return,
                m = async { messages.as_mut()?.next().await } , if messages.is_some() => match m {
                    // "<name> <old-ip> <old-port> <new-ip> <new-port>"
                    Some(m) => {
                        let payload = String::from_utf8_lossy(m.get_payload_bytes()).into_owned();
                        let f: Vec<&str> = payload.split_whitespace().collect();
                        match f.as_slice() {
                            [name, _, _, ip, port] if name == master => Some(format!("{ip}:{port}")),
                            _ => None,
                        }
                    }
                    None => break,
                },
                _ = poll.tick() => {
                    let ask = RedisTarget::sentinel_master_addr(sentinels, master, s.connect_timeout);
                    let named = ask.await.ok().map(|(h, p)| format!("{h}:{p}"));
                    if messages.is_none() && named.is_some() {
                        // The sentinels answer again: try to subscribe once more.
                        break;
                    }
                    named
                }
            };
            let Some(named) = named else { continue };
            let current = s
                .master
                .lock()
                .expect("master mutex is never poisoned")
                .clone();
            if current.is_some_and(|c| c != named) {
                s.switch(&format_args!("sentinel names {named} as master"));
            }
        }
    }
}
