//! The Redis store's background tasks, each cancelled by the store's token and joined by
//! `RedisStore::shutdown`:
//! - [`subscribe`]: listens on `<prefix>hops` and invalidates cached bindings; a lost subscription
//!   marks Redis down and asks for a resync (cache dropped) once it is back.
//! - [`super::maintain::maintain`]: (re)connects, probes a down Redis, writes back local changes, then marks it up.
//! - [`refresh`]: slides the Redis TTL of bindings served from the cache (one bounded queue).
//! - [`follow_sentinel`] (Sentinel only): listens for `+switch-master` on a sentinel and polls the
//!   master's address, and switches to the new master as soon as it changes.
//!
//! None of them holds a lock across an await, and every Redis call is bounded by the store timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::shared::{same_or_new, Pending, Shared, BIND_SCRIPT};
use super::target::RedisTarget;
use crate::hopper::ConnId;

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

/// Slides the Redis TTL of bindings served from the cache (queued by `get`). The bind script also
/// recreates a key that expired in Redis meanwhile and reports a node another replica set.
pub(super) async fn refresh(
    s: Arc<Shared>,
    mut queue: mpsc::Receiver<(ConnId, Arc<str>)>,
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
