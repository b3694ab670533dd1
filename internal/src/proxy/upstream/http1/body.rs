//! A node's answer body read straight off its HTTP/1.1 connection ([`NodeBody`]), in whatever task
//! polls it (the downstream connection's own, for an HTTP/1.1 client): `Content-Length` bytes,
//! chunked ([`crate::proxy::http1_codec::chunked::Decoder`], trailers passed on), or up to the
//! node's close (RFC 9112 section 6.3).
//!
//! While the answer streams, the rest of the request body keeps flowing to the node (a node may
//! answer before it read the whole body, and some echo as they read). When the answer ends
//! cleanly — its framing complete, the request body all sent, the connection persistent and no
//! stray byte after the answer — the connection goes back to the pool ([`super::pool`]); any other
//! end closes it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::head::BodyFraming;
use super::io::{NodeConn, NodeError};
use super::pool::Home;
use super::pump::{Pump, PumpError};
use crate::proxy::body::{BoxError, FramePoll};
use crate::proxy::expect::ContinueError;
use crate::proxy::http1_codec::chunked::{Decoded, Decoder};

/// Where the answer body stands.
#[derive(Debug)]
enum Read {
    /// `Content-Length` bytes left.
    Length(u64),
    /// A chunked body in progress.
    Chunked(Box<Decoder>),
    /// Up to the node's close.
    Close,
    /// Ended (or failed): nothing more is read.
    Done,
}

/// What one look at the read buffer decided.
enum Step {
    /// The body ended.
    End,
    /// More bytes are needed.
    Fill,
    /// The body is malformed.
    Fail(NodeError),
}

/// The answer body of one exchange; see the module docs.
pub struct NodeBody {
    /// The connection; `None` once the body ended (returned to the pool, or closed).
    conn: Option<NodeConn>,
    read: Read,
    pump: Pump,
    /// The answer's head allows reuse (section 9.3, no framing conflict).
    reusable: bool,
    home: Home,
}

impl std::fmt::Debug for NodeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBody")
            .field("read", &self.read)
            .field("reusable", &self.reusable)
            .finish_non_exhaustive()
    }
}

impl NodeBody {
    /// The body framed by `framing` on `conn`, with the request's `pump`; `reusable` from the
    /// head. An answer that ends at its head returns `conn` to `home` at once (when the request
    /// body was all sent); one whose request body is still flowing then closes it instead.
    pub(super) fn new(
        conn: NodeConn,
        framing: BodyFraming,
        reusable: bool,
        pump: Pump,
        home: Home,
    ) -> Self {
        let read = match framing {
            BodyFraming::Length(n) => Read::Length(n),
            BodyFraming::Chunked => Read::Chunked(Box::default()),
            BodyFraming::Close => Read::Close,
        };
        let mut body = NodeBody {
            conn: Some(conn),
            read,
            pump,
            reusable,
            home,
        };
        if matches!(body.read, Read::Length(0)) {
            body.finish();
        }
        body
    }

    /// Ends the body: the connection goes back to the pool if the exchange ended cleanly, else
    /// it is closed.
    fn finish(&mut self) {
        self.read = Read::Done;
        if let Some(mut conn) = self.conn.take() {
            if self.reusable && self.pump.is_done() && conn.rbuf().is_empty() {
                self.home.pool.put(&self.home, conn);
            }
        }
    }

    fn fail(&mut self, e: NodeError) -> FramePoll {
        self.reusable = false;
        self.finish();
        Poll::Ready(Some(Err(Box::new(e))))
    }
}

impl Body for NodeBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else {
            return Poll::Ready(None);
        };
        // The rest of the request body first: the node may wait for it before answering on.
        match this.pump.poll(conn.io_mut(), cx) {
            Poll::Ready(Err(PumpError::Body(e))) if !e.is::<ContinueError>() => {
                return this.fail(NodeError::Body(e));
            }
            // The node answered without the body (a write error, or the held body of a refused
            // `Expect`): the answer is read on, and the connection not reused.
            Poll::Ready(Err(_)) => this.reusable = false,
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
        loop {
            let conn = this.conn.as_mut().expect("checked above");
            let rbuf = conn.rbuf();
            let step = match &mut this.read {
                Read::Done => return Poll::Ready(None),
                Read::Length(0) => Step::End,
                Read::Length(left) if !rbuf.is_empty() => {
                    let n = usize::try_from(*left).map_or(rbuf.len(), |l| l.min(rbuf.len()));
                    *left -= n as u64;
                    let data = rbuf.split_to(n).freeze();
                    if *left == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Read::Close if !rbuf.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(rbuf.split().freeze()))));
                }
                Read::Chunked(d) => match d.decode(rbuf) {
                    Ok(Decoded::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                    Ok(Decoded::Trailers(t)) => return Poll::Ready(Some(Ok(Frame::trailers(t)))),
                    Ok(Decoded::End) => Step::End,
                    Ok(Decoded::NeedMore) => Step::Fill,
                    Err(e) => Step::Fail(NodeError::Chunked(e)),
                },
                Read::Length(_) | Read::Close => Step::Fill,
            };
            match step {
                Step::End => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Step::Fail(e) => return this.fail(e),
                Step::Fill => {}
            }
            let conn = this.conn.as_mut().expect("checked above");
            match conn.poll_fill(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    if matches!(this.read, Read::Close) {
                        this.reusable = false;
                        this.finish();
                        return Poll::Ready(None);
                    }
                    return this.fail(NodeError::BodyCut);
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return this.fail(NodeError::Read(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.read, Read::Done | Read::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.read {
            Read::Length(n) => SizeHint::with_exact(n),
            Read::Done => SizeHint::with_exact(0),
            Read::Chunked(_) | Read::Close => SizeHint::default(),
        }
    }
}
