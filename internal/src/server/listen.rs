//! The sockets of the gateway ([`listen`] for one, [`listen_group`] for one per worker), the
//! process-wide connection limit of a listener kind ([`ConnLimit`], SPEC section 4), and the accept
//! loop every listener runs ([`accept_each`]).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
    /// Whether reaching the limit is logged (the cleartext listeners' limit; the TLS listeners'
    /// is not).
    warns: bool,
    /// True once "connection limit reached" was logged, until a permit is free again: the warning
    /// is logged once each time the limit is reached, whichever worker reaches it.
    warned: AtomicBool,
}

impl ConnLimit {
    /// A limit of `max` connections open at once; reaching it is logged when `warns`.
    pub(super) fn new(max: usize, warns: bool) -> Arc<Self> {
        Arc::new(ConnLimit {
            permits: Arc::new(Semaphore::new(max)),
            max,
            warns,
            warned: AtomicBool::new(false),
        })
    }

    /// A permit for a connection just accepted: at once when one is free, otherwise once a
    /// connection closes; the accepted connection waits unserved meanwhile, like those behind it in
    /// the accept queue. Taking the permit first and accepting after would leave a permit idle in
    /// each worker blocked in `accept`, letting one worker's queued connections wait while the
    /// limit has room. `None` when `stop` fires while waiting.
    pub(super) async fn take(&self, stop: &mut impl Stop) -> Option<OwnedSemaphorePermit> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => tokio::select! {
                () = stop.stopped() => return None,
                p = self.permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            },
        };
        if !self.warns {
            return Some(permit);
        }
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

/// What ends an accept loop: the drain signal (data-plane listeners) or a cancellation (admin and
/// health listeners).
pub(super) trait Stop: Send {
    /// Resolves once the loop must stop accepting (at once if it already must).
    fn stopped(&mut self) -> impl Future<Output = ()> + Send;
}

impl Stop for drain::Watch {
    fn stopped(&mut self) -> impl Future<Output = ()> + Send {
        self.signaled()
    }
}

impl Stop for CancellationToken {
    fn stopped(&mut self) -> impl Future<Output = ()> + Send {
        self.cancelled()
    }
}

/// How long an accept loop waits after a failed `accept` (e.g. out of file descriptors) before it
/// tries again, so that a lasting failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` until `stop` fires, and spawns for each the future `conn`
/// returns for it, its peer and its permit of `limit` (taken after the accept, waiting for one if
/// none is free, [`ConnLimit::take`]; `None` without a limit). A failed `accept` is logged as
/// `failed` and retried after [`ACCEPT_BACKOFF`]. Returns, with the listener closed, how many
/// connections were accepted and the tasks of those still open (the caller waits for or aborts
/// them).
pub(super) async fn accept_each<S, F, Fut>(
    listener: TcpListener,
    stop: &mut S,
    limit: Option<&ConnLimit>,
    failed: &'static str,
    mut conn: F,
) -> (u64, JoinSet<()>)
where
    S: Stop,
    F: FnMut(TcpStream, SocketAddr, Option<OwnedSemaphorePermit>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    let mut accepted: u64 = 0;
    loop {
        let (tcp, peer) = tokio::select! {
            () = stop.stopped() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "{failed}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let permit = match limit {
            Some(limit) => match limit.take(stop).await {
                Some(p) => Some(p),
                None => break,
            },
            None => None,
        };
        accepted += 1;
        conns.spawn(conn(tcp, peer, permit));
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    (accepted, conns)
}
