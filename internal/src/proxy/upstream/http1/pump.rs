//! The request body on its way to an HTTP/1.1 node ([`Pump`]): frames polled from the body and
//! written as the connection takes them, `Content-Length` bytes as they come or chunked
//! ([`crate::proxy::http1_codec::chunked`]: a chunk per data frame, trailers with the last chunk;
//! RFC 9112 section 7.1), driven by whoever polls the exchange — [`super::conn::send`] until the
//! answer's head, then [`super::body::NodeBody`] while the answer streams.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::Body as _;
use tokio::io::AsyncWrite;

use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::http1_codec::chunked::{self, CHUNK_END, LAST_CHUNK};
use crate::tls::client::NodeStream;

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
/// them, encoded as [`super::request_head::encode_request`] chose.
pub(super) struct Pump {
    /// The body; `None` once it ended (or failed).
    body: Option<ProxyBody>,
    /// `Some(bytes left)` for a `Content-Length` body, `None` for a chunked one.
    left: Option<u64>,
    /// Encoded bytes not written yet (at most a chunk head, its data and its end).
    out: Vec<Bytes>,
    /// Everything was written and flushed.
    done: bool,
    /// The body or a write failed: nothing more is written.
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
            failed: false,
        }
    }

    /// True once the whole body was written and flushed.
    pub(super) fn is_done(&self) -> bool {
        self.done
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
            Poll::Ready(Err(_)) => {
                self.failed = true;
                self.body = None;
                self.out.clear();
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
