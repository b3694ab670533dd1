//! One HTTP/1.1 connection to a node ([`NodeConn`]) and one exchange on it ([`send`]), driven in
//! the task of the request that uses it: no connection task, no channel between the request and
//! its connection (issue 16).
//!
//! An exchange:
//! 1. writes the request head ([`super::node_head::encode_request`]); a write failure here hands
//!    the request back unsent (the node cannot act on a partial head);
//! 2. writes the body ([`Pump`]: `Content-Length` bytes, or chunked with [`super::chunked`]) while
//!    it reads the answer, so a node may answer before the body is all sent (an early 413, a
//!    refusal of `Expect: 100-continue`) and a write error does not hide the answer that explains it;
//! 3. parses the answer's head ([`super::node_head::parse_response`]), skipping interim answers: a
//!    `100 Continue` opens the request's [`ContinueGate`] (RFC 9110 section 15.2.1), other 1xx are
//!    dropped, a `101` to a request without `Upgrade` is refused;
//! 4. returns the answer with a [`NodeBody`] that reads the rest off the connection and puts the
//!    connection back in the pool when the exchange ended cleanly.
//!
//! Failures are attributed as the retry rule needs them (SPEC section 4, [`SendError`]): the
//! request handed back unsent; a reused connection the node had closed (EOF or reset before any
//! byte of an answer: stale, CASE-21); or failed after sending.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;
use tokio::io::AsyncWrite;

use super::chunked::{self, ChunkedError, CHUNK_END, LAST_CHUNK};
use super::node_body::NodeBody;
use super::node_head::{self, HeadError, ResponseHead};
use super::pool::{self, Home};
use crate::proxy::expect::ContinueGate;
use crate::proxy::send_error::SendError;
use crate::proxy::{BoxError, ProxyBody};
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

/// Why an exchange with a node failed (the cause inside a [`SendError`]).
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
    /// [`crate::proxy::ProxyError::client_fault`]).
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

    async fn write_head(&mut self) -> io::Result<()> {
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

/// Sends `req` (origin-form target, HTTP/1.1) on `conn` and returns the node's answer, whose
/// body reads on from `conn` and returns it to `home` after a clean end (module docs). `reused`
/// says whether `conn` came from the pool (it may be stale).
///
/// # Errors
/// [`SendError::NotSent`] with `req` when its head could not be written;
/// [`SendError::Stale`] when a reused connection was closed or reset before any byte of an answer;
/// [`SendError::Sent`] otherwise (its [`NodeError`] says what failed).
pub async fn send(
    mut conn: NodeConn,
    reused: bool,
    req: Request<ProxyBody>,
    mut home: Home,
) -> Result<Response<NodeBody>, SendError> {
    let body = req.body();
    let (exact, empty) = (body.size_hint().exact(), body.is_end_stream());
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let length = node_head::encode_request(
        &mut conn.wbuf,
        req.method(),
        target,
        req.headers(),
        exact,
        empty,
    );
    if let Err(e) = conn.write_head().await {
        return Err(SendError::NotSent(Box::new(NodeError::Write(e)), req));
    }
    let (parts, body) = req.into_parts();
    let gate = parts.extensions.get::<ContinueGate>();
    let mut pump = Pump::new(body, length);
    let mut read_any = false;
    let head =
        poll_fn(|cx| poll_head(&mut conn, cx, &mut pump, &parts.method, gate, &mut read_any)).await;
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            let stale = reused && !read_any && is_closed(&e);
            let e: BoxError = Box::new(e);
            return Err(if stale {
                SendError::Stale(e)
            } else {
                SendError::Sent(e)
            });
        }
    };
    home.ttl = pool::ttl(home.ttl, &head.parts.headers);
    let body = NodeBody::new(conn, head.framing, head.reusable, pump, home);
    Ok(Response::from_parts(head.parts, body))
}

/// True if `e` is what a connection the node closed while it sat idle looks like: EOF, or a
/// reset or broken pipe, before any answer.
fn is_closed(e: &NodeError) -> bool {
    match e {
        NodeError::Closed => true,
        NodeError::Read(io) | NodeError::Write(io) => matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

/// Step 2 and 3 of the module docs: keeps the body flowing and reads until the final head.
fn poll_head(
    conn: &mut NodeConn,
    cx: &mut Context<'_>,
    pump: &mut Pump,
    method: &Method,
    gate: Option<&ContinueGate>,
    read_any: &mut bool,
) -> Poll<Result<ResponseHead, NodeError>> {
    if let Poll::Ready(Err(e)) = pump.poll(&mut conn.io, cx) {
        match e {
            PumpError::Body(e) => return Poll::Ready(Err(NodeError::Body(e))),
            PumpError::Length => return Poll::Ready(Err(NodeError::BodyLength)),
            // Kept: the node's answer may explain it (read on below).
            PumpError::Write(_) => {}
        }
    }
    loop {
        while !conn.rbuf.is_empty() {
            let Some(head) = node_head::parse_response(&mut conn.rbuf, method)? else {
                break;
            };
            match head.parts.status {
                StatusCode::CONTINUE => {
                    if let Some(g) = gate {
                        g.opened();
                    }
                }
                StatusCode::SWITCHING_PROTOCOLS => {
                    return Poll::Ready(Err(NodeError::UnexpectedUpgrade))
                }
                s if s.is_informational() => {}
                _ => return Poll::Ready(Ok(head)),
            }
        }
        match ready!(conn.poll_fill(cx)) {
            Ok(0) => {
                return Poll::Ready(Err(match pump.take_write_error() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Closed,
                }))
            }
            Ok(_) => *read_any = true,
            Err(e) => {
                return Poll::Ready(Err(match pump.take_write_error() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Read(e),
                }))
            }
        }
    }
}

/// Why the request body stopped flowing.
#[derive(Debug)]
pub(super) enum PumpError {
    /// The body itself failed.
    Body(BoxError),
    /// The body ended before, or ran past, its `Content-Length`.
    Length,
    /// Writing to the node failed.
    Write(io::Error),
}

/// The request body on its way to the node: frames polled and written as the connection takes
/// them, encoded as [`node_head::encode_request`] chose.
pub(super) struct Pump {
    /// The body; `None` once it ended (or failed).
    body: Option<ProxyBody>,
    /// `Some(bytes left)` for a `Content-Length` body, `None` for a chunked one.
    left: Option<u64>,
    /// Encoded bytes not written yet (at most a chunk head, its data and its end).
    out: Vec<Bytes>,
    /// Everything was written and flushed.
    done: bool,
    /// A write failed (nothing more is written).
    write_error: Option<io::Error>,
    failed: bool,
}

impl Pump {
    /// The pump of `body` framed by `length` (`Some(n)`: `n` bytes; `None`: chunked).
    pub(super) fn new(body: ProxyBody, length: Option<u64>) -> Self {
        let empty = length == Some(0);
        Pump {
            body: (!empty).then_some(body),
            left: length,
            out: Vec::new(),
            done: empty,
            write_error: None,
            failed: false,
        }
    }

    /// True once the whole body was written and flushed.
    pub(super) fn is_done(&self) -> bool {
        self.done
    }

    /// True once the body stopped flowing for good without ending (it failed or a write did).
    pub(super) fn is_failed(&self) -> bool {
        self.failed
    }

    fn take_write_error(&mut self) -> Option<io::Error> {
        self.write_error.take()
    }

    /// Writes what the body yields until it ends (`Ready(Ok)`, also on every later call), the
    /// connection or the body blocks (`Pending`), or something fails (`Ready(Err)`, once; later
    /// calls are `Pending` forever and write nothing).
    pub(super) fn poll(
        &mut self,
        io: &mut NodeStream,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), PumpError>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        if self.failed {
            return Poll::Pending;
        }
        let r = self.poll_inner(io, cx);
        match &r {
            Poll::Ready(Ok(())) => self.done = true,
            Poll::Ready(Err(e)) => {
                self.failed = true;
                self.body = None;
                self.out.clear();
                if let PumpError::Write(w) = e {
                    self.write_error = Some(io::Error::new(w.kind(), w.to_string()));
                }
            }
            Poll::Pending => {}
        }
        r
    }

    fn poll_inner(
        &mut self,
        io: &mut NodeStream,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), PumpError>> {
        loop {
            while !self.out.is_empty() {
                let mut bufs = [IoSlice::new(&[]); 3];
                for (s, b) in bufs.iter_mut().zip(&self.out) {
                    *s = IoSlice::new(b);
                }
                let k = self.out.len().min(3);
                let n = ready!(Pin::new(&mut *io).poll_write_vectored(cx, &bufs[..k]))
                    .map_err(PumpError::Write)?;
                if n == 0 {
                    return Poll::Ready(Err(PumpError::Write(io::ErrorKind::WriteZero.into())));
                }
                advance(&mut self.out, n);
            }
            ready!(Pin::new(&mut *io).poll_flush(cx)).map_err(PumpError::Write)?;
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match ready!(Pin::new(body).poll_frame(cx)) {
                None => {
                    self.body = None;
                    match self.left {
                        None => self.out.push(Bytes::from_static(LAST_CHUNK)),
                        Some(0) => {}
                        Some(_) => return Poll::Ready(Err(PumpError::Length)),
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(PumpError::Body(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => match &mut self.left {
                        None => {
                            let mut size = [0u8; 18];
                            let head = chunked::chunk_head(data.len(), &mut size);
                            self.out.push(Bytes::copy_from_slice(head));
                            self.out.push(data);
                            self.out.push(Bytes::from_static(CHUNK_END));
                        }
                        Some(left) => {
                            if data.len() as u64 > *left {
                                return Poll::Ready(Err(PumpError::Length));
                            }
                            *left -= data.len() as u64;
                            self.out.push(data);
                        }
                    },
                    Err(frame) => {
                        // Trailers go out with the last chunk; a sized body has no place for them.
                        if let (Ok(t), None) = (frame.into_trailers(), self.left) {
                            self.out.push(Bytes::from(chunked::last_chunk_with(&t)));
                            self.body = None;
                        }
                    }
                },
            }
        }
    }
}

/// Drops the first `n` bytes of `out`.
fn advance(out: &mut Vec<Bytes>, mut n: usize) {
    let mut whole = 0;
    for b in out.iter_mut() {
        if n >= b.len() {
            n -= b.len();
            whole += 1;
        } else {
            b.advance(n);
            break;
        }
    }
    out.drain(..whole);
}

#[cfg(test)]
#[path = "node_conn_tests.rs"]
mod tests;
