//! Idle HTTP/1.1 keep-alive connections leaving this process in an upgrade (SPEC section 13).
//!
//! The upgrade opens the [`Mover`] once the new process said "ready", before the drain signal. A
//! cleartext HTTP/1.1 connection that sees the drain signal while the mover is open finishes the
//! request in flight (answered without `Connection: close`), stops reading once no complete head
//! is left in its buffer, and gives its socket and the bytes read past its last request
//! ([`MovedConn`]) to the mover instead of closing. The upgrade sends them to the new process,
//! which serves them from those bytes on. A connection the mover does not take is closed as on
//! any drain.

use std::net::SocketAddr;
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::mpsc;

/// One idle connection on its way to the new process.
#[derive(Debug)]
pub struct MovedConn {
    /// The client's socket (non-blocking, no longer registered with this process's runtime).
    pub socket: std::net::TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// Bytes read off the socket and not served: the start of the next request head, if any.
    pub buffered: Bytes,
}

/// Where idle connections go in an upgrade; closed (taking none) but between the new process's
/// "ready" and the end of this process's drain.
#[derive(Debug, Default)]
pub struct Mover {
    tx: Mutex<Option<mpsc::UnboundedSender<MovedConn>>>,
}

impl Mover {
    fn tx(&self) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<MovedConn>>> {
        // A poisoned lock only means a panic elsewhere; the sender inside stays valid.
        self.tx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the mover; returns where the connections given from now on arrive.
    pub fn open(&self) -> mpsc::UnboundedReceiver<MovedConn> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.tx() = Some(tx);
        rx
    }

    /// Closes the mover: the receiver ends after the connections already given.
    pub fn close(&self) {
        *self.tx() = None;
    }

    /// True while connections are taken.
    pub fn is_open(&self) -> bool {
        self.tx().as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Gives `conn` to the upgrade.
    ///
    /// # Errors
    /// `conn` back when the mover is closed (the caller closes it).
    pub fn give(&self, conn: MovedConn) -> Result<(), MovedConn> {
        match self.tx().as_ref() {
            Some(tx) => tx.send(conn).map_err(|e| e.0),
            None => Err(conn),
        }
    }
}
