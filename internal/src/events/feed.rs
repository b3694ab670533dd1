//! The fan-out of the event feed to its `GET /admin/events` subscribers (SPEC section 11: "a slow
//! reader is dropped, never buffered without bound").
//!
//! Each subscriber has a queue of its own, filled by [`Feed::publish`] (which never awaits) and
//! drained by the subscriber's response body ([`Subscription::next`]). A queue is bounded by what
//! it holds and by how old its oldest message is, not by a count of messages: events come in
//! bursts (a hop storm answered from pipelined requests publishes hundreds of hops within a
//! millisecond), and a reader that keeps up on average must survive a burst, while one that stops
//! reading must still be dropped. A subscriber is dropped when its queue would pass
//! [`MAX_QUEUED_BYTES`], or when a message is published while its oldest unread message has waited
//! [`MAX_LAG`]; its queue is freed at once and its stream ends with a comment saying why.
//!
//! Spawns nothing. The feed's list is locked only to publish, subscribe and count; each queue's
//! lock is held for a push or a pop, never across an `.await`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Bytes of SSE text a subscriber may have queued and unread before it is dropped: about 30,000
/// hop events, several seconds of the largest hop storm a gateway makes.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 * 1024 * 1024;
/// How long a subscriber's oldest unread message may wait before the subscriber is dropped: a
/// reader this far behind shows a page that is no longer live.
pub(crate) const MAX_LAG: Duration = Duration::from_secs(10);

/// Why a subscriber was dropped, as the comment ending its stream says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// Its queue would have passed [`MAX_QUEUED_BYTES`].
    Full,
    /// Its oldest unread message had waited [`MAX_LAG`].
    Lagged,
}

impl Dropped {
    /// The SSE comment that ends a dropped subscriber's stream.
    pub(crate) fn comment(self) -> Bytes {
        match self {
            Dropped::Full => Bytes::from_static(b": dropped: too far behind (4 MiB unread)\n\n"),
            Dropped::Lagged => Bytes::from_static(b": dropped: too far behind (10 s unread)\n\n"),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Unread messages with the time each was queued.
    msgs: VecDeque<(Instant, Bytes)>,
    /// Bytes in `msgs`.
    bytes: usize,
    dropped: Option<Dropped>,
}

#[derive(Debug, Default)]
struct Queue {
    state: Mutex<State>,
    /// Woken once per publish; a single reader, so a wake-up with no one waiting is kept.
    ready: Notify,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("subscriber queue mutex is never poisoned: no panics while held")
    }

    /// Queues `msg` at `now`; returns why the subscriber is dropped instead, if it is.
    fn push(&self, msg: &Bytes, now: Instant) -> Option<Dropped> {
        let mut s = self.lock();
        let lagged = s
            .msgs
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= MAX_LAG);
        let why = if lagged {
            Some(Dropped::Lagged)
        } else if s.bytes + msg.len() > MAX_QUEUED_BYTES {
            Some(Dropped::Full)
        } else {
            s.msgs.push_back((now, msg.clone()));
            s.bytes += msg.len();
            None
        };
        if why.is_some() {
            // Freed now: a dropped reader costs nothing more, whenever it reads again.
            s.msgs = VecDeque::new();
            s.bytes = 0;
            s.dropped = why;
        }
        drop(s);
        self.ready.notify_one();
        why
    }
}

/// The subscribers of one event hub. Cheap to share.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    /// Live subscribers; a subscription whose reader went away fails to upgrade and is pruned.
    subs: Mutex<Vec<Weak<Queue>>>,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, Vec<Weak<Queue>>> {
        self.subs
            .lock()
            .expect("feed mutex is never poisoned: no panics while held")
    }

    /// A new subscriber, seeing every message published from now on.
    pub(crate) fn subscribe(&self) -> Subscription {
        let q = Arc::new(Queue::default());
        self.lock().push(Arc::downgrade(&q));
        Subscription { q }
    }

    /// Queues the message `make` builds (one whole SSE message, built only when someone
    /// subscribes) for every subscriber at `now`, dropping those past their bound (module docs).
    /// Never blocks on a reader.
    pub(crate) fn publish(&self, make: impl FnOnce() -> Bytes, now: Instant) {
        let mut subs = self.lock();
        if subs.is_empty() {
            return;
        }
        let msg = make();
        subs.retain(|w| {
            let Some(q) = w.upgrade() else {
                return false;
            };
            match q.push(&msg, now) {
                None => true,
                Some(why) => {
                    tracing::info!(
                        reason = ?why,
                        "event subscriber too far behind; dropped"
                    );
                    false
                }
            }
        });
    }

    /// Subscribers connected and not dropped.
    pub(crate) fn count(&self) -> usize {
        let mut subs = self.lock();
        subs.retain(|w| w.strong_count() > 0);
        subs.len()
    }
}

/// What a subscriber reads next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A message, in publish order.
    Message(Bytes),
    /// Nothing was published for the keep-alive interval.
    Idle,
    /// The subscriber was dropped; its stream ends here.
    Dropped(Dropped),
}

/// One subscriber's end of the feed; dropping it unsubscribes.
#[derive(Debug)]
pub(crate) struct Subscription {
    q: Arc<Queue>,
}

impl Subscription {
    /// The next message, waiting at most `idle` for one ([`Next::Idle`] then). After
    /// [`Next::Dropped`] every call returns it again.
    pub(crate) async fn next(&mut self, idle: Duration) -> Next {
        let until = Instant::now() + idle;
        loop {
            {
                let mut s = self.q.lock();
                if let Some(why) = s.dropped {
                    return Next::Dropped(why);
                }
                if let Some((_, msg)) = s.msgs.pop_front() {
                    s.bytes -= msg.len();
                    return Next::Message(msg);
                }
            }
            if tokio::time::timeout_at(until, self.q.ready.notified())
                .await
                .is_err()
            {
                return Next::Idle;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_keeps_up_on_average_survives_bursts() {
        let feed = Feed::default();
        let mut sub = feed.subscribe();
        let m = msg(100);
        // Bursts far above any count bound, each read before the next (a reader that keeps up).
        for _ in 0..20 {
            for _ in 0..5_000 {
                feed.publish(|| m.clone(), Instant::now());
            }
            for _ in 0..5_000 {
                assert_eq!(
                    sub.next(Duration::from_secs(1)).await,
                    Next::Message(m.clone())
                );
            }
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        assert_eq!(feed.count(), 1);
        assert_eq!(sub.next(Duration::from_secs(1)).await, Next::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_is_dropped_past_the_byte_or_the_lag_bound() {
        let feed = Feed::default();
        let mut full = feed.subscribe();
        let big = msg(1024 * 1024);
        for _ in 0..4 {
            feed.publish(|| big.clone(), Instant::now());
        }
        assert_eq!(feed.count(), 1, "exactly at the bound: kept");
        feed.publish(|| msg(1), Instant::now());
        assert_eq!(feed.count(), 0);
        assert_eq!(
            full.next(Duration::ZERO).await,
            Next::Dropped(Dropped::Full)
        );

        let mut slow = feed.subscribe();
        feed.publish(|| msg(10), Instant::now());
        tokio::time::advance(MAX_LAG - Duration::from_millis(1)).await;
        feed.publish(|| msg(10), Instant::now());
        assert_eq!(feed.count(), 1, "not yet lagging by MAX_LAG");
        tokio::time::advance(Duration::from_millis(1)).await;
        feed.publish(|| msg(10), Instant::now());
        assert_eq!(feed.count(), 0);
        assert_eq!(
            slow.next(Duration::ZERO).await,
            Next::Dropped(Dropped::Lagged)
        );
    }

    #[tokio::test]
    async fn a_reader_that_goes_away_is_unsubscribed() {
        let feed = Feed::default();
        let sub = feed.subscribe();
        assert_eq!(feed.count(), 1);
        drop(sub);
        assert_eq!(feed.count(), 0);
        feed.publish(|| msg(1), Instant::now());
        assert!(feed.lock().is_empty());
    }
}
