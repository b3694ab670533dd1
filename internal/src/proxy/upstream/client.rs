//! The upstream client: per-node pools of HTTP/1.1 connections driven by the gateway's own client
//! ([`super::http1::conn`], in the request's task) and one multiplexed h2c connection per
//! node (the `h2` crate, [`super::h2`]), so every failure can be attributed exactly: connect failed
//! (nothing sent), request handed back unsent (stale pooled connection), a reused connection the
//! node closed after the request went out (stale, replayable when idempotent), or failed after
//! sending (SPEC section 4 retry rules).
//!
//! h2c and h2 connections (one per node, shared) live in [`super::h2`]. Connections to nodes of a
//! cluster with `tls` are TLS ([`crate::tls::client::connect`]); a failed handshake is a connect
//! failure like a refused TCP connect.
//!
//! Pooled HTTP/1.1 connections are checked before reuse, expire after `upstream_idle_timeout`, and
//! a node's advertised `Keep-Alive: timeout=N` caps that (CASE-21; [`super::http1::pool`]). No
//! task is spawned per HTTP/1.1 connection.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, SizeHint};

use super::http1::body::NodeBody;
use super::http1::conn::{self, Handshook};
use super::http1::io::NodeConn;
use super::http1::pool::{Home, Pool};
use super::request::NodeRequest;
pub use super::request::{connect_detail, is_refused, is_unprocessed, SendError};
use crate::config::Protocol;
use crate::proxy::body::{BoxError, FramePoll, ProxyBody};
pub use crate::proxy::error::describe;
use crate::proxy::http1_codec::fields::NodeAnswer;
use crate::registry::Node;
use crate::tls::client::{self as tls, Alpn, NodeStream};

/// The upstream client shared by every request of a worker.
pub struct NodeClient {
    /// Idle HTTP/1.1 connections ([`Pool`]).
    pool: Arc<Pool>,
    /// The h2c connections ([`super::h2`]).
    h2: super::h2::H2Pool,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// A node's answer body: read off an HTTP/1.1 connection by the gateway's own client, or an h2
/// stream's body ([`super::h2::stream::NodeH2Body`]).
#[derive(Debug)]
pub enum NodeAnswerBody {
    /// HTTP/1.1 ([`NodeBody`]).
    H1(NodeBody),
    /// h2c or h2.
    H2(super::h2::stream::NodeH2Body),
}

impl Body for NodeAnswerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        match self.get_mut() {
            NodeAnswerBody::H1(b) => Pin::new(b).poll_frame(cx),
            NodeAnswerBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            NodeAnswerBody::H1(b) => b.is_end_stream(),
            NodeAnswerBody::H2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            NodeAnswerBody::H1(b) => b.size_hint(),
            NodeAnswerBody::H2(b) => b.size_hint(),
        }
    }
}

impl NodeClient {
    /// A client with the given connect timeout and pooled idle timeout.
    pub fn new(connect_timeout: Duration, idle_timeout: Duration) -> Self {
        NodeClient {
            pool: Arc::default(),
            h2: super::h2::H2Pool::default(),
            connect_timeout,
            idle_timeout,
        }
    }

    /// Sets the header-list (and trailers) limit of upstream h2 connections
    /// (`limits.h2_max_header_list`, SPEC section 4: both directions).
    pub fn with_h2_max_header_list(mut self, max: u32) -> Self {
        self.h2 = super::h2::H2Pool::new(max);
        self
    }

    /// Opens a connection to `node` within the connect timeout: TCP, plus the TLS handshake
    /// offering ALPN `http/1.1` when its cluster has `tls` (HTTP/1.1 requests and WebSocket dials).
    ///
    /// # Errors
    /// The connect error, `TimedOut`, or a failed handshake ([`tls::handshake_error`] names it).
    pub async fn connect(&self, node: &Node) -> std::io::Result<NodeStream> {
        tls::connect(
            &node.addr,
            &node.id,
            node.settings.tls.as_deref(),
            Alpn::Http1,
            self.connect_timeout,
        )
        .await
    }

    /// Sends `head` and `body` to `node` on a pooled or new connection and returns the node's
    /// answer (head and streaming body). A pooled HTTP/1.1 connection that turns out stale before
    /// the request is written is replaced by a new one transparently; an HTTP/1.1 connection goes
    /// back to the pool by itself when the answer's body ends cleanly. An HTTP/1.1 node's fields
    /// come as bytes beside the response when `head.raw_answer` asks for them ([`NodeAnswer`]).
    ///
    /// # Errors
    /// [`SendError`] saying whether anything was sent (with the body when nothing was).
    pub async fn send(
        &self,
        node: &Node,
        head: NodeRequest<'_>,
        body: ProxyBody,
    ) -> Result<NodeAnswer<NodeAnswerBody>, SendError> {
        match node.settings.protocol {
            Protocol::Http1 => self.send_h1(node, head, body).await,
            Protocol::H2c | Protocol::H2 => {
                let req = super::request::h2_request(head, node, body);
                let response = self.h2.send(node, self.connect_timeout, req).await?;
                Ok(NodeAnswer::from(response.map(NodeAnswerBody::H2)))
            }
        }
    }

    /// [`NodeClient::send`] to an HTTP/1.1 node: a pooled connection, or a new one when none is
    /// idle or the pooled one was stale before anything went out.
    async fn send_h1(
        &self,
        node: &Node,
        head: NodeRequest<'_>,
        mut body: ProxyBody,
    ) -> Result<NodeAnswer<NodeAnswerBody>, SendError> {
        loop {
            let (conn, reused) = match self.pool.checkout(&node.id) {
                Some(c) => (c, true),
                None => match self.connect(node).await {
                    Ok(io) => (NodeConn::new(io), false),
                    Err(e) => return Err(SendError::Connect(e, body)),
                },
            };
            let home = Home {
                pool: self.pool.clone(),
                node: node.id.clone(),
                ttl: self.idle_timeout,
            };
            match conn::send(conn, reused, head, body, home).await {
                Ok(response) => return Ok(response.map(NodeAnswerBody::H1)),
                // Stale pooled connection: nothing went out, try a fresh one.
                Err(SendError::NotSent(_, back)) if reused => body = back,
                Err(e @ SendError::Stale(_)) => {
                    // Its idle siblings were opened around the same time: likely closed too.
                    self.pool.drop_idle(&node.id);
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends the WebSocket handshake `head` (no body) to `node` on a new connection (RFC 6455
    /// section 4.1): the node's stream after a `101`, or its other answer (whose connection is
    /// then closed).
    ///
    /// # Errors
    /// [`SendError::Connect`] when the connection (or TLS) failed, nothing sent; else as
    /// [`conn::handshake`].
    pub async fn handshake(
        &self,
        node: &Node,
        head: NodeRequest<'_>,
    ) -> Result<Handshook, SendError> {
        let io = match self.connect(node).await {
            Ok(io) => io,
            Err(e) => {
                return Err(SendError::Connect(
                    e,
                    crate::proxy::body::full(Bytes::new()),
                ))
            }
        };
        let home = Home {
            pool: self.pool.clone(),
            node: node.id.clone(),
            ttl: Duration::ZERO,
        };
        conn::handshake(NodeConn::new(io), head, home).await
    }

    /// Drops every pooled connection of `node` (it was removed or ejected).
    pub fn forget(&self, node: &str) {
        self.pool.forget(node);
        self.h2.forget(node);
    }
}
