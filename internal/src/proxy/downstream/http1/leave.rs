//! The end of an idle HTTP/1.1 connection on the drain signal: closed, or, in an upgrade, moved to
//! the new process ([`crate::proxy::moving`], SPEC section 13).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::AsyncWrite;

use super::body::{lock, Io, Shared};
use super::upgrade::Socket;
use crate::proxy::moving::{MovedConn, Mover};

/// True if a connection on `I` moves instead of closing when idle on the drain signal: the
/// upgrade's mover takes connections and the socket is cleartext.
pub(super) fn moves<I: Socket>(mover: &Mover) -> bool {
    I::MOVABLE && mover.is_open()
}

/// Ends an idle connection (no complete head left in its buffer, no body reader holding it): gives
/// its socket and unread bytes to `mover` when it is `Some`, else closes it. A connection the
/// mover does not take is closed.
pub(super) async fn leave<I: Socket>(shared: Shared<I>, mover: Option<&Mover>, peer: SocketAddr) {
    let Some(mover) = mover else {
        close(&shared).await;
        return;
    };
    let Io { io, rbuf, .. } = match Arc::try_unwrap(shared) {
        Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()),
        Err(shared) => {
            close(&shared).await;
            return;
        }
    };
    // Copied: the read buffer (8 KiB or more) must not wait in the queue; usually it is empty.
    let buffered = Bytes::copy_from_slice(&rbuf);
    drop(rbuf);
    let socket = match io.into_std() {
        Ok(s) => s,
        Err(e) => {
            // The socket was taken off the runtime and dropped: closed.
            tracing::debug!(peer = %peer, error = %e, "idle connection cannot move; closed");
            return;
        }
    };
    if let Err(c) = mover.give(MovedConn {
        socket,
        peer,
        buffered,
    }) {
        let _ = c.socket.shutdown(std::net::Shutdown::Write);
    }
}

/// Ends the connection cleanly: flush, then the write side's shutdown (FIN, or TLS close_notify).
pub(super) async fn close<I: AsyncWrite + Unpin>(shared: &Shared<I>) {
    let _ = poll_fn(|cx| Pin::new(&mut lock(shared).io).poll_shutdown(cx)).await;
}
