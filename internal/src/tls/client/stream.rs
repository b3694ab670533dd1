//! The byte stream of one node connection ([`NodeStream`]: cleartext or TLS) and the wait for a
//! TLS 1.3 node's verdict on the client certificate ([`client_auth_verdict`]). Spawns nothing.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A connection to a node: cleartext or TLS.
#[derive(Debug)]
pub enum NodeStream {
    /// Cleartext TCP.
    Plain(TcpStream),
    /// TLS over TCP (boxed: the TLS state is large, cleartext connections should not pay for it).
    Tls(Box<TlsConn>),
}

/// A TLS connection and the plaintext already read from it while waiting for the node's verdict
/// on the client certificate (delivered before anything else).
#[derive(Debug)]
pub struct TlsConn {
    pub(super) stream: TlsStream<TcpStream>,
    pub(super) prefix: Vec<u8>,
}

impl NodeStream {
    /// The ALPN protocol the node selected, if any.
    pub fn alpn(&self) -> Option<&[u8]> {
        match self {
            NodeStream::Plain(_) => None,
            NodeStream::Tls(t) => t.stream.get_ref().1.alpn_protocol(),
        }
    }
}

/// After a TLS 1.3 handshake in which the node asked for a client certificate: waits until
/// `deadline` for a session ticket or data (accepted; data is kept in the prefix), or an alert
/// or close (rejected: the error).
pub(super) async fn client_auth_verdict(
    conn: &mut TlsConn,
    deadline: tokio::time::Instant,
) -> io::Result<()> {
    let mut scratch = [0u8; 4096];
    let read = std::future::poll_fn(|cx| {
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut conn.stream).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the node closed the connection after the handshake (client certificate refused?)",
            ))),
            Poll::Ready(Ok(())) => {
                conn.prefix.extend_from_slice(buf.filled());
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if conn.stream.get_ref().1.tls13_tickets_received() > 0 => {
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    });
    // No verdict in time: the node sends no tickets; carry on as accepted.
    tokio::time::timeout_at(deadline, read)
        .await
        .unwrap_or(Ok(()))
}

impl AsyncRead for NodeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            NodeStream::Tls(t) => {
                if !t.prefix.is_empty() {
                    let n = t.prefix.len().min(buf.remaining());
                    buf.put_slice(&t.prefix[..n]);
                    t.prefix.drain(..n);
                    return Poll::Ready(Ok(()));
                }
                Pin::new(&mut t.stream).poll_read(cx, buf)
            }
        }
    }
}

impl AsyncWrite for NodeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            NodeStream::Tls(t) => Pin::new(&mut t.stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            NodeStream::Tls(t) => Pin::new(&mut t.stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            NodeStream::Plain(s) => s.is_write_vectored(),
            NodeStream::Tls(t) => t.stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_flush(cx),
            NodeStream::Tls(t) => Pin::new(&mut t.stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NodeStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            NodeStream::Tls(t) => Pin::new(&mut t.stream).poll_shutdown(cx),
        }
    }
}
