//! One HTTP/1.1 connection to a node as the exchange sees it ([`NodeConn`]: its stream, what was
//! read and not consumed, the buffer heads are encoded into) and how an exchange on it fails
//! ([`NodeError`]). The exchange itself is [`super::conn::send`].

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWrite;

use super::head::HeadError;
use crate::proxy::body::BoxError;
use crate::proxy::http1_codec::chunked::ChunkedError;
use crate::tls::client::NodeStream;

/// Read buffer growth step: at least this much room before each read.
const READ_CHUNK: usize = 8 * 1024;

/// An HTTP/1.1 connection to a node: its stream, the bytes read and not consumed, and the
/// buffer request heads are written from (kept across requests).
#[derive(Debug)]
pub struct NodeConn {
    io: NodeStream,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
}

/// Why an exchange with a node failed (the cause inside a
/// [`crate::proxy::upstream::request::SendError`]).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node closed the connection before its answer's head ended (hyper's wording).
    #[error("connection closed before message completed")]
    Closed,
    /// Writing the request failed.
    #[error("error writing the request to the node")]
    Write(#[source] io::Error),
    /// Reading the answer failed.
    #[error("error reading the answer from the node")]
    Read(#[source] io::Error),
    /// The request body failed (the client's fault: its cause says how, see
    /// [`crate::proxy::error::ProxyError::client_fault`]).
    #[error("error reading the request body")]
    Body(#[source] BoxError),
    /// The request body ended before, or ran past, its `Content-Length`.
    #[error("request body length does not match its Content-Length")]
    BodyLength,
    /// The answer's head is refused.
    #[error(transparent)]
    Head(#[from] HeadError),
    /// A `101 Switching Protocols` to a request that asked for no upgrade.
    #[error("unexpected 101 Switching Protocols from the node")]
    UnexpectedUpgrade,
    /// A `101 Switching Protocols` to a protocol the request did not offer (RFC 9110 section 7.8).
    #[error("101 Switching Protocols to a protocol the client did not offer")]
    UpgradeNotOffered,
    /// The answer's chunked body is malformed.
    #[error("malformed chunked body from the node: {0}")]
    Chunked(ChunkedError),
    /// The connection closed before the answer's body ended.
    #[error("connection closed before the answer's body ended")]
    BodyCut,
}

impl NodeConn {
    /// A connection over a freshly connected `io`.
    pub fn new(io: NodeStream) -> Self {
        NodeConn {
            io,
            rbuf: BytesMut::new(),
            wbuf: Vec::with_capacity(512),
        }
    }

    /// The stream and the bytes read off it and not consumed (an upgraded connection handed on):
    /// copied, so the read buffer's whole block does not live on with a long-lived socket.
    pub(super) fn into_parts(self) -> (NodeStream, Bytes) {
        (self.io, Bytes::copy_from_slice(&self.rbuf))
    }

    /// True if no byte read off the connection waits to be consumed.
    pub(super) fn rbuf_is_empty(&self) -> bool {
        self.rbuf.is_empty()
    }

    /// The stream itself (the pool's liveness check).
    pub(super) fn io_mut(&mut self) -> &mut NodeStream {
        &mut self.io
    }

    /// The bytes read and not consumed.
    pub(super) fn rbuf(&mut self) -> &mut BytesMut {
        &mut self.rbuf
    }

    /// Reads more into the read buffer; `Ready(Ok(0))` at the node's end of stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
    }

    /// The buffer the next request head is encoded into.
    pub(super) fn wbuf(&mut self) -> &mut Vec<u8> {
        &mut self.wbuf
    }

    /// Writes the encoded head ([`NodeConn::wbuf`]) whole.
    ///
    /// # Errors
    /// The write error (`WriteZero` if the stream takes nothing).
    pub(super) async fn write_head(&mut self) -> io::Result<()> {
        let mut at = 0;
        while at < self.wbuf.len() {
            let n = poll_fn(|cx| Pin::new(&mut self.io).poll_write(cx, &self.wbuf[at..])).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            at += n;
        }
        Ok(())
    }
}
