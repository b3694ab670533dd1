//! Shared drains through Redis (SPEC section 7): the `<prefix>drain:<node-id>` keys and the
//! `<prefix>events` channel, so a drain or undrain made on one replica applies on every replica.
//!
//! Schema (documented in the README for gateways in other languages):
//! - key `<prefix>drain:<node-id>` = JSON `{"deadline_ms":<unix ms>,"period_ms":<ms>}`, expiring
//!   (`PX`) at the deadline plus `affinity.ttl`; deleted by an undrain;
//! - channel `<prefix>events`, JSON `{"event":"drain","node":..,"deadline_ms":..,"period_ms":..}`
//!   or `{"event":"undrain","node":..}`, published after the key was written or deleted.
//!
//! [`RedisStore::watch_events`] spawns the subscriber task (cancelled and joined with the store's
//! other tasks): it forwards each message as a [`FleetEvent`] and sends [`FleetEvent::Resync`]
//! after every (re)subscription, because messages may have been missed meanwhile; the receiver
//! then re-reads the keys. Every Redis call is bounded by the store timeout; none holds a lock.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::shared::Shared;
use super::RedisStore;

/// Events queued for the drain applier; past this the subscriber waits (drains are rare).
const EVENT_QUEUE: usize = 256;
/// Wait between subscription attempts.
const RESUBSCRIBE: Duration = Duration::from_millis(250);

/// One shared drain: the value of `<prefix>drain:<node-id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainRecord {
    /// When what is left on the node is closed, in Unix milliseconds.
    pub deadline_ms: u64,
    /// The drain period asked for, in milliseconds (hops and hints spread over it).
    pub period_ms: u64,
}

/// A message of `<prefix>events` (unknown fields ignored).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum EventMessage {
    /// A node started draining on some replica.
    Drain {
        /// Node id.
        node: String,
        /// Deadline, Unix ms.
        deadline_ms: u64,
        /// Period, ms.
        period_ms: u64,
    },
    /// A node was undrained on some replica.
    Undrain {
        /// Node id.
        node: String,
    },
}

/// What the subscriber hands the drain applier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetEvent {
    /// A message from another replica (or this one's own echo).
    Message(EventMessage),
    /// Subscribed (again): messages may have been missed, re-read the drain keys.
    Resync,
}

impl RedisStore {
    fn drain_key(&self, node: &str) -> String {
        format!("{}drain:{node}", self.shared.prefix)
    }

    fn events_channel(&self) -> String {
        format!("{}events", self.shared.prefix)
    }

    /// Stores `<prefix>drain:<node>` = `rec` (expiring `affinity.ttl` after the deadline, `now_ms`
    /// being the current Unix time) and publishes the drain on `<prefix>events`. False (counted,
    /// logged, Redis marked down) when Redis did not take it: the drain then stays local.
    pub async fn put_drain(&self, node: &str, rec: DrainRecord, now_ms: u64) -> bool {
        let s = &*self.shared;
        let Some(mut c) = s.conn() else {
            return false;
        };
        let ttl_ms = rec.deadline_ms.saturating_sub(now_ms) + s.ttl_ms();
        let value = serde_json::to_string(&rec).expect("two integers always serialize");
        let mut set = ::redis::cmd("SET");
        set.arg(self.drain_key(node))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms);
        if s.guard("drain", set.query_async::<()>(&mut c))
            .await
            .is_none()
        {
            return false;
        }
        self.publish_event(
            &mut c,
            &EventMessage::Drain {
                node: node.to_string(),
                deadline_ms: rec.deadline_ms,
                period_ms: rec.period_ms,
            },
        )
        .await
    }

    /// Deletes `<prefix>drain:<node>` and publishes the undrain. False when Redis did not take it.
    pub async fn delete_drain(&self, node: &str) -> bool {
        let s = &*self.shared;
        let Some(mut c) = s.conn() else {
            return false;
        };
        let mut del = ::redis::cmd("DEL");
        del.arg(self.drain_key(node));
        if s.guard("drain", del.query_async::<i64>(&mut c))
            .await
            .is_none()
        {
            return false;
        }
        self.publish_event(
            &mut c,
            &EventMessage::Undrain {
                node: node.to_string(),
            },
        )
        .await
    }

    async fn publish_event(&self, c: &mut super::conn::Conn, msg: &EventMessage) -> bool {
        let payload = serde_json::to_string(msg).expect("strings and integers always serialize");
        let mut publish = ::redis::cmd("PUBLISH");
        publish.arg(self.events_channel()).arg(payload);
        self.shared
            .guard("drain", publish.query_async::<i64>(c))
            .await
            .is_some()
    }

    /// Reads the drain keys of `nodes` (one bounded `GET` each, concurrently, so it works across
    /// cluster slots). `None` when Redis did not answer; a malformed value reads as no drain.
    pub async fn read_drains(&self, nodes: &[Arc<str>]) -> Option<Vec<Option<DrainRecord>>> {
        let s = &*self.shared;
        let c = s.conn()?;
        let reads = nodes.iter().map(|n| {
            let mut c = c.clone();
            let key = self.drain_key(n);
            async move {
                let mut get = ::redis::cmd("GET");
                get.arg(key);
                s.guard("drain", get.query_async::<Option<String>>(&mut c))
                    .await
                    .map(|v| v.and_then(|v| serde_json::from_str::<DrainRecord>(&v).ok()))
            }
        });
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .collect()
    }

    /// Starts the `<prefix>events` subscriber (see the module docs) and returns its queue. The
    /// task ends with the store ([`RedisStore::shutdown`]).
    pub fn watch_events(&self) -> mpsc::Receiver<FleetEvent> {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let task = tokio::spawn(subscribe_events(
            self.shared.clone(),
            self.events_channel(),
            tx,
            self.cancel.clone(),
        ));
        self.tasks
            .lock()
            .expect("tasks mutex is never poisoned")
            .push(task);
        rx
    }
}

/// Subscribes to `channel` and forwards its messages until cancelled or the receiver is gone.
async fn subscribe_events(
    s: Arc<Shared>,
    channel: String,
    tx: mpsc::Sender<FleetEvent>,
    cancel: CancellationToken,
) {
    loop {
        let pubsub = tokio::select! {
            () = cancel.cancelled() => return,
            p = open(&s, &channel) => p,
        };
        let Some(pubsub) = pubsub else {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(RESUBSCRIBE) => continue,
            }
        };
        if tx.send(FleetEvent::Resync).await.is_err() {
            return;
        }
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(Duration::from_secs(2));
        ping.tick().await;
        loop {
            let msg = tokio::select! {
                () = cancel.cancelled() => return,
                m = messages.next() => match m {
                    Some(m) => m,
                    None => break,
                },
                _ = ping.tick() => {
                    // A server that stopped answering without closing the socket is left for a new one.
                    let pong = tokio::time::timeout(s.timeout.max(Duration::from_secs(1)), sink.ping::<::redis::Value>()).await;
                    if matches!(pong, Ok(Ok(_))) { continue; }
                    break;
                }
            };
            match serde_json::from_slice::<EventMessage>(msg.get_payload_bytes()) {
                Ok(m) => {
                    if tx.send(FleetEvent::Message(m)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "ignoring a malformed fleet event"),
            }
        }
        tracing::info!(channel = %channel, "fleet event subscription lost; resubscribing");
    }
}

/// One subscribed connection on any of the target's pub/sub candidates, or `None`.
async fn open(s: &Shared, channel: &str) -> Option<::redis::aio::PubSub> {
    let clients = tokio::time::timeout(
        s.connect_timeout,
        s.target.pubsub_clients(s.connect_timeout),
    )
    .await
    .ok()?
    .ok()?;
    for client in clients {
        let attempt = async {
            let mut p = client.get_async_pubsub().await?;
            p.subscribe(channel).await?;
            Ok::<_, ::redis::RedisError>(p)
        };
        if let Ok(Ok(p)) = tokio::time::timeout(s.connect_timeout, attempt).await {
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared drains (SPEC section 5, "Drain"): the documented wire forms.
    #[test]
    fn event_and_record_wire_forms() {
        let rec = DrainRecord {
            deadline_ms: 1_700_000_000_000,
            period_ms: 30_000,
        };
        assert_eq!(
            serde_json::to_string(&rec).expect("serializes"),
            r#"{"deadline_ms":1700000000000,"period_ms":30000}"#
        );
        let m = EventMessage::Drain {
            node: "n1".into(),
            deadline_ms: 5,
            period_ms: 2,
        };
        assert_eq!(
            serde_json::to_string(&m).expect("serializes"),
            r#"{"event":"drain","node":"n1","deadline_ms":5,"period_ms":2}"#
        );
        let u: EventMessage =
            serde_json::from_str(r#"{"event":"undrain","node":"n2","extra":1}"#).expect("parses");
        assert_eq!(u, EventMessage::Undrain { node: "n2".into() });
    }
}
