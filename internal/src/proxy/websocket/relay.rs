//! The per-socket relay task: frames both ways, one `select!` over the client leg, the node leg,
//! the node's signal (ejected, draining), gateway shutdown and the timers (idle, drain jitter, drain
//! deadline, close grace).
//!
//! Close rules (SPEC section 5, CASE-05): a Close from either side is relayed and the other side's
//! reply is awaited (bounded); a node that vanishes without Close costs the client nothing in `hop`
//! mode ([`super::hop`]), gets a 1012 reconnect hint in `hint` mode, and a 1011 in `close` mode
//! (never 1005/1006 on the wire). A node's own 1001/1012 means it is going away: `hop` and `hint`
//! treat it like a vanished node, `close` relays it. Shutdown and the drain deadline send 1001,
//! the idle timeout sends 1001 first. WebSockets are never cut by the route timeout.

use crate::proxy::respond::{render, Dialect, ProxyError};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tracing::Instrument;

use super::frame::{self, FrameError, FrameIo, Kind, Peer};
use super::hop::Held;
use super::message::{MessageSize, Partial};
use super::{Handshake, Negotiated, Stream};
use crate::config::WsMode;
use crate::drain;
use crate::hopper::HopReason;
use crate::proxy::context::RequestCtx;
use crate::proxy::{LogCtx, Proxy};
use crate::registry::{InflightGuard, Node, NodeSignal};

/// After one side sent Close, how long the other side gets to answer before TCP is closed.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// After the gateway itself sent Close, how long it waits for the client's reply.
pub(super) const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(1);

/// Everything the task needs from the handshake.
#[derive(Debug)]
pub(super) struct Session {
    /// The proxy (metrics, hopper, upstream client, shutdown watch).
    pub(super) p: Arc<Proxy>,
    /// Route, conn id and version decision of the upgrade request.
    pub(super) ctx: RequestCtx,
    /// The handshake to replay on a hop.
    pub(super) hs: Handshake,
    /// What the first node agreed to.
    pub(super) negotiated: Negotiated,
    /// Access-log fields; the line is written when the socket ends.
    pub(super) log: LogCtx,
}

/// The node leg: its frames, the node and its signal, and the in-flight count held on it.
#[derive(Debug)]
pub(super) struct Leg {
    pub(super) io: FrameIo<Stream>,
    pub(super) node: Arc<Node>,
    signal: watch::Receiver<NodeSignal>,
    _inflight: InflightGuard,
    /// True once a Close went to the node on this leg.
    pub(super) close_sent: bool,
}

impl Leg {
    /// A leg to `node` over the upgraded stream `io`.
    pub(super) fn new(node: Arc<Node>, io: Stream, inflight: InflightGuard) -> Self {
        let mut signal = node.runtime.subscribe();
        // Look at the current state once: the node may have drained before the 101 went out.
        signal.mark_changed();
        Leg {
            io: FrameIo::new(io, Peer::Node),
            node,
            signal,
            _inflight: inflight,
            close_sent: false,
        }
    }
}

/// Whether the task goes on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    End,
}

type Read = Result<Option<(Frame, usize)>, FrameError>;

enum Event {
    Client(Read),
    Node(Read),
    Signal,
    Shutdown,
    Idle,
    DrainAct,
    DrainDeadline,
    Grace,
}

/// Which timer fired: the four share one `Sleep` ([`Relay::next_timer`]).
#[derive(Clone, Copy)]
enum Timer {
    Grace,
    DrainDeadline,
    DrainAct,
    Idle,
}

impl From<Timer> for Event {
    fn from(t: Timer) -> Event {
        match t {
            Timer::Grace => Event::Grace,
            Timer::DrainDeadline => Event::DrainDeadline,
            Timer::DrainAct => Event::DrainAct,
            Timer::Idle => Event::Idle,
        }
    }
}

/// The running relay.
pub(super) struct Relay {
    pub(super) s: Session,
    pub(super) mode: WsMode,
    pub(super) down: FrameIo<Stream>,
    pub(super) up: Option<Leg>,
    pub(super) shutdown: drain::Watch,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
    /// Client frames that arrived after the node leg was seen gone, for the next node.
    pub(super) held: Held,
    /// The client's Close, relayed to the node; its reply is awaited.
    client_close: Option<Frame>,
    /// The node's Close was relayed to the client; the client's reply is awaited.
    node_closed: bool,
    pub(super) down_close_sent: bool,
    closing_until: Option<Instant>,
    pub(super) client_in_message: bool,
    node_in_message: bool,
    /// Sizes of the messages in flight each way, against `max_message` (CASE-28).
    pub(super) client_size: MessageSize,
    node_size: MessageSize,
    /// `limits.websocket_max_message`, bytes.
    pub(super) max_message: u64,
    /// The client's unfinished message as the current node received it, for a hop.
    pub(super) partial: Partial,
    idle: Option<Duration>,
    idle_at: Option<Instant>,
    drain_act_at: Option<Instant>,
    drain_deadline: Option<Instant>,
    /// Set by a hop until the new node's first frame is relayed (hopping_latency_seconds).
    pub(super) failure_seen: Option<Instant>,
}

impl Session {
    /// Takes both upgraded legs and returns the relay task's future, which relays until the socket
    /// ends, then writes the access-log line (status 101, byte counts).
    ///
    /// The relay state lives in one heap block built here, and the future holds only that block,
    /// the span and the current step: an idle socket keeps its task cell small (about 0.9 KiB
    /// instead of 5.4 KiB, issue 16: memory per idle WebSocket). `self` is boxed by the caller so
    /// the spawned task does not carry the session by value before the upgrades complete.
    pub(super) fn relay(
        self: Box<Self>,
        down: Stream,
        mut leg: Leg,
    ) -> impl std::future::Future<Output = ()> + Send {
        let span = tracing::info_span!(
            "websocket",
            conn_id = self.ctx.conn_id.as_deref().unwrap_or("-"),
            cluster = %self.ctx.route.cluster.name,
            protocol = "websocket",
        );
        let mode = self.ctx.route.config.websocket;
        if mode == WsMode::Hop && self.negotiated.extensions {
            span.in_scope(|| tracing::info!(node = %leg.node.id, "websocket extension negotiated: this socket cannot hop and gets a reconnect hint instead"));
        }
        let idle = self.p.settings.limits.websocket_idle_timeout;
        let max_message = self.p.settings.limits.websocket_max_message;
        leg.io.set_max_payload(max_message);
        let mut down = FrameIo::new(down, Peer::Client);
        down.set_max_payload(max_message);
        let shutdown = self.p.shutdown.clone();
        let mut r = Box::new(Relay {
            s: *self,
            mode,
            down,
            up: Some(leg),
            shutdown,
            bytes_in: 0,
            bytes_out: 0,
            held: Held::default(),
            client_close: None,
            node_closed: false,
            down_close_sent: false,
            closing_until: None,
            client_in_message: false,
            node_in_message: false,
            client_size: MessageSize::default(),
            node_size: MessageSize::default(),
            max_message,
            partial: Partial::default(),
            idle,
            idle_at: None,
            drain_act_at: None,
            drain_deadline: None,
            failure_seen: None,
        });
        r.touch();
        async move {
            while r.step().await == Flow::Continue {}
            if let Some(seen) = r.failure_seen.take() {
                // The socket ended before the new node's first frame: the hop still owes its
                // one latency observation (issue 13).
                r.s.p
                    .metrics
                    .hop_latency
                    .observe(seen.elapsed().as_secs_f64());
            }
            // Boxed: the close path runs once per socket and is larger than a resting step.
            Box::pin(r.close_node(1001, "going away")).await;
            r.down.shutdown().await;
            r.s.p
                .finish(&r.s.log, 101, r.s.ctx.start, r.bytes_in, r.bytes_out);
        }
        .instrument(span)
    }
}

async fn read_opt(io: Option<&mut FrameIo<Stream>>) -> Read {
    match io {
        Some(io) => io.read().await,
        None => std::future::pending().await,
    }
}

async fn changed_opt(rx: Option<&mut watch::Receiver<NodeSignal>>) {
    // The sender lives in the node's runtime, which the leg holds: Err cannot happen while it is alive.
    if let Some(rx) = rx {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Relay {
    /// One event. The rare paths (closing, hop, hint) are boxed so the task's resting state,
    /// kept for every idle socket, stays small (issue 7: memory per idle WebSocket).
    async fn step(&mut self) -> Flow {
        match self.next_event().await {
            Event::Client(r) => self.on_client(r).await,
            Event::Node(r) => self.on_node(r).await,
            Event::Signal => self.on_signal().await,
            Event::Shutdown => Box::pin(self.end(ProxyError::ShuttingDown)).await,
            Event::Idle => Box::pin(self.end(ProxyError::Idle)).await,
            Event::DrainAct => Box::pin(self.node_gone(HopReason::Draining, true)).await,
            Event::DrainDeadline => Box::pin(self.end(ProxyError::DrainDeadline)).await,
            Event::Grace => Flow::End,
        }
    }

    async fn next_event(&mut self) -> Event {
        let timer = self.next_timer();
        let (up_io, up_signal) = match self.up.as_mut() {
            Some(leg) => (Some(&mut leg.io), Some(&mut leg.signal)),
            None => (None, None),
        };
        tokio::select! {
            r = self.down.read() => Event::Client(r),
            r = read_opt(up_io) => Event::Node(r),
            () = changed_opt(up_signal) => Event::Signal,
            () = self.shutdown.signaled() => Event::Shutdown,
            () = sleep_opt(timer.map(|(at, _)| at)) => timer.map_or(Event::Grace, |(_, t)| t.into()),
        }
    }

    /// The earliest of the four timers (close grace, drain deadline, drain jitter, idle) and the
    /// event it fires. One `Sleep` in the resting `select!` instead of four keeps an idle socket's
    /// task cell small (issue 16); on a tie the first in that order wins.
    fn next_timer(&self) -> Option<(Instant, Timer)> {
        [
            (self.closing_until, Timer::Grace),
            (self.drain_deadline, Timer::DrainDeadline),
            (self.drain_act_at, Timer::DrainAct),
            (self.idle_at, Timer::Idle),
        ]
        .into_iter()
        .filter_map(|(at, e)| at.map(|at| (at, e)))
        .reduce(|best, t| if t.0 < best.0 { t } else { best })
    }

    /// Restarts the idle timer (any frame either way counts, pings included: CASE-06).
    pub(super) fn touch(&mut self) {
        self.idle_at = self.idle.map(|d| Instant::now() + d);
    }

    /// Fragment bookkeeping for a client frame.
    pub(super) fn track_client(&mut self, k: Kind) {
        match k {
            Kind::Start { fin } | Kind::Continue { fin } => self.client_in_message = !fin,
            Kind::Ping | Kind::Pong | Kind::Close => {}
        }
    }

    /// The client sent a message over `websocket_max_message`: Close 1009 to it (RFC 6455
    /// section 7.4.1), 1001 to the node, one WARN line naming route and node.
    pub(super) async fn client_too_big(&mut self, size: u64) -> Flow {
        let node = self
            .up
            .as_ref()
            .map(|l| l.node.id.to_string())
            .unwrap_or_default();
        tracing::warn!(route = %self.s.ctx.route.id, node, size, limit = self.max_message, "client websocket message over limits.websocket_max_message; closing 1009");
        self.end(ProxyError::MessageTooBig {
            limit: self.max_message,
        })
        .await
    }

    /// The node sent a message over `websocket_max_message`: Close 1009 to the node, 1001 to the
    /// client.
    async fn node_too_big(&mut self, size: u64) -> Flow {
        let node = self
            .up
            .as_ref()
            .map(|l| l.node.id.to_string())
            .unwrap_or_default();
        tracing::warn!(route = %self.s.ctx.route.id, node, size, limit = self.max_message, "node websocket message over limits.websocket_max_message; closing 1009");
        let (code, reason) = render(
            &ProxyError::MessageTooBig {
                limit: self.max_message,
            },
            Dialect::WebSocket,
        )
        .ws_close;
        self.close_node(code, &reason).await;
        self.close_client(1001, "node sent a message over the size limit")
            .await
    }

    async fn on_client(&mut self, r: Read) -> Flow {
        let (frame, wire) = match r {
            Ok(Some(f)) => f,
            Err(FrameError::TooBig(size, _)) => return Box::pin(self.client_too_big(size)).await,
            Err(FrameError::Protocol(what)) => {
                return Box::pin(self.end(ProxyError::FrameProtocol(what))).await
            }
            Ok(None)
            | Err(FrameError::Io(_) | FrameError::Truncated | FrameError::WriteTimeout) => {
                tracing::debug!("client left without a close handshake");
                return Flow::End;
            }
        };
        self.bytes_in += wire as u64;
        self.touch();
        let k = frame::kind(&frame);
        self.track_client(k);
        if let Err(size) = self
            .client_size
            .add(k, frame.payload().len(), self.max_message)
        {
            return Box::pin(self.client_too_big(size)).await;
        }
        if k == Kind::Close {
            if self.node_closed {
                // The client's reply to the node's Close: pass it on, the session is over.
                if let Some(leg) = self.up.as_mut() {
                    if leg.io.write(&frame).await.is_ok() {
                        leg.close_sent = true;
                    }
                }
                return Flow::End;
            }
            self.client_close = Some(frame.clone());
            self.closing_until = Some(Instant::now() + CLOSE_GRACE);
        }
        let Some(leg) = self.up.as_mut() else {
            return Flow::Continue;
        };
        if leg.io.peer_gone() {
            // The node is already gone: keep the frame for the next node instead of losing it.
            if k != Kind::Close && k != Kind::Pong && !self.held.push(frame) {
                tracing::debug!("held frame bound reached while the node leg is closing");
            }
            return Flow::Continue;
        }
        match leg.io.write(&frame).await {
            Ok(_) => {
                leg.close_sent |= k == Kind::Close;
                self.partial.sent(&frame);
                Flow::Continue
            }
            Err(e) => {
                // A write that failed did not reach a live node: keep the frame for the next node.
                if k != Kind::Close && k != Kind::Pong && !self.held.push(frame) {
                    tracing::debug!("held frame bound reached while the node leg failed");
                }
                Box::pin(self.node_lost(&e.to_string())).await
            }
        }
    }

    async fn on_node(&mut self, r: Read) -> Flow {
        let (frame, _) = match r {
            Ok(Some(f)) => f,
            Err(FrameError::TooBig(size, _)) => return Box::pin(self.node_too_big(size)).await,
            Ok(None) => {
                return self
                    .node_lost("connection closed without a close frame")
                    .await
            }
            Err(e) => return Box::pin(self.node_lost(&e.to_string())).await,
        };
        if let Some(seen) = self.failure_seen.take() {
            let latency = seen.elapsed();
            self.s.p.metrics.hop_latency.observe(latency.as_secs_f64());
            tracing::info!(
                node = self
                    .up
                    .as_ref()
                    .map(|l| l.node.id.to_string())
                    .unwrap_or_default(),
                latency_ms = latency.as_millis() as u64,
                "websocket served again after a hop"
            );
        }
        self.touch();
        let k = frame::kind(&frame);
        if let Err(size) = self
            .node_size
            .add(k, frame.payload().len(), self.max_message)
        {
            return Box::pin(self.node_too_big(size)).await;
        }
        match k {
            Kind::Start { fin } | Kind::Continue { fin } => self.node_in_message = !fin,
            Kind::Close
                if self.client_close.is_none()
                    && self.mode != WsMode::Close
                    && matches!(frame::close_code(&frame), Some(1001 | 1012)) =>
            {
                // The node is going away (shutdown, drain, restart): move the socket, do not end it.
                if let Some(leg) = self.up.as_mut() {
                    if leg.io.write(&frame).await.is_ok() {
                        leg.close_sent = true;
                    }
                }
                return Box::pin(self.node_gone(HopReason::GoingAway, false)).await;
            }
            Kind::Close if self.client_close.is_none() => {
                self.node_closed = true;
                self.closing_until = Some(Instant::now() + CLOSE_GRACE);
            }
            Kind::Close | Kind::Ping | Kind::Pong => {}
        }
        if self.send_client(&frame).await.is_err() {
            return Flow::End;
        }
        if k == Kind::Close && self.client_close.is_some() {
            // The node answered the client's Close: the closing handshake is complete.
            return Flow::End;
        }
        Flow::Continue
    }

    /// The node leg failed or closed TCP without a Close frame.
    pub(super) async fn node_lost(&mut self, detail: &str) -> Flow {
        if let Some(close) = self.client_close.clone() {
            // Closing anyway: complete the client's handshake with its own code.
            let _ = self.send_client(&close).await;
            return Flow::End;
        }
        if self.node_closed {
            // The node sent Close and then closed TCP: only the client's reply is missing.
            self.up = None;
            return Flow::Continue;
        }
        if let Some(leg) = &self.up {
            leg.node.runtime.record_passive_error(
                &leg.node.settings.health,
                &format!("websocket: {detail}"),
                Instant::now(),
            );
            tracing::info!(node = %leg.node.id, detail, "websocket node connection lost");
        }
        Box::pin(self.node_gone(HopReason::NodeLost, false)).await
    }

    async fn on_signal(&mut self) -> Flow {
        let Some(leg) = self.up.as_mut() else {
            return Flow::Continue;
        };
        let signal = *leg.signal.borrow_and_update();
        if self.client_close.is_some() || self.node_closed {
            return Flow::Continue;
        }
        if signal.usable {
            self.drain_act_at = None;
            self.drain_deadline = None;
            return Flow::Continue;
        }
        match signal.drain_deadline {
            Some(deadline) => {
                self.drain_deadline = Some(deadline);
                if self.mode != WsMode::Close && self.drain_act_at.is_none() {
                    // Spread hops and hints over the drain period so healthy nodes are not hit all at once.
                    let now = Instant::now();
                    let left = deadline.saturating_duration_since(now).as_millis() as u64;
                    let wait = if left == 0 {
                        0
                    } else {
                        rand::random_range(0..left)
                    };
                    self.drain_act_at = Some(now + Duration::from_millis(wait));
                }
                Flow::Continue
            }
            // Ejected while the socket still works: `close` keeps serving it.
            None if self.mode == WsMode::Close => Flow::Continue,
            None => Box::pin(self.node_gone(HopReason::Ejected, true)).await,
        }
    }

    /// Ends a leg whose node still works (drain, ejection) before the socket moves on: sends the
    /// node Close 1001 and relays the data frames it still sends until its Close reply, so the
    /// answers to messages it already received reach the client instead of being dropped with the
    /// leg. Bounded by [`CLOSE_REPLY_WAIT`]; the node's pings, pongs and Close stay on the old leg
    /// (the client's next peer is another node). Client frames wait in the client socket meanwhile.
    async fn retire(&mut self, leg: &mut Leg) {
        let sent = tokio::time::timeout(
            CLOSE_REPLY_WAIT,
            leg.io.write(&frame::close(1001, "going away")),
        )
        .await;
        if !matches!(sent, Ok(Ok(_))) {
            return;
        }
        leg.close_sent = true;
        let deadline = Instant::now() + CLOSE_REPLY_WAIT;
        while let Ok(Ok(Some((f, _)))) = tokio::time::timeout_at(deadline, leg.io.read()).await {
            match frame::kind(&f) {
                Kind::Close => return,
                Kind::Ping | Kind::Pong => {}
                Kind::Start { fin } | Kind::Continue { fin } => {
                    self.node_in_message = !fin;
                    if self.send_client(&f).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// The node leg must be replaced: hop, hint or close per the route's mode. `alive` says whether
    /// the old leg still works (it then gets a Close 1001 first).
    async fn node_gone(&mut self, reason: HopReason, alive: bool) -> Flow {
        // The failure is seen now; retiring a live leg below takes up to CLOSE_REPLY_WAIT.
        let seen = Instant::now();
        self.drain_act_at = None;
        self.drain_deadline = None;
        let Some(mut leg) = self.up.take() else {
            return self.end(ProxyError::NodeGone).await;
        };
        if alive && !leg.close_sent {
            if self.mode == WsMode::Close {
                let _ = tokio::time::timeout(
                    CLOSE_REPLY_WAIT,
                    leg.io.write(&frame::close(1001, "going away")),
                )
                .await;
            } else {
                self.retire(&mut leg).await;
            }
        }
        let old = leg.node.clone();
        drop(leg);
        match self.mode {
            WsMode::Close => self.end(ProxyError::NodeGone).await,
            WsMode::Hint => self.hint(&old, reason, seen).await,
            // Extension state (e.g. a deflate context) or a half-sent message cannot move to another node.
            WsMode::Hop if self.s.negotiated.extensions || self.node_in_message => {
                self.hint(&old, reason, seen).await
            }
            WsMode::Hop => self.hop(old, reason, seen).await,
        }
    }
}
