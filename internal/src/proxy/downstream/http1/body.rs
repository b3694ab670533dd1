//! The downstream connection's socket as its driver and its current request's body share it, and
//! that body ([`ConnBody`]): the request body read straight off the connection as the forwarder
//! polls it, `Content-Length` bytes or chunked ([`crate::proxy::http1_codec::chunked`]), in
//! whatever task polls it.
//!
//! `Expect: 100-continue` (RFC 9110 section 10.1.1): the interim `100 Continue` is written when
//! the body is first polled, as hyper's server did, so [`crate::proxy::expect::ContinueGate`] keeps
//! deciding when that is; a body dropped unpolled never sends it, and the connection then closes
//! after the answer (the client may never send the body).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use super::request::Framing;
use super::response::CONTINUE;
use crate::proxy::body::{BoxError, FramePoll};
use crate::proxy::client_body::ClientBodyError;
use crate::proxy::http1_codec::chunked::{Decoded, Decoder};

/// Read buffer growth step: at least this much room before each read.
pub(super) const READ_CHUNK: usize = 8 * 1024;

/// Where the current request's body stands.
#[derive(Debug)]
pub(super) enum BodyRead {
    /// `Content-Length` bytes left (0: the body ended, or there was none).
    Length(u64),
    /// A chunked body in progress.
    Chunked(Box<Decoder>),
    /// The body broke (malformed, or the client went away): the connection cannot be reused.
    Failed,
}

impl BodyRead {
    pub(super) fn new(f: Framing) -> Self {
        match f {
            Framing::Length(n) => BodyRead::Length(n),
            Framing::Chunked => BodyRead::Chunked(Box::default()),
        }
    }

    /// True once the body was read to its end.
    pub(super) fn is_done(&self) -> bool {
        match self {
            BodyRead::Length(n) => *n == 0,
            BodyRead::Chunked(d) => d.is_done(),
            BodyRead::Failed => false,
        }
    }
}

/// The connection's socket and read buffer, and its current request's body state.
#[derive(Debug)]
pub(super) struct Io<I> {
    pub(super) io: I,
    /// Bytes read and not consumed yet (the rest of a head, a body, pipelined requests).
    pub(super) rbuf: BytesMut,
    pub(super) body: BodyRead,
    /// `100 Continue` bytes still to write before the body is read (`None`: not wanted).
    pub(super) continue_left: Option<usize>,
    /// The current request's number on the connection (a body handle of an earlier one reads nothing).
    pub(super) request: u64,
}

impl<I: AsyncRead + Unpin> Io<I> {
    /// Reads more into `rbuf`; `Ready(Ok(0))` at the client's end of stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
    }
}

/// The shared socket (see the module docs); locked for one poll at a time, never across an await.
pub(super) type Shared<I> = Arc<Mutex<Io<I>>>;

/// Locks `s` (a poisoned lock means a poll panicked: the connection is unusable anyway).
pub(super) fn lock<I>(s: &Mutex<Io<I>>) -> MutexGuard<'_, Io<I>> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The body of the request being served, read from the connection; see the module docs.
pub(super) struct ConnBody<I> {
    shared: Shared<I>,
    /// Known length left, for the size hint (`None`: chunked).
    left: Option<u64>,
    ended: bool,
    /// The request this body belongs to ([`Io::request`]).
    request: u64,
}

impl<I> ConnBody<I> {
    /// The body of request number `request`, whose state `shared` holds; `len` its
    /// `Content-Length` (if any).
    pub(super) fn new(shared: Shared<I>, len: Option<u64>, request: u64) -> Self {
        ConnBody {
            shared,
            left: len,
            ended: false,
            request,
        }
    }
}

fn broken(why: impl Into<String>) -> BoxError {
    Box::new(ClientBodyError::Broken(why.into()))
}

impl<I: AsyncRead + AsyncWrite + Unpin> ConnBody<I> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> FramePoll {
        let mut guard = lock(&self.shared);
        let io = &mut *guard;
        if io.request != self.request {
            return Poll::Ready(None);
        }
        while let Some(at) = io.continue_left {
            let n = ready!(Pin::new(&mut io.io).poll_write(cx, &CONTINUE[at..]))
                .map_err(|e| broken(format!("writing 100 Continue: {e}")))?;
            if n == 0 {
                return Poll::Ready(Some(Err(broken("writing 100 Continue: closed"))));
            }
            io.continue_left = (at + n < CONTINUE.len()).then_some(at + n);
            if io.continue_left.is_none() {
                ready!(Pin::new(&mut io.io).poll_flush(cx))
                    .map_err(|e| broken(format!("writing 100 Continue: {e}")))?;
            }
        }
        loop {
            match &mut io.body {
                BodyRead::Failed => return Poll::Ready(Some(Err(broken("body already failed")))),
                BodyRead::Length(0) => return Poll::Ready(None),
                BodyRead::Length(left) if !io.rbuf.is_empty() => {
                    let n = usize::try_from(*left).map_or(io.rbuf.len(), |l| l.min(io.rbuf.len()));
                    *left -= n as u64;
                    self.left = Some(*left);
                    return Poll::Ready(Some(Ok(Frame::data(io.rbuf.split_to(n).freeze()))));
                }
                BodyRead::Length(_) => {}
                BodyRead::Chunked(d) => match d.decode(&mut io.rbuf) {
                    Ok(Decoded::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                    Ok(Decoded::Trailers(t)) => return Poll::Ready(Some(Ok(Frame::trailers(t)))),
                    Ok(Decoded::End) => return Poll::Ready(None),
                    Ok(Decoded::NeedMore) => {}
                    Err(e) => {
                        io.body = BodyRead::Failed;
                        return Poll::Ready(Some(Err(broken(e.to_string()))));
                    }
                },
            }
            match ready!(io.poll_fill(cx)) {
                Ok(0) => {
                    io.body = BodyRead::Failed;
                    return Poll::Ready(Some(Err(broken(
                        "client closed the connection before the body ended",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    io.body = BodyRead::Failed;
                    return Poll::Ready(Some(Err(broken(format!("reading the body: {e}")))));
                }
            }
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Body for ConnBody<I> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        let r = this.poll_next(cx);
        if matches!(r, Poll::Ready(None)) {
            this.ended = true;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.left == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
