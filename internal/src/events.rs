//! The event feed of the operator surface (SPEC section 11): `hop`, `node`, `reload` and `drain`
//! events, published with one call ([`Events::publish`]) from wherever they happen, fanned out to
//! the `GET /admin/events` subscribers and kept in small bounded rings for the status page.
//!
//! - **Fan-out** ([`feed`]): a queue per subscriber, bounded by the bytes it holds and by how long
//!   its oldest message has waited, so a reader that keeps up on average survives a burst and one
//!   that stops reading is dropped, never buffered without bound.
//! - **History** for the status page: the last [`RECENT_HOPS`] hops, the last [`RECENT_RELOADS`]
//!   reloads, and hops per second over the last [`HOP_HISTORY_SECS`] seconds (one bucket a second).
//!
//! A leaf module like [`crate::metrics`] (it rides on [`crate::metrics::Metrics`] so every
//! component that counts can also report); spawns nothing; publishing never awaits.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Value};

pub(crate) mod feed;

use feed::{Feed, Subscription};

/// Hops kept for the status page's "recent hops" list.
pub(crate) const RECENT_HOPS: usize = 50;
/// Reloads kept for the status page's "recent reloads" list.
pub(crate) const RECENT_RELOADS: usize = 20;
/// Length of the hops-per-second history (SPEC section 11: the last 15 minutes).
pub(crate) const HOP_HISTORY_SECS: usize = 15 * 60;

/// Why a connection hopped: the `reason` label of `hopping_count_total` (SPEC section 8) and of
/// the `hop` event (SPEC section 11). One value per cause; [`HopReason::label`] is the wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HopReason {
    /// The bound node refused or timed out the connect (nothing was sent), or the request's
    /// earlier attempt already excluded it.
    ConnectError,
    /// The node reset a request it had been sent (or refused its stream) and it was retried.
    Reset,
    /// The bound node is ejected, or not selectable (health, slow start at 0).
    Ejected,
    /// The bound node is draining.
    Draining,
    /// The bound node does not carry the version the request asks for.
    Version,
    /// The bound node is no longer in the cluster (reload or discovery removed it).
    Removed,
    /// The binding moved although its node was usable (another node was chosen for it).
    Rebalance,
    /// A WebSocket's node said it is going away (close 1001 or 1012).
    GoingAway,
    /// A WebSocket's node connection ended without a close.
    NodeLost,
}

impl HopReason {
    /// The label as exported and logged: `connect_error`, `reset`, `ejected`, `draining`,
    /// `version`, `removed`, `rebalance`, `going_away`, `node_lost`.
    pub const fn label(self) -> &'static str {
        match self {
            HopReason::ConnectError => "connect_error",
            HopReason::Reset => "reset",
            HopReason::Ejected => "ejected",
            HopReason::Draining => "draining",
            HopReason::Version => "version",
            HopReason::Removed => "removed",
            HopReason::Rebalance => "rebalance",
            HopReason::GoingAway => "going_away",
            HopReason::NodeLost => "node_lost",
        }
    }
}

impl std::fmt::Display for HopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// One operator event (SPEC section 11 `GET /admin/events`).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A conn id was rebound from one node to another.
    Hop {
        /// Conn id.
        conn: String,
        /// Old node id.
        from: Arc<str>,
        /// New node id.
        to: Arc<str>,
        /// Hop reason (as `hopping_count_total{reason}`).
        reason: HopReason,
        /// Unix time of the hop, milliseconds.
        at_ms: u64,
    },
    /// A node's state or effective weight changed.
    Node {
        /// Node id.
        id: Arc<str>,
        /// Cluster name.
        cluster: Arc<str>,
        /// `healthy`, `degraded`, `ejected`, `draining` or `warming`.
        state: &'static str,
        /// Effective weight (as `GET /admin/nodes`: configured x health % x warm-up %).
        weight: f64,
    },
    /// A reload (or rollback) ended.
    Reload {
        /// The live generation afterwards.
        generation: u64,
        /// `ok`, `unchanged`, `invalid`, `probe_failed`, `no_file`, `rollback`, `rolled_back`.
        result: &'static str,
    },
    /// A node started draining.
    Drain {
        /// Node id.
        id: Arc<str>,
        /// Unix time of the drain deadline, milliseconds.
        deadline_ms: u64,
    },
}

impl Event {
    /// The SSE `event:` name: `hop`, `node`, `reload` or `drain`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Hop { .. } => "hop",
            Event::Node { .. } => "node",
            Event::Reload { .. } => "reload",
            Event::Drain { .. } => "drain",
        }
    }

    /// The SSE `data:` object, with exactly the SPEC's fields.
    pub fn data(&self) -> Value {
        match self {
            Event::Hop {
                conn,
                from,
                to,
                reason,
                at_ms,
            } => {
                json!({"conn": conn, "from": &**from, "to": &**to, "reason": reason.label(), "at_ms": at_ms})
            }
            Event::Node {
                id,
                cluster,
                state,
                weight,
            } => json!({"id": &**id, "cluster": &**cluster, "state": state, "weight": weight}),
            Event::Reload { generation, result } => {
                json!({"generation": generation, "result": result})
            }
            Event::Drain { id, deadline_ms } => json!({"id": &**id, "deadline_ms": deadline_ms}),
        }
    }

    /// The event as one SSE message (`event:` and `data:` lines and the blank line).
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.kind(), self.data())
    }
}

/// Unix time now in milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix time in milliseconds of `at`, a tokio instant (future or past).
pub(crate) fn unix_ms_at(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let ms = unix_ms();
    if at >= now {
        ms + (at - now).as_millis() as u64
    } else {
        ms.saturating_sub((now - at).as_millis() as u64)
    }
}

#[derive(Debug)]
struct History {
    /// The hop events themselves: their JSON is built only when the status page asks
    /// ([`Events::recent_hops`]), not once per hop (a hop storm's cost).
    hops: VecDeque<Arc<Event>>,
    reloads: VecDeque<Value>,
    /// `(unix second, hops in it)`, indexed by second modulo [`HOP_HISTORY_SECS`].
    per_second: Vec<(u64, u32)>,
}

/// The event hub: the subscribers' feed plus the status page's bounded history. Cheap to share.
#[derive(Debug)]
pub struct Events {
    feed: Feed,
    history: Mutex<History>,
}

impl Default for Events {
    fn default() -> Self {
        Self::new()
    }
}

impl Events {
    /// A hub with no subscribers and empty history.
    pub fn new() -> Self {
        Events {
            feed: Feed::default(),
            history: Mutex::new(History {
                hops: VecDeque::with_capacity(RECENT_HOPS),
                reloads: VecDeque::with_capacity(RECENT_RELOADS),
                per_second: vec![(0, 0); HOP_HISTORY_SECS],
            }),
        }
    }

    /// Publishes `event` to every subscriber and records hops and reloads in the history.
    /// Never blocks on a subscriber: one too far behind is dropped ([`feed`]).
    pub fn publish(&self, event: Event) {
        let event = Arc::new(event);
        {
            let mut h = self.lock();
            match &*event {
                Event::Hop { at_ms, .. } => {
                    push_bounded(&mut h.hops, event.clone(), RECENT_HOPS);
                    let sec = at_ms / 1000;
                    let slot = &mut h.per_second[(sec as usize) % HOP_HISTORY_SECS];
                    if slot.0 != sec {
                        *slot = (sec, 0);
                    }
                    slot.1 = slot.1.saturating_add(1);
                }
                Event::Reload { .. } => {
                    let mut v = event.data();
                    v["at_ms"] = json!(unix_ms());
                    push_bounded(&mut h.reloads, v, RECENT_RELOADS);
                }
                Event::Node { .. } | Event::Drain { .. } => {}
            }
        }
        // Rendered once for every subscriber, and not at all without one.
        self.feed
            .publish(|| Bytes::from(event.to_sse()), tokio::time::Instant::now());
    }

    /// A new subscriber, reading every event published from now on as one SSE message each.
    pub(crate) fn subscribe(&self) -> Subscription {
        self.feed.subscribe()
    }

    /// Subscribers currently connected and not dropped.
    pub fn subscribers(&self) -> usize {
        self.feed.count()
    }

    /// Recent hops, newest first (the SPEC's `hop` objects).
    pub fn recent_hops(&self) -> Vec<Value> {
        // Copied out first: the JSON is built without the history lock held.
        let hops: Vec<Arc<Event>> = self.lock().hops.iter().rev().cloned().collect();
        hops.iter().map(|e| e.data()).collect()
    }

    /// Recent reloads, newest first (`generation`, `result`, `at_ms`).
    pub fn recent_reloads(&self) -> Vec<Value> {
        self.lock().reloads.iter().rev().cloned().collect()
    }

    /// Hops in each of the last [`HOP_HISTORY_SECS`] seconds, oldest first, ending with the
    /// second of `now_ms` (still counting).
    pub fn hops_per_second(&self, now_ms: u64) -> Vec<u32> {
        let h = self.lock();
        let now = now_ms / 1000;
        (0..HOP_HISTORY_SECS as u64)
            .rev()
            .map(|back| {
                let sec = now.saturating_sub(back);
                let slot = h.per_second[(sec as usize) % HOP_HISTORY_SECS];
                if slot.0 == sec && sec > 0 {
                    slot.1
                } else {
                    0
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, History> {
        self.history
            .lock()
            .expect("events history mutex is never poisoned: no panics while held")
    }
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T, cap: usize) {
    if q.len() == cap {
        q.pop_front();
    }
    q.push_back(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(at_ms: u64) -> Event {
        Event::Hop {
            conn: "c".into(),
            from: Arc::from("a"),
            to: Arc::from("b"),
            reason: HopReason::Ejected,
            at_ms,
        }
    }

    #[test]
    fn sse_shape_has_the_spec_fields() {
        let e = hop(5);
        assert_eq!(
            e.to_sse(),
            "event: hop\ndata: {\"at_ms\":5,\"conn\":\"c\",\"from\":\"a\",\"reason\":\"ejected\",\"to\":\"b\"}\n\n"
        );
        let d = Event::Drain {
            id: Arc::from("n"),
            deadline_ms: 9,
        };
        assert_eq!(d.data(), json!({"id": "n", "deadline_ms": 9}));
    }

    #[test]
    fn history_is_bounded_and_buckets_by_second() {
        let ev = Events::new();
        let base = 1_700_000_000_000u64;
        for i in 0..200 {
            ev.publish(hop(base + i * 10)); // 200 hops over 2 seconds
        }
        assert_eq!(ev.recent_hops().len(), RECENT_HOPS);
        let per = ev.hops_per_second(base + 2_000);
        assert_eq!(per.len(), HOP_HISTORY_SECS);
        assert_eq!(&per[HOP_HISTORY_SECS - 3..], &[100, 100, 0]);
        assert_eq!(ev.hops_per_second(base + 1_500)[HOP_HISTORY_SECS - 1], 100);
        // A bucket 15 minutes old is not counted again when its slot comes round.
        let later = base + (HOP_HISTORY_SECS as u64) * 1000;
        assert_eq!(ev.hops_per_second(later + 2_000).iter().sum::<u32>(), 0);
        for i in 0..30 {
            ev.publish(Event::Reload {
                generation: i,
                result: "ok",
            });
        }
        assert_eq!(ev.recent_reloads().len(), RECENT_RELOADS);
        assert_eq!(ev.recent_reloads()[0]["generation"], 29);
    }
}
