//! The sockets of the gateway ([`listen`] for one, [`listen_group`] for one per worker) and the
//! process-wide connection limit of a listener kind ([`ConnLimit`], SPEC section 4).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::drain;

/// Accept queue length of the listeners (capped by the kernel's `net.core.somaxconn`). Rust's
/// default of 128 drops the SYNs of a burst of clients (e.g. a fleet of WebSockets reconnecting
/// after a gateway restart), each dropped SYN costing the client a 1 s retransmit (RFC 6298
/// section 2: initial RTO of 1 s).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener on `addr` with `SO_REUSEADDR` and [`LISTEN_BACKLOG`].
///
/// # Errors
/// The socket, bind or listen call's I/O error (e.g. the address is in use).
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Binds `n` sockets listening on `addr`, one per worker (`--workers`, SPEC section 2), returned
/// unregistered (each worker registers its own with its runtime). One worker gets a socket as
/// [`listen`] binds it; more get an `SO_REUSEPORT` group over which the kernel spreads incoming
/// connections by a hash of their addresses (Linux `socket(7)`). Port 0 is resolved once and the
/// whole group joins that port. Because a group admits any socket of the same user that sets the
/// option, the address is first bound without it: a port another process listens on is refused as
/// in use, as with one worker, instead of being shared.
///
/// # Errors
/// The socket, bind or listen call's I/O error (e.g. the address is in use).
pub fn listen_group(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    let socket = || {
        if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
    };
    if n <= 1 {
        return Ok(vec![listen(addr)?.into_std()?]);
    }
    let probe = socket()?;
    probe.set_reuseaddr(true)?;
    probe.bind(addr)?;
    let addr = probe.local_addr()?;
    drop(probe);
    (0..n)
        .map(|_| {
            let s = socket()?;
            s.set_reuseaddr(true)?;
            s.set_reuseport(true)?;
            s.bind(addr)?;
            s.listen(LISTEN_BACKLOG)?.into_std()
        })
        .collect()
}

/// One listener kind's `[limits] max_connections` (SPEC section 4), shared by the accept loops of
/// every worker so the limit holds for the process, not per worker.
pub(super) struct ConnLimit {
    permits: Arc<Semaphore>,
    max: usize,
    /// True once "connection limit reached" was logged, until a permit is free again: the warning
    /// is logged once each time the limit is reached, whichever worker reaches it.
    warned: AtomicBool,
}

impl ConnLimit {
    /// A limit of `max` connections open at once.
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(ConnLimit {
            permits: Arc::new(Semaphore::new(max)),
            max,
            warned: AtomicBool::new(false),
        })
    }

    /// The permits themselves, for the TLS accept loop (which logs no warning of its own).
    pub(super) fn permits(&self) -> Arc<Semaphore> {
        self.permits.clone()
    }

    /// A permit for a connection just accepted: at once when one is free, otherwise once a
    /// connection closes; the accepted connection waits unserved meanwhile, like those behind it in
    /// the accept queue. Taking the permit first and accepting after would leave a permit idle in
    /// each worker blocked in `accept`, letting one worker's queued connections wait while the
    /// limit has room. `None` when `watch` fires while waiting.
    pub(super) async fn take(&self, watch: &mut drain::Watch) -> Option<OwnedSemaphorePermit> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::select! {
                _ = watch.signaled() => return None,
                p = self.permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            },
        };
        if self.permits.available_permits() == 0 {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max_connections = self.max,
                    "connection limit reached; new connections wait"
                );
            }
        } else if self.warned.load(Ordering::Relaxed) {
            self.warned.store(false, Ordering::Relaxed);
        }
        Some(permit)
    }
}
