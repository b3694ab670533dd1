//! The relay's close, drain and shutdown state ([`Phase`]) as one value. Part of [`super::relay::Relay`]'s
//! state; spawns nothing.
//!
//! The two closing handshakes exclude each other: a client Close while the node's Close awaits
//! its reply ends the socket, and a node Close while the client's awaits its reply completes it.
//! A drain's timers exist only while the node drains; a closing handshake begun meanwhile keeps
//! them (the drain deadline still ends the socket, the drain's act time still moves it), and
//! losing the node side drops them.
//!
//! Gateway shutdown with `shutdown_spread` sets the time of the socket's reconnect hint
//! ([`Phase::ShuttingDown`]); a drain of the node meanwhile keeps its timers beside it, losing the
//! node side keeps the hint's time (the socket may hop on and still gets its hint), and a closing
//! handshake begun meanwhile drops it (the socket ends within [`CLOSE_GRACE`] anyway).

use std::time::Duration;

use tokio::time::Instant;

use super::frame::Frame;

/// After one side sent Close, how long the other side gets to answer before TCP is closed.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The node drains: the socket is closed at `deadline` and, unless the route's mode is `close`,
/// moved (hop or hint) at `act_at`, drawn once over the drain period so healthy nodes are not
/// hit all at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Drain {
    deadline: Instant,
    act_at: Option<Instant>,
}

/// The relay's close, drain and shutdown state.
#[derive(Debug)]
pub(super) enum Phase {
    /// Frames pass both ways: no Close seen, the node not draining.
    Open,
    /// The node drains ([`Drain`]); no Close seen.
    Draining(Drain),
    /// The client's Close went to the node; its reply is awaited until `until`. The frame is
    /// kept to complete the client's handshake itself if the node goes first.
    ClientClosed {
        close: Frame,
        until: Instant,
        drain: Option<Drain>,
    },
    /// The node's Close went to the client (so the gateway sends the client no Close of its
    /// own); the client's reply is awaited until `until`.
    NodeClosed {
        until: Instant,
        drain: Option<Drain>,
    },
    /// The gateway shuts down with `shutdown_spread` (SPEC section 5): the client gets the
    /// reconnect hint at `hint_at`; no Close seen. `drain` holds the node's drain, if it drains too.
    ShuttingDown {
        hint_at: Instant,
        drain: Option<Drain>,
    },
}

impl Phase {
    /// The drain's timers, if the node drains.
    fn drain(&self) -> Option<Drain> {
        match self {
            Phase::Open => None,
            Phase::Draining(d) => Some(*d),
            Phase::ClientClosed { drain, .. }
            | Phase::NodeClosed { drain, .. }
            | Phase::ShuttingDown { drain, .. } => *drain,
        }
    }

    /// True while a closing handshake awaits its reply.
    pub(super) fn is_closing(&self) -> bool {
        matches!(self, Phase::ClientClosed { .. } | Phase::NodeClosed { .. })
    }

    /// The client's Close, while its reply is awaited.
    pub(super) fn client_close(&self) -> Option<&Frame> {
        match self {
            Phase::ClientClosed { close, .. } => Some(close),
            _ => None,
        }
    }

    /// True once the node's Close went to the client: the client may get no other Close.
    pub(super) fn node_closed(&self) -> bool {
        matches!(self, Phase::NodeClosed { .. })
    }

    /// The client's `close` went to the node: its reply is awaited for [`CLOSE_GRACE`].
    pub(super) fn client_closes(&mut self, close: Frame) {
        let drain = self.drain();
        let until = Instant::now() + CLOSE_GRACE;
        *self = Phase::ClientClosed {
            close,
            until,
            drain,
        };
    }

    /// The node's Close goes to the client: its reply is awaited for [`CLOSE_GRACE`].
    pub(super) fn node_closes(&mut self) {
        let drain = self.drain();
        let until = Instant::now() + CLOSE_GRACE;
        *self = Phase::NodeClosed { until, drain };
    }

    /// The node drains until `deadline` (no closing handshake under way). With `spread` (a mode
    /// that moves the socket) the act time is drawn once, at random before the deadline.
    pub(super) fn drains(&mut self, deadline: Instant, spread: bool) {
        let act_at = self.drain().and_then(|d| d.act_at).or_else(|| {
            spread.then(|| {
                let now = Instant::now();
                let left = deadline.saturating_duration_since(now).as_millis() as u64;
                let wait = if left == 0 {
                    0
                } else {
                    rand::random_range(0..left)
                };
                now + Duration::from_millis(wait)
            })
        });
        let drain = Drain { deadline, act_at };
        match self {
            Phase::ShuttingDown { drain: d, .. } => *d = Some(drain),
            _ => *self = Phase::Draining(drain),
        }
    }

    /// The gateway shuts down with `shutdown_spread` (no closing handshake under way): the client
    /// gets the reconnect hint at `hint_at`; a drain under way keeps its timers.
    pub(super) fn shuts_down(&mut self, hint_at: Instant) {
        let drain = self.drain();
        *self = Phase::ShuttingDown { hint_at, drain };
    }

    /// The drain is over (the node usable again, or its side gone): its timers are dropped.
    pub(super) fn undrain(&mut self) {
        match self {
            Phase::Open | Phase::Draining(_) => *self = Phase::Open,
            Phase::ClientClosed { drain, .. }
            | Phase::NodeClosed { drain, .. }
            | Phase::ShuttingDown { drain, .. } => *drain = None,
        }
    }

    /// The timers armed: the close grace's end, the drain deadline, the drain's act time, the
    /// reconnect hint's time of a gateway shutting down with `shutdown_spread`.
    pub(super) fn timers(&self) -> [Option<Instant>; 4] {
        let grace = match self {
            Phase::ClientClosed { until, .. } | Phase::NodeClosed { until, .. } => Some(*until),
            Phase::Open | Phase::Draining(_) | Phase::ShuttingDown { .. } => None,
        };
        let hint_at = match self {
            Phase::ShuttingDown { hint_at, .. } => Some(*hint_at),
            _ => None,
        };
        let drain = self.drain();
        [
            grace,
            drain.map(|d| d.deadline),
            drain.and_then(|d| d.act_at),
            hint_at,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::respond::CloseCode;
    use crate::proxy::websocket::frame;

    /// The gateway's shutdown with `shutdown_spread` keeps a node drain's timers beside the
    /// hint's time, and a drain begun after it keeps the hint; the drain's end keeps the hint.
    #[tokio::test(start_paused = true)]
    async fn shutting_down_and_a_drain_keep_each_others_timers() {
        let now = Instant::now();
        let (deadline, at) = (now + Duration::from_secs(10), now + Duration::from_secs(2));
        let mut p = Phase::Open;
        p.drains(deadline, false);
        p.shuts_down(at);
        assert_eq!(p.timers(), [None, Some(deadline), None, Some(at)]);
        assert!(!p.is_closing());
        p.undrain();
        assert_eq!(p.timers(), [None, None, None, Some(at)]);
        p.drains(deadline, false);
        assert_eq!(p.timers(), [None, Some(deadline), None, Some(at)]);
    }

    /// A closing handshake begun while shutting down replaces the hint: the socket ends within the
    /// close grace anyway.
    #[tokio::test(start_paused = true)]
    async fn a_closing_handshake_drops_the_hint() {
        let at = Instant::now() + Duration::from_secs(2);
        let mut p = Phase::Open;
        p.shuts_down(at);
        p.client_closes(frame::close(CloseCode::GOING_AWAY, "bye"));
        let [grace, deadline, act, hint_at] = p.timers();
        assert_eq!(grace, Some(Instant::now() + CLOSE_GRACE));
        assert_eq!((deadline, act, hint_at), (None, None, None));
    }
}
