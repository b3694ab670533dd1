//! Live re-dial for `websocket = "hop"` (SPEC section 5): the node side is replaced while the
//! client's socket stays open.
//!
//! The gateway re-sends the original handshake (cookies and `Authorization` included, the affinity
//! header, plus `X-Hopped-From: <old node>`) to another selectable node, rebinds the conn id through
//! the hopper (counted at once), delivers the client frames held meanwhile in order, and records
//! `hopping_latency_seconds` and writes the hop's one INFO line (with `latency_ms`) when the new
//! node's first frame is relayed (or the socket ends first; once per counted hop). A client
//! message cut by the hop is replayed whole: its fragments that reached the old node go to the
//! new one first. Held frames are bounded (1024 frames, 1 MiB); past the bound, or with no node
//! accepting within [`HOP_DEADLINE`], the client gets 1012 with the reconnect hint. Spawns
//! nothing: the re-dial runs inside the relay task.

use crate::proxy::error::ProxyError;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::deflate::{Plan, Translate};
use super::dial::{pick_other, DialError, Negotiated};
use super::frame::{FrameError, Kind, Peer};
use super::message::OwedHop;
use super::outcome::Agreed;
use super::redial::{redial_node, Handshake};
use super::relay::{Flow, NodeSide, Relay};
use super::Stream;
use crate::hopper::{Follow, HopReason};
use crate::proxy::context::RequestCtx;
use crate::proxy::types::Proxy;
use crate::registry::{Node, NodeId};

impl Relay {
    /// Moves the socket from `old` to another node. The old side is already dropped.
    pub(super) async fn hop(
        &mut self,
        old: Arc<Node>,
        reason: HopReason,
        failure_seen: Instant,
    ) -> Flow {
        // A hop never splits a message (SPEC section 5, CASE-28): the fragments of the client's
        // unfinished message that the old node got go to the new node again, before the rest.
        let replayed = self
            .carry
            .partial
            .take()
            .is_some_and(|frames| self.carry.held.prepend(frames));
        if !replayed {
            tracing::warn!(from = %old.id, "the client's unfinished message is too large to replay on another node; sending a reconnect hint");
            return self.hint(&old, reason, failure_seen).await;
        }
        let deadline = failure_seen + HOP_DEADLINE;
        let dial = redial(
            self.s.p.clone(),
            self.s.ctx.clone(),
            self.s.hs.clone(),
            self.s.negotiated.clone(),
            old.id.clone(),
            deadline,
        );
        tokio::pin!(dial);
        let (node, io) = loop {
            tokio::select! {
                found = &mut dial => match found {
                    Some(found) => break found,
                    None => {
                        tracing::warn!(from = %old.id, "no node took the websocket within the hop deadline; sending a reconnect hint");
                        return self.hint(&old, reason, failure_seen).await;
                    }
                },
                r = self.down.read() => {
                    if let Some(end) = self.while_hopping(r, &old, reason, failure_seen).await {
                        return end;
                    }
                }
                // With `shutdown_spread` the hop goes on and the hint comes at its point.
                () = self.shutdown.signaled() => {
                    if self.on_shutdown().await == Flow::End {
                        return Flow::End;
                    }
                }
            }
        };
        self.attach(old, node, io, reason, failure_seen).await
    }

    /// Settles a counted hop's debts once the new node served the socket (`served`) or the socket
    /// ended first: its one `hopping_latency_seconds` observation and its one log line.
    pub(super) fn settle_hop(&mut self, served: bool) {
        let Some(owed) = self.carry.owed.take() else {
            return;
        };
        let latency = owed.seen.elapsed();
        self.s.p.metrics.hop_latency.observe(latency.as_secs_f64());
        if served {
            owed.line.served(latency);
        } else {
            owed.line.unserved();
        }
    }

    /// A client frame read while no node is attached: counted and held for the new node, or the
    /// end of the socket (`Some`: the client left or closed, a message too big, too much held).
    async fn while_hopping(
        &mut self,
        r: super::relay::Read,
        old: &Node,
        reason: HopReason,
        failure_seen: Instant,
    ) -> Option<Flow> {
        let f = match r {
            Ok(Some(f)) => f,
            Err(FrameError::TooBig(size, _)) => return Some(self.client_too_big(size).await),
            // A frame RFC 6455 refuses (a reserved close code among them): Close 1002, as when a
            // node is attached (section 7.4.1).
            Err(FrameError::Protocol(what)) => {
                return Some(self.end(ProxyError::FrameProtocol(what)).await)
            }
            _ => {
                tracing::debug!("client left during a hop");
                return Some(Flow::End);
            }
        };
        self.traffic.bytes_in += f.wire().len() as u64;
        let k = f.kind();
        match k {
            Kind::Close => {
                // The client ends the session while no node is attached: complete its handshake.
                let _ = self.send_client(&f).await;
                return Some(Flow::End);
            }
            // It answered a ping of the old node.
            Kind::Pong => {}
            Kind::Start { .. } | Kind::Continue { .. } | Kind::Ping => {
                if !self.carry.held.push(f) {
                    tracing::warn!(from = %old.id, "too many client messages held during a hop; sending a reconnect hint");
                    return Some(self.hint(old, reason, failure_seen).await);
                }
            }
        }
        None
    }

    /// Attaches the re-dialled `node` (its stream `io` and the extensions it `agreed` to, which
    /// decide what the side translates: [`Plan`]): rebinds the conn id off `old` (a hop counted for
    /// `reason`), sends the held frames first, and owes the hop's latency observation from
    /// `failure_seen`.
    async fn attach(
        &mut self,
        old: Arc<Node>,
        node: Arc<Node>,
        (io, agreed): (Stream, Agreed),
        reason: HopReason,
        failure_seen: Instant,
    ) -> Flow {
        let line = match &self.s.ctx.conn_id {
            Some(conn) => {
                let hopper = &self.s.p.hopper;
                let now = Instant::now();
                let hop = hopper.hop(conn, &old.id, node.clone(), Follow::No, reason, now);
                hop.await.line
            }
            None => None,
        };
        self.s.ctx.log.hops += 1;
        self.s.ctx.log.node = Some(node.id.clone());
        let inflight = node.runtime.start_request();
        let client = self.s.negotiated.extensions.deflate();
        let translate =
            Translate::new(Plan::of(client, agreed.deflate()), client, agreed.deflate());
        let mut side = NodeSide::new(node, io, inflight, translate);
        let limit = self.max_message();
        side.io.set_max_message(limit);
        let held = self.carry.held.take();
        let count = held.len();
        for f in held {
            let out = match side.translated(&f, Peer::Node, limit) {
                Ok(out) => out,
                Err(FrameError::TooBig(size, _)) => {
                    self.up = Some(side);
                    return self.client_too_big(size).await;
                }
                Err(e) => {
                    self.up = Some(side);
                    return self
                        .end(ProxyError::FrameProtocol(e.protocol_reason()))
                        .await;
                }
            };
            // A failure here surfaces as the new side's next read failing, which hops again.
            if side.io.write(&out).await.is_err() {
                break;
            }
            self.carry.partial.sent(&f);
        }
        tracing::debug!(from = %old.id, to = %side.node.id, reason = reason.label(), held = count, "websocket re-dialled");
        self.up = Some(side);
        // Only a counted hop owes a latency observation and a log line.
        self.carry.owed = line.map(|line| {
            Box::new(OwedHop {
                seen: failure_seen,
                line,
            })
        });
        self.touch();
        Flow::Continue
    }
}

/// From the failure being seen, how long the gateway looks for a node that takes the socket.
const HOP_DEADLINE: Duration = Duration::from_secs(5);
/// Pause before trying the nodes again when every candidate refused.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Tries selectable nodes other than `from` until one takes the socket or `deadline` passes.
async fn redial(
    p: Arc<Proxy>,
    ctx: RequestCtx,
    hs: Handshake,
    negotiated: Negotiated,
    from: NodeId,
    deadline: Instant,
) -> Option<(Arc<Node>, (Stream, Agreed))> {
    let mut tried = vec![from.clone()];
    // Nodes that answered but refused the socket (another subprotocol, an extension the client
    // did not agree to): never tried again for this hop.
    let mut refused: Vec<NodeId> = Vec::new();
    loop {
        let Some(node) = pick_other(&p, &ctx, &tried) else {
            let mut rest = refused.clone();
            rest.push(from.clone());
            if !refused.is_empty() && pick_other(&p, &ctx, &rest).is_none() {
                // Every other selectable node refused: the reconnect hint, now (SPEC section 5).
                return None;
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                return None;
            }
            // None is selectable yet: wait, then try again every node that did not refuse, the
            // node the socket left included: an ejection by passive errors (e.g. connect
            // timeouts of a hop storm) ends when a probe succeeds, and selection skips it until then.
            tried.clone_from(&refused);
            tokio::time::sleep(RETRY_PAUSE).await;
            continue;
        };
        // Paced: at most REDIALS_IN_FLIGHT re-dials per node, in order (hop storms).
        let Ok(slot) = tokio::time::timeout_at(deadline, node.runtime.redial_slot()).await else {
            return None;
        };
        let mark = node.runtime.passive_mark();
        let dialled =
            tokio::time::timeout_at(deadline, redial_node(&p, &node, &hs, &negotiated, &from))
                .await;
        drop(slot);
        match dialled {
            Err(_) => return None,
            Ok(Ok(io)) => {
                node.runtime.record_passive_success();
                return Some((node, io));
            }
            Ok(Err(e)) => {
                if matches!(e, DialError::Connect(_)) {
                    node.runtime.record_connect_error(
                        &node.settings.health,
                        &e.to_string(),
                        mark,
                        Instant::now(),
                    );
                }
                tracing::info!(node = %node.id, error = %e, "websocket re-dial failed; trying another node");
                if matches!(e, DialError::Refused(_)) {
                    refused.push(node.id.clone());
                }
                tried.push(node.id.clone());
            }
        }
    }
}
