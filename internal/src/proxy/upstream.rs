//! The upstream client: per-node pools of HTTP/1.1 connections and one multiplexed h2c connection
//! per node, on hyper's low-level `client::conn` API so every failure can be attributed exactly:
//! connect failed (nothing sent), request handed back unsent (stale pooled connection), a reused
//! connection the node closed after the request went out (stale, replayable when idempotent), or
//! failed after sending (SPEC section 4 retry rules).
//!
//! h2c and h2 connections (one per node, shared) live in [`super::h2`]. Connections to nodes of a
//! cluster with `tls` are TLS ([`crate::tls::client::connect`]); a failed handshake is a connect
//! failure like a refused TCP connect.
//!
//! Pooled HTTP/1.1 connections are checked before reuse, expire after `upstream_idle_timeout`, and
//! a node's advertised `Keep-Alive: timeout=N` caps that (CASE-21). Connection tasks are spawned
//! per connection and end when the connection closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

pub use super::send_error::{connect_detail, describe, is_refused, is_unprocessed, SendError};
use super::ProxyBody;
use crate::config::Protocol;
use crate::registry::Node;
use crate::tls::client::{self as tls, Alpn, NodeStream};

/// Idle HTTP/1.1 connections kept per node; more are closed when returned.
const MAX_IDLE_PER_NODE: usize = 256;
/// Margin subtracted from a node's advertised keep-alive timeout, so we never race its close.
const KEEPALIVE_MARGIN: Duration = Duration::from_millis(500);

struct Idle {
    send: http1::SendRequest<ProxyBody>,
    expires: Instant,
}

#[derive(Default)]
struct NodePool {
    idle: Vec<Idle>,
}

/// A pooled HTTP/1.1 connection checked out for one request; give it back with [`Upstream::give_back`].
pub struct Lease {
    node: Arc<str>,
    send: http1::SendRequest<ProxyBody>,
    /// True if it came from the pool (it may be stale).
    pub reused: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("node", &self.node)
            .field("reused", &self.reused)
            .finish()
    }
}

/// The upstream client shared by every request.
pub struct Upstream {
    pools: Mutex<HashMap<Arc<str>, NodePool>>,
    /// The h2c connections ([`super::h2`]).
    h2: super::h2::H2Pool,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// What one attempt returned: the response and, for HTTP/1.1, the connection to give back when the
/// response body is done.
pub struct Sent {
    /// The node's response head and streaming body.
    pub response: Response<Incoming>,
    /// The HTTP/1.1 connection, reusable after the body ends.
    pub lease: Option<Lease>,
}

impl Upstream {
    /// A client with the given connect timeout and pooled idle timeout.
    pub fn new(connect_timeout: Duration, idle_timeout: Duration) -> Self {
        Upstream {
            pools: Mutex::new(HashMap::new()),
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

    fn pools(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, NodePool>> {
        self.pools
            .lock()
            .expect("pool mutex is never poisoned: no panics while held")
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

    /// Sends `req` to `node` on a pooled or new connection. A pooled connection that turns out
    /// stale before the request is written is replaced by a new one transparently.
    ///
    /// # Errors
    /// [`SendError`] saying whether anything was sent.
    pub async fn send(&self, node: &Node, req: Request<ProxyBody>) -> Result<Sent, SendError> {
        match node.settings.protocol {
            Protocol::Http1 => self.send_h1(node, req).await,
            Protocol::H2c | Protocol::H2 => {
                let response = self.h2.send(node, self.connect_timeout, req).await?;
                Ok(Sent {
                    response,
                    lease: None,
                })
            }
        }
    }

    async fn send_h1(&self, node: &Node, mut req: Request<ProxyBody>) -> Result<Sent, SendError> {
        loop {
            let mut lease = match self.checkout(node) {
                Some(l) => l,
                None => match self.open_h1(node).await {
                    Ok(l) => l,
                    Err(e) => return Err(SendError::Connect(e, req)),
                },
            };
            match lease.send.try_send_request(req).await {
                Ok(response) => {
                    return Ok(Sent {
                        response,
                        lease: Some(lease),
                    })
                }
                Err(mut e) => match e.take_message() {
                    // Stale pooled connection: nothing went out, try a fresh one.
                    Some(back) if lease.reused => {
                        req = back;
                        continue;
                    }
                    Some(back) => return Err(SendError::NotSent(e.into_error(), back)),
                    None => {
                        let err = e.into_error();
                        if lease.reused && is_closed_by_peer(&err) {
                            // Its idle siblings were opened around the same time: likely closed too.
                            self.drop_idle(node);
                            return Err(SendError::Stale(err));
                        }
                        return Err(SendError::Sent(err));
                    }
                },
            }
        }
    }

    fn checkout(&self, node: &Node) -> Option<Lease> {
        let now = Instant::now();
        let mut pools = self.pools();
        let pool = pools.get_mut(&node.id)?;
        while let Some(idle) = pool.idle.pop() {
            if idle.expires > now && idle.send.is_ready() && !idle.send.is_closed() {
                return Some(Lease {
                    node: node.id.clone(),
                    send: idle.send,
                    reused: true,
                });
            }
        }
        None
    }

    async fn open_h1(&self, node: &Node) -> std::io::Result<Lease> {
        let tcp = self.connect(node).await?;
        let (send, conn) = http1::Builder::new()
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(Lease {
            node: node.id.clone(),
            send,
            reused: false,
        })
    }

    /// Returns an HTTP/1.1 connection after its response body ended; `keepalive` is the node's
    /// advertised idle timeout, if any.
    pub fn give_back(&self, lease: Lease, keepalive: Option<Duration>) {
        let ttl = match keepalive {
            Some(k) => self.idle_timeout.min(k.saturating_sub(KEEPALIVE_MARGIN)),
            None => self.idle_timeout,
        };
        if ttl.is_zero() || lease.send.is_closed() {
            return;
        }
        let mut pools = self.pools();
        let pool = pools.entry(lease.node.clone()).or_default();
        if pool.idle.len() < MAX_IDLE_PER_NODE {
            pool.idle.push(Idle {
                send: lease.send,
                expires: Instant::now() + ttl,
            });
        }
    }

    /// Drops the idle HTTP/1.1 connections of `node` (one of them turned out stale).
    fn drop_idle(&self, node: &Node) {
        if let Some(p) = self.pools().get_mut(&node.id) {
            p.idle.clear();
        }
    }

    /// Drops every pooled connection of `node` (it was removed or ejected).
    pub fn forget(&self, node: &str) {
        self.pools().remove(node);
        self.h2.forget(node);
    }
}

/// True if an HTTP/1.1 exchange failed because the node closed or reset the connection before a
/// response head arrived (EOF while reading, or a reset/broken pipe): what a reused idle connection
/// the node already closed looks like.
fn is_closed_by_peer(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() {
        return true;
    }
    let mut src = std::error::Error::source(e);
    while let Some(err) = src {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            );
        }
        src = err.source();
    }
    false
}

/// The node's `Keep-Alive: timeout=N` (seconds), if it advertised one.
pub fn keepalive_timeout<B>(resp: &Response<B>) -> Option<Duration> {
    const KEEP_ALIVE: http::HeaderName = http::HeaderName::from_static("keep-alive");
    let v = resp.headers().get(KEEP_ALIVE)?.to_str().ok()?;
    v.split(',').find_map(|p| {
        let (k, val) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| val.trim().parse::<u64>().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}
