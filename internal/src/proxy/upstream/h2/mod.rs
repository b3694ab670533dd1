//! Upstream HTTP/2 for `protocol = "h2c"` and `protocol = "h2"` (TLS, ALPN `h2`) clusters (SPEC
//! sections 5 and 10): one multiplexed connection per node, shared by all of its requests, on the
//! `h2` crate directly (each request's stream is sent by the request's own task,
//! [`self::stream`]).
//!
//! Owns the per-node connection slot. Requests that find no usable connection join one shared
//! dial instead of each opening their own (a burst of N requests to a fresh node opens one
//! connection, not N; an unreachable node costs one connect timeout, not N in a row). A connection
//! that received GOAWAY takes no new streams: it is replaced, and only the connection that failed
//! is dropped from the slot (a newer one another request opened meanwhile stays). Streams the node
//! declared unprocessed come back to the caller as [`SendError::Sent`] with an error that
//! [`super::request::is_unprocessed`] recognises, for replay (CASE-09).
//!
//! Spawns one task per connection, driving it until it closes (after GOAWAY once its streams are
//! done, or when the last handle is dropped) and sending a keepalive PING every
//! [`KEEPALIVE_INTERVAL`] (no PONG within [`KEEPALIVE_TIMEOUT`] closes it). Never holds its mutex
//! across an `.await`.

pub(crate) mod stream;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{FutureExt, Shared};
use http::Request;

use self::stream::{NodeH2Body, StreamError};
use super::request::{is_unprocessed, SendError};
use crate::proxy::body::ProxyBody;
use crate::registry::{Node, NodeId};
use crate::tls::client::{self as tls, Alpn, ClusterTls};

/// Interval of h2 PINGs on an upstream connection, so a dead node is noticed on an idle one.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a keepalive PING may wait for its PONG before the connection is given up (hyper's
/// client default, kept from when hyper drove these connections).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Receive windows the gateway advertises to a node, per stream and per connection (hyper's
/// client defaults, 2 MiB and 5 MiB: a node streams an answer without waiting for WINDOW_UPDATEs).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONN_WINDOW: u32 = 5 * 1024 * 1024;
/// Body bytes buffered per stream beyond what the node's window takes (hyper's client default).
const MAX_SEND_BUFFER: usize = 1024 * 1024;
/// Streams the gateway opens before the node's SETTINGS say how many it takes (hyper's default).
const INITIAL_MAX_SEND_STREAMS: usize = 100;
/// Times a request moves to a newer connection after finding its connection closing (GOAWAY)
/// before it gives up with "not sent": GOAWAYs racing a burst need one or two, never more.
const MAX_STALE_RETRIES: usize = 3;

/// One node connection with an id, so a failure drops exactly this connection from the slot.
#[derive(Clone)]
struct Conn {
    id: u64,
    send: h2::client::SendRequest<Bytes>,
    /// Set by the connection's task when it ends.
    closed: Arc<AtomicBool>,
}

impl Conn {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

type DialFuture = Pin<Box<dyn Future<Output = Result<Conn, Arc<std::io::Error>>> + Send>>;
/// A connection attempt shared by every request waiting for the node's connection.
type Dial = Shared<DialFuture>;

#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    dial: Option<Dial>,
}

/// How many times `limits.h2_max_header_list` an upstream connection decodes before the `h2`
/// crate steps in. `h2` drops the fields of a trailer block past its own limit without a word, so
/// its limit sits above the gateway's: a head or trailers over the gateway's limit arrive whole and
/// fail their stream definitely ([`stream::HeaderListTooLarge`]); `h2` still ends a connection
/// whose header list passes four times its own limit (its abuse bound).
pub(crate) const DECODE_HEADER_LIST_FACTOR: u32 = 4;

/// Reset streams an upstream connection remembers: none. DATA a node sent before it saw the
/// gateway's cancel (CASE-25 C: a busy node may process frames 1.5 s late while many
/// server-streaming calls are cancelled on one long-lived connection) then finds no stream: h2
/// returns its flow-control credit and answers RST_STREAM(STREAM_CLOSED), which RFC 9113 section
/// 5.1 allows once the endpoint stops ignoring frames on a stream it reset, and which
/// `max_local_error_reset_streams(None)` never caps. Remembering the streams instead (h2 0.4.20)
/// charges each ignored small DATA frame to the connection's DATA-frame budget and never refunds
/// it, so a long-lived connection ended with GOAWAY(ENHANCE_YOUR_CALM, "too_many_data_frames")
/// after about 10,000 late frames (tests/scenarios/h2_upstream_cancel.rs).
const UPSTREAM_RESET_MEMORY: usize = 0;

/// The h2c connections of every node; see the module docs.
pub(crate) struct H2Pool {
    slots: Mutex<HashMap<NodeId, Slot>>,
    next_id: AtomicU64,
    /// `limits.h2_max_header_list`: the largest head or trailers a node's answer may carry.
    max_header_list: u32,
}

impl Default for H2Pool {
    fn default() -> Self {
        H2Pool::new(crate::config::DEFAULT_H2_MAX_HEADER_LIST)
    }
}

impl std::fmt::Debug for H2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pool").finish_non_exhaustive()
    }
}

impl H2Pool {
    /// An empty pool whose connections accept header lists (and trailers) of up to
    /// `max_header_list` bytes.
    pub(crate) fn new(max_header_list: u32) -> Self {
        H2Pool {
            slots: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            max_header_list,
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Slot>> {
        self.slots
            .lock()
            .expect("h2 slot mutex is never poisoned: no panics while held")
    }

    /// The node's live connection, if any (not closed, i.e. not past a GOAWAY).
    fn pooled(&self, node: &Node) -> Option<Conn> {
        self.slots()
            .get(&node.id)
            .and_then(|s| s.conn.clone())
            .filter(|c| !c.is_closed())
    }

    /// The node's live connection, or the result of the one shared dial to it.
    async fn connection(&self, node: &Node, connect_timeout: Duration) -> std::io::Result<Conn> {
        let dial = {
            let mut slots = self.slots();
            let slot = slots.entry(node.id.clone()).or_default();
            if let Some(c) = slot.conn.clone().filter(|c| !c.is_closed()) {
                return Ok(c);
            }
            match &slot.dial {
                Some(d) => d.clone(),
                None => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let fut: DialFuture = Box::pin(
                        dial(
                            node.addr.clone(),
                            node.id.clone(),
                            node.settings.tls.clone(),
                            connect_timeout,
                            id,
                            self.max_header_list,
                        )
                        .map(|r| r.map_err(Arc::new)),
                    );
                    let d = fut.shared();
                    slot.dial = Some(d.clone());
                    d
                }
            }
        };
        let result = dial.clone().await;
        {
            let mut slots = self.slots();
            let slot = slots.entry(node.id.clone()).or_default();
            // Only the first waiter back clears the dial (and installs its connection).
            if slot.dial.as_ref().is_some_and(|d| d.ptr_eq(&dial)) {
                slot.dial = None;
                if let Ok(c) = &result {
                    slot.conn = Some(c.clone());
                }
            }
        }
        // The error is shared by every waiter; each gets its own copy with the same text (a
        // handshake error keeps its type, so the 502 still names the TLS reason).
        result.map_err(|e| match tls::handshake_error(&e) {
            Some(hs) => std::io::Error::new(
                e.kind(),
                tls::HandshakeError {
                    node: hs.node.clone(),
                    reason: hs.reason.clone(),
                },
            ),
            None => std::io::Error::new(e.kind(), e.to_string()),
        })
    }

    /// Drops connection `id` of `node` from its slot, if it is still the pooled one.
    fn drop_conn(&self, node: &Node, id: u64) {
        if let Some(slot) = self.slots().get_mut(&node.id) {
            if slot.conn.as_ref().is_some_and(|c| c.id == id) {
                slot.conn = None;
            }
        }
    }

    /// Sends `req` to `node` over its shared h2c connection (opened within `connect_timeout` when
    /// there is none). A connection found closing before the request went out is replaced
    /// transparently.
    ///
    /// # Errors
    /// [`SendError::Connect`] (nothing sent; the body is handed back), [`SendError::NotSent`]
    /// (a fresh connection refused it unsent), or [`SendError::Sent`].
    pub(crate) async fn send(
        &self,
        node: &Node,
        connect_timeout: Duration,
        mut req: Request<ProxyBody>,
    ) -> Result<http::Response<NodeH2Body>, SendError> {
        let mut dialled: Option<u64> = None;
        let mut stale = 0;
        loop {
            let conn = match self.pooled(node) {
                Some(c) => c,
                None => match self.connection(node, connect_timeout).await {
                    Ok(c) => {
                        dialled = Some(c.id);
                        c
                    }
                    Err(e) => return Err(SendError::Connect(e, req.into_body())),
                },
            };
            let fresh = dialled == Some(conn.id);
            let mut send = conn.send.clone();
            match stream::send(&mut send, req, self.max_header_list).await {
                Ok(response) => return Ok(response),
                // The connection was closing (GOAWAY) before our stream went out: use another.
                Err(StreamError::NotSent(_, back)) if !fresh && stale < MAX_STALE_RETRIES => {
                    stale += 1;
                    self.drop_conn(node, conn.id);
                    req = back;
                }
                Err(StreamError::NotSent(e, back)) => {
                    self.drop_conn(node, conn.id);
                    return Err(SendError::NotSent(Box::new(e), back.into_body()));
                }
                Err(StreamError::Sent(err)) => {
                    if is_unprocessed(&*err) {
                        self.drop_conn(node, conn.id);
                    }
                    return Err(SendError::Sent(err));
                }
            }
        }
    }

    /// Forgets `node`'s connection (it was removed or ejected); open streams keep running on it.
    pub(crate) fn forget(&self, node: &str) {
        self.slots().remove(node);
    }
}

/// Opens connection `id` to node `node` at `addr` within `connect_timeout` (over TLS with ALPN
/// `h2` when `tls` is given) and spawns its driver task.
async fn dial(
    addr: String,
    node: NodeId,
    tls: Option<Arc<ClusterTls>>,
    connect_timeout: Duration,
    id: u64,
    max_header_list: u32,
) -> std::io::Result<Conn> {
    let tcp = tls::connect(&addr, &node, tls.as_deref(), Alpn::H2, connect_timeout).await?;
    let (send, mut conn) = h2::client::Builder::new()
        .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_header_list_size(max_header_list.saturating_mul(DECODE_HEADER_LIST_FACTOR))
        .enable_push(false)
        // The gateway's own long-lived connections must never trip a lifetime reset cap
        // (hyperium/h2 #856; CASE-25 C): nodes are trusted, cancels are the gateway's own.
        .max_local_error_reset_streams(None)
        .max_concurrent_reset_streams(UPSTREAM_RESET_MEMORY)
        .handshake::<_, Bytes>(tcp)
        .await
        .map_err(std::io::Error::other)?;
    let closed = Arc::new(AtomicBool::new(false));
    let ping = conn.ping_pong();
    let done = closed.clone();
    tokio::spawn(async move {
        drive(conn, ping, &addr).await;
        done.store(true, Ordering::Relaxed);
    });
    Ok(Conn { id, send, closed })
}

/// Drives connection `conn` (to `addr`) until it ends, with a keepalive PING every
/// [`KEEPALIVE_INTERVAL`]; a PING unanswered for [`KEEPALIVE_TIMEOUT`] drops the connection (its
/// streams fail, RFC 9113 section 6.7 leaves the timeout to the endpoint).
async fn drive<T>(
    mut conn: h2::client::Connection<T, Bytes>,
    mut ping: Option<h2::PingPong>,
    addr: &str,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut tick = tokio::time::interval(KEEPALIVE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    loop {
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!(addr, error = %e, "upstream h2 connection ended");
                }
                return;
            }
            _ = tick.tick() => {}
        }
        let Some(p) = ping.as_mut() else { continue };
        let pong = tokio::time::timeout(KEEPALIVE_TIMEOUT, p.ping(h2::Ping::opaque()));
        tokio::pin!(pong);
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!(addr, error = %e, "upstream h2 connection ended");
                }
                return;
            }
            r = &mut pong => match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(addr, error = %e, "upstream h2 keepalive PING failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(addr, "upstream h2 keepalive PING unanswered; closing");
                    return;
                }
            },
        }
    }
}
