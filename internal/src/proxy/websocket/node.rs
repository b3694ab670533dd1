//! The relay's node events: the node side lost, the node's signal (ejected, draining, drain
//! deadline), and a side that must go — hop, hint or close by the route's `websocket` mode
//! (SPEC section 5). Part of [`super::relay::Relay`].

use crate::proxy::error::ProxyError;

use tokio::time::Instant;

use super::frame::{self, Kind, Peer};
use crate::config::WsMode;
use crate::hopper::HopReason;
use crate::proxy::respond::CloseCode;

use super::relay::{Flow, NodeSide, Relay, CLOSE_REPLY_WAIT};

impl Relay {
    /// The node side failed or closed TCP without a Close frame.
    pub(super) async fn node_lost(&mut self, detail: &str) -> Flow {
        if let Some(close) = self.phase.client_close().cloned() {
            // Closing anyway: complete the client's handshake with its own code.
            let _ = self.send_client(&close).await;
            return Flow::End;
        }
        if self.phase.node_closed() {
            // The node sent Close and then closed TCP: only the client's reply is missing.
            self.up = None;
            return Flow::Continue;
        }
        if let Some(side) = &self.up {
            side.node.runtime.record_passive_error(
                &side.node.settings.health,
                &format!("websocket: {detail}"),
                Instant::now(),
            );
            if self.mode() == WsMode::Hop {
                // The hop's own line says it (reason node_lost); one line per socket of a storm
                // is enough.
                tracing::debug!(node = %side.node.id, detail, "websocket node connection lost");
            } else {
                tracing::info!(node = %side.node.id, detail, "websocket node connection lost");
            }
        }
        Box::pin(self.node_gone(HopReason::NodeLost, false)).await
    }

    pub(super) async fn on_signal(&mut self) -> Flow {
        let Some(side) = self.up.as_mut() else {
            return Flow::Continue;
        };
        let signal = *side.signal.borrow_and_update();
        if self.phase.is_closing() {
            return Flow::Continue;
        }
        if signal.usable {
            self.phase.undrain();
            return Flow::Continue;
        }
        let mode = self.mode();
        match signal.drain_deadline {
            Some(deadline) => {
                // Spread hops and hints over the drain period so healthy nodes are not hit all at once.
                self.phase.drains(deadline, mode != WsMode::Close);
                Flow::Continue
            }
            // Ejected while the socket still works: `close` keeps serving it.
            None if mode == WsMode::Close => Flow::Continue,
            None => Box::pin(self.node_gone(HopReason::Ejected, true)).await,
        }
    }

    /// Ends a side whose node still works (drain, ejection) before the socket moves on: sends the
    /// node Close 1001 and relays the data frames it still sends until its Close reply, so the
    /// answers to messages it already received reach the client instead of being dropped with the
    /// side. Bounded by [`CLOSE_REPLY_WAIT`]; the node's pings, pongs and Close stay on the old side
    /// (the client's next peer is another node). Client frames wait in the client socket meanwhile.
    /// A node already gone (its FIN or reset arrived: e.g. killed, and ejected by the errors of its
    /// other sockets before this one read its end) gets no Close; the frames it sent before going
    /// are still relayed (a hop storm then costs no write to a dead socket).
    pub(super) async fn retire(&mut self, side: &mut NodeSide) {
        if !side.io.peer_gone() {
            let sent = tokio::time::timeout(
                CLOSE_REPLY_WAIT,
                side.io
                    .write(&frame::close(CloseCode::GOING_AWAY, "going away")),
            )
            .await;
            if !matches!(sent, Ok(Ok(_))) {
                return;
            }
            side.close_sent = true;
        }
        let deadline = Instant::now() + CLOSE_REPLY_WAIT;
        while let Ok(Ok(Some(f))) = tokio::time::timeout_at(deadline, side.io.read()).await {
            match f.kind() {
                Kind::Close => return,
                Kind::Ping | Kind::Pong => {}
                Kind::Start { .. } | Kind::Continue { .. } => {
                    let Ok(out) = side.translated(&f, Peer::Client, self.max_message()) else {
                        return;
                    };
                    if self.send_client(&out).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// The node side must be replaced: hop, hint or close per the route's mode. `alive` says whether
    /// the old side still works (it then gets a Close 1001 first).
    pub(super) async fn node_gone(&mut self, reason: HopReason, alive: bool) -> Flow {
        // The failure is seen now; retiring a live side below takes up to CLOSE_REPLY_WAIT.
        let seen = Instant::now();
        self.phase.undrain();
        let Some(mut side) = self.up.take() else {
            return self.end(ProxyError::NodeGone).await;
        };
        if alive && !side.close_sent {
            if self.mode() == WsMode::Close {
                let _ = tokio::time::timeout(
                    CLOSE_REPLY_WAIT,
                    side.io
                        .write(&frame::close(CloseCode::GOING_AWAY, "going away")),
                )
                .await;
            } else {
                self.retire(&mut side).await;
            }
        }
        let old = side.node.clone();
        let node_in_message = side.io.in_message();
        drop(side);
        match self.mode() {
            WsMode::Close => self.end(ProxyError::NodeGone).await,
            WsMode::Hint => self.hint(&old, reason, seen).await,
            // The state of an extension other than permessage-deflate, or a message the node
            // half sent, cannot move to another node.
            WsMode::Hop if self.s.negotiated.pins_node() || node_in_message => {
                self.hint(&old, reason, seen).await
            }
            WsMode::Hop => self.hop(old, reason, seen).await,
        }
    }
}
