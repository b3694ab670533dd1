//! Idle HTTP/1.1 connections to nodes, per node ([`Pool`]): a connection goes back when its
//! exchange ended cleanly ([`super::body::NodeBody`] returns it itself, in the task that read
//! the answer's end) and is taken for the next request to that node.
//!
//! - A connection expires after its time to live: `upstream_idle_timeout`, capped by the node's
//!   advertised `Keep-Alive: timeout=N` less [`KEEPALIVE_MARGIN`] (CASE-21), so the gateway never
//!   reuses a connection the node is about to close.
//! - Before reuse a connection is checked without blocking: a node that closed it (EOF), reset it
//!   or sent bytes nobody asked for makes it unusable, and it is dropped.
//! - At most [`MAX_IDLE_PER_NODE`] are kept per node; the newest is taken first (its node-side
//!   idle timer has run the least).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fnv::FnvHashMap;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Instant;

use super::io::NodeConn;

/// Idle HTTP/1.1 connections kept per node; more are closed when returned.
pub const MAX_IDLE_PER_NODE: usize = 256;
/// Margin subtracted from a node's advertised keep-alive timeout, so we never race its close.
pub const KEEPALIVE_MARGIN: Duration = Duration::from_millis(500);

struct Idle {
    conn: NodeConn,
    expires: Instant,
}

/// The idle connections of every node, keyed by node id; shared by the requests of one worker.
/// FNV hashes the ids: they come from the config or discovery, never from a client, so a keyed
/// hash's defence against chosen collisions buys nothing here (SipHash was ~320 instructions of
/// a proxied request's two lookups).
#[derive(Default)]
pub struct Pool {
    nodes: Mutex<FnvHashMap<Arc<str>, Vec<Idle>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}

/// Where a connection goes back after its exchange: the pool, the node and the connection's time
/// to live from the moment it is returned.
#[derive(Debug, Clone)]
pub struct Home {
    /// The pool.
    pub pool: Arc<Pool>,
    /// The node's id.
    pub node: Arc<str>,
    /// How long the connection may stay idle.
    pub ttl: Duration,
}

impl Pool {
    fn nodes(&self) -> MutexGuard<'_, FnvHashMap<Arc<str>, Vec<Idle>>> {
        self.nodes
            .lock()
            .expect("pool mutex is never poisoned: no panics while held")
    }

    /// Takes the newest usable idle connection of `node` (expired or unusable ones are dropped on
    /// the way), or `None`.
    pub fn checkout(&self, node: &str) -> Option<NodeConn> {
        let now = Instant::now();
        let mut nodes = self.nodes();
        let idle = nodes.get_mut(node)?;
        while let Some(mut i) = idle.pop() {
            if i.expires > now && still_open(&mut i.conn) {
                return Some(i.conn);
            }
        }
        None
    }

    /// Keeps `conn` for `home.node` for `home.ttl` (a zero ttl, or a full pool, closes it).
    pub fn put(&self, home: &Home, conn: NodeConn) {
        if home.ttl.is_zero() {
            return;
        }
        let mut nodes = self.nodes();
        // Looked up first: the entry API would clone the id's `Arc` on every return.
        let idle = match nodes.get_mut(&*home.node) {
            Some(idle) => idle,
            None => nodes.entry(home.node.clone()).or_default(),
        };
        if idle.len() < MAX_IDLE_PER_NODE {
            idle.push(Idle {
                conn,
                expires: Instant::now() + home.ttl,
            });
        }
    }

    /// Drops the idle connections of `node` (one of them turned out stale: its siblings, opened
    /// around the same time, likely are too).
    pub fn drop_idle(&self, node: &str) {
        if let Some(idle) = self.nodes().get_mut(node) {
            idle.clear();
        }
    }

    /// Drops every idle connection of `node` (it was removed or ejected).
    pub fn forget(&self, node: &str) {
        self.nodes().remove(node);
    }
}

/// The time to live of a connection returned after an answer: `idle_timeout`, capped by the
/// node's `Keep-Alive: timeout=N` (`keep_alive`, [`super::head::keepalive_timeout`]) less
/// [`KEEPALIVE_MARGIN`].
pub fn ttl(idle_timeout: Duration, keep_alive: Option<Duration>) -> Duration {
    match keep_alive {
        Some(k) => idle_timeout.min(k.saturating_sub(KEEPALIVE_MARGIN)),
        None => idle_timeout,
    }
}

/// True if an idle connection can carry a request: a read that does not block finds nothing (no
/// EOF, no reset, no unasked bytes).
fn still_open(conn: &mut NodeConn) -> bool {
    if !conn.rbuf_is_empty() {
        return false;
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    matches!(
        Pin::new(conn.io_mut()).poll_read(&mut cx, &mut buf),
        Poll::Pending
    )
}
