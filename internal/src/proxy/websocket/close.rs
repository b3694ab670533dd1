//! Ending a socket from the gateway's side: the reconnect hint (close 1012 after moving the
//! binding; at gateway shutdown with `shutdown_spread`, at a random point of the spread with the
//! binding kept), Close frames to either side, and the bounded wait for the client's reply before
//! TCP closes (SPEC section 5: never 1005/1006 on the wire). A Close a peer sends with a code the
//! RFC reserves for local use (1005, 1006, 1015) or leaves unassigned, or with a malformed payload
//! ([`frame::check_close`]), is never relayed: the peer that sent it is answered 1002 and the
//! socket ends as for any protocol error of that peer. Spawns nothing.

use std::time::Duration;

use crate::drain;
use crate::proxy::error::ProxyError;
use crate::proxy::respond::{render, CloseCode, Dialect};
use tokio::time::Instant;

use super::dial::pick_other;
use super::frame::{self, Frame, FrameError, Kind};
use super::relay::{Flow, Relay, CLOSE_REPLY_WAIT};
use crate::hopper::{Follow, HopReason};
use crate::proxy::hop_clock::HopClock;
use crate::registry::Node;

/// `retry_ms` in a reconnect hint is drawn from this range, so hinted clients do not all come back
/// in the same millisecond.
const HINT_RETRY_MS: std::ops::Range<u64> = 100..1100;

impl Relay {
    /// Moves the binding off `old` (so a reconnect with the same id lands on a healthy node) and
    /// closes the client with 1012 and a reconnect hint (SPEC section 5). A counted hop records
    /// one `hopping_latency_seconds` observation, from `seen` (when the failure was seen) to the
    /// hint going out: the gateway's answer to the failure.
    pub(super) async fn hint(&mut self, old: &Node, reason: HopReason, seen: Instant) -> Flow {
        // A handle of its own: `self` is borrowed mutably below while the clock lives (a hop is rare).
        let metrics = self.s.p.metrics.clone();
        let mut clock = HopClock::new(&metrics, None);
        if let (Some(conn), Some(next)) = (
            self.s.ctx.conn_id.clone(),
            pick_other(&self.s.p, &self.s.ctx, std::slice::from_ref(&old.id)),
        ) {
            let (_, counted) = self
                .s
                .p
                .hopper
                .hop(&conn, &old.id, next, Follow::No, reason, Instant::now())
                .await
                .logged();
            if counted {
                clock.push(seen);
            }
            self.s.ctx.log.hops += 1;
        }
        self.close_node(CloseCode::GOING_AWAY, "going away").await;
        // Observed as the hint goes out, before the client can see it (and read the metric).
        drop(clock);
        self.send_hint().await
    }

    /// Gateway shutdown (SPEC section 5). Without `server.shutdown_spread`, or with a closing
    /// handshake under way, the socket ends now with Close 1001 ([`Flow::End`]). With it, the
    /// socket's reconnect hint is set for a point drawn uniformly over the spread from now
    /// ([`super::phase::Phase::shuts_down`]; [`Relay::shutdown_hint`] sends it) and the socket goes on
    /// ([`Flow::Continue`]), no longer woken by shutdown.
    pub(super) async fn on_shutdown(&mut self) -> Flow {
        let spread = self.s.p.settings.shutdown_spread;
        let Some(spread) = spread.filter(|_| !self.phase.is_closing()) else {
            return self.end(ProxyError::ShuttingDown).await;
        };
        let delay = rand::random_range(Duration::ZERO..spread);
        self.phase.shuts_down(Instant::now() + delay);
        self.shutdown = drain::Watch::never();
        Flow::Continue
    }

    /// The socket's point of the shutdown spread came (SPEC section 5): Close 1001 to the node,
    /// 1012 and the reconnect hint to the client. The binding stays: the node still serves, and
    /// the client's reconnect through another gateway replica lands on it again.
    pub(super) async fn shutdown_hint(&mut self) -> Flow {
        self.close_node(CloseCode::GOING_AWAY, "going away").await;
        self.send_hint().await
    }

    /// Sends the client Close 1012 with the reconnect hint, `{"reconnect":true,"retry_ms":N}`
    /// with `N` drawn from [`HINT_RETRY_MS`] (SPEC section 5), and waits (bounded) for its reply.
    /// The one place the hint is written; the node side is closed already.
    async fn send_hint(&mut self) -> Flow {
        let retry_ms = rand::random_range(HINT_RETRY_MS);
        let hint = serde_json::json!({ "reconnect": true, "retry_ms": retry_ms }).to_string();
        if self.send_close(CloseCode::SERVICE_RESTART, &hint).await {
            self.await_client_reply().await;
        }
        Flow::End
    }

    /// Writes `frame` to the client (unmasked: [`Frame::for_peer`]), counting bytes.
    pub(super) async fn send_client(&mut self, frame: &Frame) -> Result<(), FrameError> {
        let n = self.down.write(frame).await?;
        self.traffic.bytes_out += n as u64;
        Ok(())
    }

    /// Sends the node a Close (if its side is alive and none was sent) and drops the side.
    pub(super) async fn close_node(&mut self, code: CloseCode, reason: &str) {
        if let Some(mut side) = self.up.take() {
            if !side.close_sent && !side.io.peer_gone() {
                let _ = tokio::time::timeout(
                    CLOSE_REPLY_WAIT,
                    side.io.write(&frame::close(code, reason)),
                )
                .await;
            }
        }
    }

    /// The node broke RFC 6455 (`what`, e.g. a Close with a reserved code): Close 1002 to it
    /// (section 7.4.1), then the node side is lost (hop, hint or 1011 per the route's mode), so
    /// nothing it sent after its last good frame reaches the client.
    pub(super) async fn node_broke_protocol(&mut self, what: &'static str) -> Flow {
        if let Some(side) = self.up.as_mut() {
            if !side.close_sent && !side.io.peer_gone() {
                let close = frame::close(CloseCode::PROTOCOL_ERROR, what);
                let sent = tokio::time::timeout(CLOSE_REPLY_WAIT, side.io.write(&close)).await;
                side.close_sent = matches!(sent, Ok(Ok(_)));
            }
        }
        self.node_lost(what).await
    }

    /// The client broke RFC 6455 (`what`): Close 1002 to the node and to the client (section
    /// 7.4.1), then a bounded wait for the client's reply.
    pub(super) async fn client_broke_protocol(&mut self, what: &'static str) -> Flow {
        self.close_node(CloseCode::PROTOCOL_ERROR, what).await;
        self.end(ProxyError::FrameProtocol(what)).await
    }

    /// Ends the socket from the gateway's side because of `err`: Close to the node, to the client
    /// the Close code and reason [`crate::proxy::respond::render`] gives `err`, and a bounded wait
    /// for the client's reply before TCP closes.
    pub(super) async fn end(&mut self, err: ProxyError) -> Flow {
        let (code, reason) = render(&err, Dialect::WebSocket).ws_close;
        self.close_client(CloseCode(code), &reason).await
    }

    /// Ends the socket from the gateway's side: Close to the node, Close `code` to the client, and a
    /// bounded wait for the client's reply before TCP closes.
    pub(super) async fn close_client(&mut self, code: CloseCode, reason: &str) -> Flow {
        self.close_node(CloseCode::GOING_AWAY, "going away").await;
        if self.send_close(code, reason).await {
            self.await_client_reply().await;
        }
        Flow::End
    }

    /// Sends the client Close `code` unless one went already (the node's, relayed: any other
    /// Close to the client ends the socket); true if it was sent now.
    async fn send_close(&mut self, code: CloseCode, reason: &str) -> bool {
        !self.phase.node_closed() && self.send_client(&frame::close(code, reason)).await.is_ok()
    }

    /// Waits (at most [`CLOSE_REPLY_WAIT`]) for the client's Close reply, counting what it sends.
    async fn await_client_reply(&mut self) {
        let down = &mut self.down;
        let bytes_in = &mut self.traffic.bytes_in;
        let _ = tokio::time::timeout(CLOSE_REPLY_WAIT, async {
            while let Ok(Some(f)) = down.read().await {
                *bytes_in += f.wire().len() as u64;
                if f.kind() == Kind::Close {
                    break;
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::websocket::frame::{check_close, Head, Peer};

    /// A Close frame from the node (unmasked) with `payload`.
    fn close_frame(payload: &[u8]) -> Frame {
        let mut wire = vec![0x88, u8::try_from(payload.len()).expect("short")];
        wire.extend_from_slice(payload);
        let head = Head::parse(&wire, Peer::Node)
            .expect("valid")
            .expect("whole header");
        Frame::new(head, wire.into())
    }

    #[test]
    fn only_codes_that_may_go_on_the_wire_pass() {
        let with_code = |code: u16| close_frame(&code.to_be_bytes());
        for code in [1000, 1001, 1002, 1003, 1007, 1011, 1012, 1014, 3000, 4999] {
            assert!(check_close(&with_code(code)).is_ok(), "{code}");
        }
        for code in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, u16::MAX] {
            assert!(check_close(&with_code(code)).is_err(), "{code}");
        }
        assert!(check_close(&close_frame(&[])).is_ok(), "no code at all");
        assert!(check_close(&close_frame(&[0x03])).is_err(), "one byte");
        assert!(check_close(&close_frame(&[0x03, 0xe8, b'o', b'k'])).is_ok());
        assert!(
            check_close(&close_frame(&[0x03, 0xe8, 0xff])).is_err(),
            "not UTF-8"
        );
    }
}
