//! A downstream HTTP/1.1 connection handed on after the gateway accepted its upgrade (RFC 9110
//! section 7.8, RFC 6455 section 4): the connection driver ([`super::conn`]) writes the `101` head
//! itself, then gives the raw socket, with the bytes it read past the upgrade head put back in
//! front, to whoever holds the request's [`OnUpgrade`] (the WebSocket relay). No hyper server and
//! no `hyper::upgrade::Upgraded` sit between the client's socket and the relay.
//!
//! The socket is held by value (a cleartext one inline, a TLS one boxed: its state is large), so
//! an idle relayed socket pays for no type-erased box or second read buffer (memory per
//! idle WebSocket). Spawns nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::server::TlsStream;

use super::rewind::Rewind;

/// A downstream socket whose upgrade was accepted, read from the bytes already read past its
/// upgrade head (delivered first) on.
#[derive(Debug)]
pub enum Upgraded {
    /// A cleartext connection.
    Plain(Rewind<TcpStream>),
    /// A TLS connection (boxed: cleartext sockets should not pay for its size).
    Tls(Box<Rewind<TlsStream<TcpStream>>>),
}

/// A downstream byte stream the connection driver can hand on after an upgrade: the listeners'
/// two socket types.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// True if written bytes may wait in the stream until it is flushed (TLS records); false
    /// for a `TcpStream`, whose `poll_flush` does nothing (tokio's docs), so the driver skips it.
    const BUFFERS_WRITES: bool;

    /// The socket as an [`Upgraded`], with `early` (bytes read off it and not served) in front.
    fn upgraded(self, early: Bytes) -> Upgraded;

    /// True if an idle connection on this socket can move to a new process in an upgrade (SPEC
    /// section 13): cleartext only, a TLS session's state stays in this process.
    const MOVABLE: bool;

    /// The socket as a std one, taken off this process's runtime, for an upgrade's handover.
    ///
    /// # Errors
    /// `Unsupported` for a socket that is not [`Socket::MOVABLE`]; the runtime's error.
    fn into_std(self) -> std::io::Result<std::net::TcpStream>;
}

impl Socket for TcpStream {
    const BUFFERS_WRITES: bool = false;
    const MOVABLE: bool = true;

    fn into_std(self) -> std::io::Result<std::net::TcpStream> {
        TcpStream::into_std(self)
    }

    fn upgraded(self, early: Bytes) -> Upgraded {
        Upgraded::Plain(Rewind::new(early, self))
    }
}

impl Socket for TlsStream<TcpStream> {
    const BUFFERS_WRITES: bool = true;
    const MOVABLE: bool = false;

    fn into_std(self) -> std::io::Result<std::net::TcpStream> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    fn upgraded(self, early: Bytes) -> Upgraded {
        Upgraded::Tls(Box::new(Rewind::new(early, self)))
    }
}

/// The handing-on half: [`Handoff::give`] once the `101` head went out.
#[derive(Debug)]
pub(crate) struct Handoff(oneshot::Sender<Upgraded>);

/// The request's upgrade: resolves to the socket once the connection driver wrote the `101`, or
/// to `Err` if it never will (the answer was not a `101`, or the connection broke first).
#[derive(Debug)]
pub struct OnUpgrade(oneshot::Receiver<Upgraded>);

/// A pending upgrade: the driver keeps the [`Handoff`], the request's handler gets the
/// [`OnUpgrade`].
pub(crate) fn pending() -> (Handoff, OnUpgrade) {
    let (tx, rx) = oneshot::channel();
    (Handoff(tx), OnUpgrade(rx))
}

impl Handoff {
    /// Gives `socket` to the [`OnUpgrade`]'s holder; hands it back if that holder is gone.
    ///
    /// # Errors
    /// The socket itself, when nobody waits for it (the caller closes it).
    pub(crate) fn give(self, socket: Upgraded) -> Result<(), Upgraded> {
        self.0.send(socket)
    }
}

/// The upgrade did not happen (no `101` was written, or the connection broke before).
#[derive(Debug, thiserror::Error)]
#[error("the downstream connection was not upgraded")]
pub struct NotUpgraded;

impl Future for OnUpgrade {
    type Output = Result<Upgraded, NotUpgraded>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map_err(|_| NotUpgraded)
    }
}

/// Implements tokio's `AsyncRead` and `AsyncWrite` for an enum each of whose `variants` holds one
/// stream, by handing every call to that stream (vectored writes included). Used for
/// [`Upgraded`] and the WebSocket relay's `Stream`.
macro_rules! delegate_io {
    ($ty:ty { $($variant:path),+ $(,)? }) => {
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($variant(s) => std::pin::Pin::new(s).poll_read(cx, buf),)+
                }
            }
        }

        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($variant(s) => std::pin::Pin::new(s).poll_write(cx, buf),)+
                }
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($variant(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),)+
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $($variant(s) => s.is_write_vectored(),)+
                }
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($variant(s) => std::pin::Pin::new(s).poll_flush(cx),)+
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($variant(s) => std::pin::Pin::new(s).poll_shutdown(cx),)+
                }
            }
        }
    };
}
pub(crate) use delegate_io;

delegate_io!(Upgraded {
    Upgraded::Plain,
    Upgraded::Tls
});

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_handed_on_socket_reads_its_early_bytes_first() {
        let (mut client, server) = crate::proxy::loopback::tcp_pair().await;
        let (handoff, on) = pending();
        handoff
            .give(server.upgraded(Bytes::from_static(b"early ")))
            .expect("waited for");
        let mut s = on.await.expect("upgraded");
        client.write_all(b"late").await.expect("write");
        drop(client);
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"early late");
    }

    #[tokio::test]
    async fn a_dropped_handoff_is_not_upgraded() {
        let (handoff, on) = pending();
        drop(handoff);
        assert!(on.await.is_err());
    }
}
