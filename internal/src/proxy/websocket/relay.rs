//! The per-socket relay task: frames both ways, one resting wait ([`super::wait`]) over the two
//! sides, the node's signal (ejected, draining), gateway shutdown and the timers (idle, drain
//! jitter, drain deadline, close grace).
//!
//! While the socket is busy the two sides are served by the pump ([`super::pump`]): read batches
//! pass through byte for byte, one write each, and the resting wait (its watch waiters and its
//! one `Sleep`) stays armed across them; the idle deadline is checked lazily, against the time the
//! last frame passed, when that sleep fires. Closing handshakes, a client's fragmented message and
//! the first frames after a hop go frame by frame ([`super::pass`]).
//!
//! Close rules (SPEC section 5, CASE-05): a Close from either side is relayed and the other side's
//! reply is awaited (bounded); a node that vanishes without Close costs the client nothing in `hop`
//! mode ([`super::hop`]), gets a 1012 reconnect hint in `hint` mode, and a 1011 in `close` mode
//! (never 1005/1006 on the wire). A node's own 1001/1012 means it is going away: `hop` and `hint`
//! treat it like a vanished node, `close` relays it. Shutdown and the drain deadline send 1001
//! (shutdown with `shutdown_spread`: the reconnect hint at a random point of the spread), the
//! idle timeout sends 1001 first. WebSockets are never cut by the route timeout.

use crate::proxy::error::ProxyError;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tracing::Instrument;

use super::dial::{Handshake, Negotiated};
use super::frame::Peer;
use super::io::FrameIo;
use super::message::Carry;
use super::phase::Phase;
use super::pump::{self, Pumped, Traffic};
use super::socket_log::socket_span;
use super::wait::{Resting, Woken};
use super::Stream;
use crate::config::WsMode;
use crate::drain;
use crate::hopper::HopReason;
use crate::proxy::context::RequestCtx;
use crate::proxy::respond::CloseCode;
use crate::proxy::types::Proxy;
use crate::registry::NodeSignal;

/// After the gateway itself sent Close, how long it waits for the client's reply.
pub(super) const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(1);

/// Everything the task needs from the handshake.
#[derive(Debug)]
pub(super) struct Session {
    /// The proxy (metrics, hopper, upstream client, shutdown watch).
    pub(super) p: Arc<Proxy>,
    /// The upgrade request's context: route, conn id, version decision and the access-log
    /// fields (the line is written when the socket ends).
    pub(super) ctx: RequestCtx,
    /// The handshake to replay on a hop.
    pub(super) hs: Handshake,
    /// What the first node agreed to.
    pub(super) negotiated: Negotiated,
}

/// Whether the task goes on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    End,
}

pub(super) use super::pump::Read;
pub(super) use super::side::NodeSide;

enum Event {
    /// A frame or end from either side, or a batch the pump could not finish ([`Pumped`]).
    Sides(Pumped),
    Signal,
    Shutdown,
    Idle,
    DrainAct,
    DrainDeadline,
    Grace,
    ShutdownHint,
}

/// Which timer fired: the five share one `Sleep` ([`Relay::next_timer`]).
#[derive(Clone, Copy)]
enum Timer {
    Grace,
    DrainDeadline,
    DrainAct,
    ShutdownHint,
    Idle,
}

impl From<Timer> for Event {
    fn from(t: Timer) -> Event {
        match t {
            Timer::Grace => Event::Grace,
            Timer::DrainDeadline => Event::DrainDeadline,
            Timer::DrainAct => Event::DrainAct,
            Timer::ShutdownHint => Event::ShutdownHint,
            Timer::Idle => Event::Idle,
        }
    }
}

/// The running relay.
pub(super) struct Relay {
    pub(super) s: Session,
    /// The client side.
    pub(super) down: FrameIo<Stream>,
    /// The node side; `None` between losing one node and attaching the next.
    pub(super) up: Option<NodeSide>,
    pub(super) shutdown: drain::Watch,
    /// Bytes each way and when the last frame passed.
    pub(super) traffic: Traffic,
    pub(super) carry: Carry,
    /// The close and drain state.
    pub(super) phase: Phase,
    /// The socket's span (conn id, cluster), entered while an event is handled; not while the
    /// pump waits and relays (entering and leaving it on every poll cost ~200 instructions per
    /// message). Made at the first event handled ([`Relay::span`]): a socket that stays idle
    /// keeps none (a span costs ~0.35 KiB of subscriber state).
    span: Option<tracing::Span>,
}

impl Session {
    /// Takes both upgraded sides and returns the relay task's future, which relays until the socket
    /// ends, then writes the access-log line (status 101, byte counts).
    ///
    /// The relay state lives in one heap block built here (the span too, entered only while an
    /// event is handled), and the future holds only that block and the current step: an idle
    /// socket keeps its task cell small (about 0.9 KiB instead of 5.4 KiB of memory per idle
    /// WebSocket). `self` is boxed by the caller so the spawned task does not carry the session
    /// by value before the upgrades complete.
    pub(super) fn relay(
        self: Box<Self>,
        down: Stream,
        side: Box<NodeSide>,
    ) -> impl std::future::Future<Output = ()> + Send {
        let mut side = *side;
        let mode = self.ctx.route.config.websocket;
        let extension_warning = mode == WsMode::Hop && self.negotiated.pins_node();
        let max_message = self.p.settings.limits.websocket_max_message;
        side.io.set_max_message(max_message);
        // The node's state as the relay starts: a usable node needs no event (and so no span);
        // any other state is handled as the first event, as a change would be.
        if !side.signal.borrow_and_update().usable {
            side.signal.mark_changed();
        }
        let mut down = FrameIo::new(down, Peer::Client);
        down.set_max_message(max_message);
        let shutdown = self.p.shutdown.clone();
        let mut r = Box::new(Relay {
            s: *self,
            down,
            up: Some(side),
            shutdown,
            traffic: Traffic {
                bytes_in: 0,
                bytes_out: 0,
                last: Instant::now(),
            },
            carry: Carry::default(),
            phase: Phase::Open,
            span: None,
        });
        if extension_warning {
            let span = r.span();
            if let Some(side) = &r.up {
                span.in_scope(|| tracing::info!(node = %side.node.id, "websocket extension other than permessage-deflate negotiated: this socket cannot hop and gets a reconnect hint instead"));
            }
        }
        async move {
            while r.step().await == Flow::Continue {}
            let span = r.span();
            // Boxed: the close path runs once per socket and is larger than a resting step.
            Box::pin(r.end_socket().instrument(span)).await;
        }
    }
}

impl Relay {
    /// After the last event: the hop latency still owed, Close to the node, FIN to the client,
    /// the access-log line.
    async fn end_socket(mut self: Box<Self>) {
        // The socket ended before the new node's first frame: the hop still owes its one latency
        // observation and its log line.
        self.settle_hop(false);
        Box::pin(self.close_node(CloseCode::GOING_AWAY, "going away")).await;
        self.down.shutdown().await;
        let t = self.traffic;
        self.s
            .p
            .finish(&self.s.ctx, 101, t.bytes_in, t.bytes_out, None);
    }
}

async fn read_opt(io: Option<&mut FrameIo<Stream>>) -> Read {
    match io {
        Some(io) => io.read().await,
        None => std::future::pending().await,
    }
}

async fn changed_opt(rx: Option<&mut watch::Receiver<NodeSignal>>) {
    // The sender lives in the node's runtime, which the side holds: Err cannot happen while it is alive.
    if let Some(rx) = rx {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

impl Relay {
    /// Waits for one event and handles it; the handling is boxed so the task's resting state,
    /// kept for every idle socket, is the wait alone (memory per idle WebSocket).
    pub(super) async fn step(&mut self) -> Flow {
        // The wait runs outside the span (see `Relay::span`); the event is handled inside.
        let event = self.next_event().await;
        if matches!(event, Event::Idle) && !self.idle_due() {
            // The idle timer ran out but frames passed since it was set: it is set again from
            // the last frame's time by the next wait.
            return Flow::Continue;
        }
        let span = self.span();
        // Boxed: the handlers' states (closing, hop, frame by frame) are far larger than the wait
        // above, and the task cell would be sized for them for the socket's whole life (memory
        // per idle WebSocket); a busy socket's frames pass in the wait, not here.
        Box::pin(self.handle(event).instrument(span)).await
    }

    /// The socket's span ([`socket_span`]), made the first time it is asked for and kept from then on.
    fn span(&mut self) -> tracing::Span {
        let ctx = &self.s.ctx;
        self.span.get_or_insert_with(|| socket_span(ctx)).clone()
    }

    async fn handle(&mut self, event: Event) -> Flow {
        match event {
            Event::Sides(Pumped::Client(r)) => self.on_client(r).await,
            Event::Sides(Pumped::Node(r)) => self.on_node(r).await,
            Event::Sides(Pumped::NodeBusy) => self.finish_to_node().await,
            Event::Sides(Pumped::ClientBusy) => self.finish_to_client().await,
            Event::Sides(Pumped::NodeWriteFailed(e)) => {
                Box::pin(self.node_write_failed(&e.to_string())).await
            }
            Event::Sides(Pumped::ClientWriteFailed(e)) => {
                tracing::debug!(error = %e, "client left without a close handshake");
                Flow::End
            }
            Event::Signal => self.on_signal().await,
            Event::Shutdown => Box::pin(self.on_shutdown()).await,
            Event::Idle => Box::pin(self.end(ProxyError::Idle)).await,
            Event::DrainAct => Box::pin(self.node_gone(HopReason::Draining, true)).await,
            Event::DrainDeadline => Box::pin(self.end(ProxyError::DrainDeadline)).await,
            Event::Grace => Flow::End,
            Event::ShutdownHint => Box::pin(self.shutdown_hint()).await,
        }
    }

    /// True while frames pass both ways unattended: a node attached whose frames need no
    /// translation, no closing handshake, and no hop waiting for the new node's first frame (which
    /// [`super::pass`] observes).
    fn busy_path(&self) -> bool {
        self.up.as_ref().is_some_and(|s| s.translate.is_none())
            && !self.phase.is_closing()
            && self.carry.owed.is_none()
    }

    /// Waits for the next event: a frame or end from either side (the pump relays the busy path
    /// inside this wait), the node's signal, shutdown, or the earliest timer ([`Resting`]).
    async fn next_event(&mut self) -> Event {
        let timer = self.next_timer();
        let busy = self.busy_path();
        let (up_io, signal, peek) = match self.up.as_mut() {
            Some(side) => {
                // Changes from here on wake the `changed()` armed below; one not yet seen makes
                // its first poll ready.
                side.peek.mark_unchanged();
                (Some(&mut side.io), Some(&mut side.signal), Some(&side.peek))
            }
            None => (None, None, None),
        };
        let down = &mut self.down;
        let traffic = &mut self.traffic;
        let sides = async move {
            match up_io {
                Some(up) if busy => {
                    std::future::poll_fn(|cx| pump::poll(cx, down, up, traffic)).await
                }
                up_io => tokio::select! {
                    r = down.read() => Pumped::Client(r),
                    r = read_opt(up_io) => Pumped::Node(r),
                },
            }
        };
        let woken = Resting::new(
            sides,
            changed_opt(signal),
            peek,
            self.shutdown.signaled(),
            &self.s.p.shutdown,
            timer.map(|(at, _)| sleep_until(at)),
        );
        match woken.await {
            Woken::Sides(e) => Event::Sides(e),
            Woken::Signal => Event::Signal,
            Woken::Shutdown => Event::Shutdown,
            Woken::Timer => timer.map_or(Event::Grace, |(_, t)| t.into()),
        }
    }

    /// The earliest of the five timers (close grace, drain deadline, drain jitter, shutdown
    /// spread, idle) and the event it fires. One `Sleep` in the resting wait instead of five keeps
    /// an idle socket's task cell small; on a tie the first in that order wins.
    fn next_timer(&self) -> Option<(Instant, Timer)> {
        let [grace, deadline, act_at, hint_at] = self.phase.timers();
        [
            (grace, Timer::Grace),
            (deadline, Timer::DrainDeadline),
            (act_at, Timer::DrainAct),
            (hint_at, Timer::ShutdownHint),
            (self.idle().map(|d| self.traffic.last + d), Timer::Idle),
        ]
        .into_iter()
        .filter_map(|(at, e)| at.map(|at| (at, e)))
        .reduce(|best, t| if t.0 < best.0 { t } else { best })
    }

    /// Restarts the idle clock (any frame either way counts, pings included: CASE-06). Moves no
    /// timer: the idle timer, when it fires, checks [`Relay::idle_due`].
    pub(super) fn touch(&mut self) {
        self.traffic.last = Instant::now();
    }

    /// True once no frame passed for the idle timeout.
    fn idle_due(&self) -> bool {
        self.idle()
            .is_some_and(|d| self.traffic.last.elapsed() >= d)
    }

    /// The route's `websocket` mode (read from the route, not kept per socket).
    pub(super) fn mode(&self) -> WsMode {
        self.s.ctx.route.config.websocket
    }

    /// `limits.websocket_idle_timeout` (read from the settings, not kept per socket).
    fn idle(&self) -> Option<Duration> {
        self.s.p.settings.limits.websocket_idle_timeout
    }

    /// `limits.websocket_max_message`, bytes (each side checks it: [`FrameIo`]; read from the
    /// settings, not kept per socket).
    pub(super) fn max_message(&self) -> u64 {
        self.s.p.settings.limits.websocket_max_message
    }
}
