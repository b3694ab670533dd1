//! The relay's frame-by-frame handling (RFC 6455 sections 5 and 7), for what the pump
//! ([`super::pump`]) leaves to it: a client or node frame read (already checked against
//! `limits.websocket_max_message` by its side: 1009), counted and passed to the other side as it
//! came; a Close is relayed and its reply awaited (CASE-05). Also the ends of the pump's batches
//! that did not go at once. Part of [`super::relay::Relay`].

use crate::proxy::error::ProxyError;
use crate::proxy::respond::{render, CloseCode, Dialect};

use bytes::Buf;

use super::frame::{FrameError, Kind, Peer};
use super::io::unsent;
use super::pump::{self, Read};
use crate::config::WsMode;
use crate::hopper::HopReason;

use super::relay::{Flow, Relay};

impl Relay {
    /// Writes the rest of a batch to the node that its socket did not take at once.
    pub(super) async fn finish_to_node(&mut self) -> Flow {
        let Some(side) = self.up.as_mut() else {
            return Box::pin(self.node_write_failed("node side gone")).await;
        };
        match pump::finish(&mut self.down, &mut side.io).await {
            Ok(_) => Flow::Continue,
            Err(e) => Box::pin(self.node_write_failed(&e.to_string())).await,
        }
    }

    /// Writes the rest of a batch to the client that its socket did not take at once.
    pub(super) async fn finish_to_client(&mut self) -> Flow {
        let Some(side) = self.up.as_mut() else {
            return Flow::Continue;
        };
        match pump::finish(&mut side.io, &mut self.down).await {
            Ok(_) => Flow::Continue,
            Err(_) => {
                tracing::debug!("client left without a close handshake");
                Flow::End
            }
        }
    }

    /// A batch to the node failed: its frames that did not go wait for the next node (pongs
    /// answer the old node and are dropped), then the node side is lost.
    pub(super) async fn node_write_failed(&mut self, detail: &str) -> Flow {
        if let Some((sent, end)) = self.down.owed.take() {
            for f in unsent(&self.down.buf, sent, end, Peer::Client) {
                if f.kind() != Kind::Pong && !self.carry.held.push(f) {
                    tracing::debug!("held frame bound reached while the node side failed");
                }
            }
            self.down.buf.advance(end);
            self.down.release_if_empty();
        }
        self.node_lost(detail).await
    }

    /// The client sent a message over `websocket_max_message`: Close 1009 to it (RFC 6455
    /// section 7.4.1), 1001 to the node, one WARN line naming route and node.
    pub(super) async fn client_too_big(&mut self, size: u64) -> Flow {
        self.warn_too_big("client", size);
        self.end(ProxyError::MessageTooBig {
            limit: self.max_message(),
        })
        .await
    }

    /// The node sent a message over `websocket_max_message`: Close 1009 to the node, 1001 to the
    /// client.
    pub(super) async fn node_too_big(&mut self, size: u64) -> Flow {
        self.warn_too_big("node", size);
        let (code, reason) = render(
            &ProxyError::MessageTooBig {
                limit: self.max_message(),
            },
            Dialect::WebSocket,
        )
        .ws_close;
        self.close_node(CloseCode(code), &reason).await;
        self.close_client(
            CloseCode::GOING_AWAY,
            "node sent a message over the size limit",
        )
        .await
    }

    /// The one WARN line for a message of `size` bytes over `websocket_max_message` that `from`
    /// ("client" or "node") sent, naming route and node.
    fn warn_too_big(&self, from: &str, size: u64) {
        let node = self
            .up
            .as_ref()
            .map(|l| l.node.id.to_string())
            .unwrap_or_default();
        tracing::warn!(route = %self.s.ctx.route.id, node, size, limit = self.max_message(), "{from} websocket message over limits.websocket_max_message; closing 1009");
    }

    pub(super) async fn on_client(&mut self, r: Read) -> Flow {
        let frame = match r {
            Ok(Some(f)) => f,
            Err(FrameError::TooBig(size, _)) => return Box::pin(self.client_too_big(size)).await,
            Err(FrameError::Protocol(what)) => {
                return Box::pin(self.client_broke_protocol(what)).await
            }
            Ok(None)
            | Err(FrameError::Io(_) | FrameError::Truncated | FrameError::WriteTimeout(_)) => {
                tracing::debug!("client left without a close handshake");
                return Flow::End;
            }
        };
        self.traffic.bytes_in += frame.wire().len() as u64;
        self.touch();
        let k = frame.kind();
        if k == Kind::Close {
            if self.phase.node_closed() {
                // The client's reply to the node's Close: pass it on, the session is over.
                if let Some(side) = self.up.as_mut() {
                    if side.io.write(&frame).await.is_ok() {
                        side.close_sent = true;
                    }
                }
                return Flow::End;
            }
            self.phase.client_closes(frame.clone());
        }
        let limit = self.max_message();
        let Some(side) = self.up.as_mut() else {
            return Flow::Continue;
        };
        if side.io.peer_gone() {
            // The node is already gone: keep the frame for the next node instead of losing it.
            if k != Kind::Close && k != Kind::Pong && !self.carry.held.push(frame) {
                tracing::debug!("held frame bound reached while the node side is closing");
            }
            return Flow::Continue;
        }
        let out = match side.translated(&frame, Peer::Node, limit) {
            Ok(out) => out,
            Err(FrameError::TooBig(size, _)) => return Box::pin(self.client_too_big(size)).await,
            Err(e) => {
                let what = e.protocol_reason();
                return Box::pin(self.end(ProxyError::FrameProtocol(what))).await;
            }
        };
        match side.io.write(&out).await {
            Ok(_) => {
                side.close_sent |= k == Kind::Close;
                self.carry.partial.sent(&frame);
                Flow::Continue
            }
            Err(e) => {
                // A write that failed did not reach a live node: keep the frame for the next node.
                if k != Kind::Close && k != Kind::Pong && !self.carry.held.push(frame) {
                    tracing::debug!("held frame bound reached while the node side failed");
                }
                Box::pin(self.node_lost(&e.to_string())).await
            }
        }
    }

    pub(super) async fn on_node(&mut self, r: Read) -> Flow {
        let frame = match r {
            Ok(Some(f)) => f,
            Err(FrameError::TooBig(size, _)) => return Box::pin(self.node_too_big(size)).await,
            Err(FrameError::Protocol(what)) => {
                return Box::pin(self.node_broke_protocol(what)).await
            }
            Ok(None) => {
                return self
                    .node_lost("connection closed without a close frame")
                    .await
            }
            Err(e) => return Box::pin(self.node_lost(&e.to_string())).await,
        };
        // Served again: the hop's latency and its one INFO line (one line per hop).
        self.settle_hop(true);
        self.touch();
        let k = frame.kind();
        match k {
            Kind::Close
                if self.phase.client_close().is_none()
                    && self.mode() != WsMode::Close
                    && going_away(frame.close_code()) =>
            {
                // The node is going away (shutdown, drain, restart): move the socket, do not end it.
                if let Some(side) = self.up.as_mut() {
                    if side.io.write(&frame).await.is_ok() {
                        side.close_sent = true;
                    }
                }
                return Box::pin(self.node_gone(HopReason::GoingAway, false)).await;
            }
            Kind::Close if self.phase.client_close().is_none() => self.phase.node_closes(),
            Kind::Start { .. } | Kind::Continue { .. } | Kind::Close | Kind::Ping | Kind::Pong => {}
        }
        let limit = self.max_message();
        let out = match self
            .up
            .as_mut()
            .map(|side| side.translated(&frame, Peer::Client, limit))
        {
            Some(Ok(out)) => out,
            Some(Err(FrameError::TooBig(size, _))) => {
                return Box::pin(self.node_too_big(size)).await
            }
            Some(Err(e)) => return Box::pin(self.node_lost(&e.to_string())).await,
            None => std::borrow::Cow::Borrowed(&frame),
        };
        if self.send_client(&out).await.is_err() {
            return Flow::End;
        }
        if k == Kind::Close && self.phase.client_close().is_some() {
            // The node answered the client's Close: the closing handshake is complete.
            return Flow::End;
        }
        Flow::Continue
    }
}

/// True for a node's Close that says it is going away (1001, or 1012 for a restart): `hop` and
/// `hint` move the socket instead of ending it.
fn going_away(code: Option<u16>) -> bool {
    code.is_some_and(|c| c == CloseCode::GOING_AWAY.0 || c == CloseCode::SERVICE_RESTART.0)
}
