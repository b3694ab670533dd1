//! One request on an upstream h2 connection ([`super`]), on the `h2` crate directly (RFC 9113
//! section 8.1): the head goes out as HEADERS, the body as DATA frames, the node's answer comes back
//! as a [`NodeH2Body`].
//!
//! The request's own task sends it: a body that is already complete when the request goes out (a
//! unary gRPC call's one message with END_STREAM, or no body) is written with the head as
//! HEADERS + DATA(END_STREAM) without any task or channel. A body still streaming when the node's
//! answer head arrives is pumped on by one spawned task ([`Pump`]) that stops when the body ends,
//! the stream is reset, or the answer's body is dropped (the stream is then cancelled with
//! RST_STREAM(CANCEL)). The pump reads a chunk only once the stream has send capacity again (RFC
//! 9113 section 5.2: at most one chunk is buffered beyond the node's window).
//!
//! A client body that fails while the request waits for its answer head fails the attempt with
//! [`BodyFailed`], whose cause is the body's error (so
//! [`crate::proxy::error::ProxyError::client_fault`] can blame the client); the stream is reset
//! with INTERNAL_ERROR.
//!
//! The node's answer head and trailers are held to `limits.h2_max_header_list` here, by their
//! RFC 9113 section 6.5.2 size, rather than by the `h2` crate alone: `h2` drops the fields of a
//! trailer block past its limit without a word (the rest arrive as if complete), so the
//! connection decodes up to [`super::DECODE_HEADER_LIST_FACTOR`] times the limit and a list
//! over the limit fails its own stream with [`HeaderListTooLarge`] (SPEC sections 4 and 5).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::future::{AbortHandle, Abortable};
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use http::{header, Request, Response};
use http_body::{Body, Frame, SizeHint};

use crate::proxy::body::{BoxError, FramePoll, ProxyBody};

/// The client's request body failed before the node's answer head arrived.
#[derive(Debug, thiserror::Error)]
#[error("request body failed")]
pub(crate) struct BodyFailed(#[source] pub(crate) BoxError);

/// A node's response head or trailers over `limits.h2_max_header_list` (SPEC section 4: trailers
/// too, both directions): the stream fails, and a gRPC call ends with `grpc-status: 13`
/// ([`crate::proxy::upstream::grpc_call::CallBody`]).
#[derive(Debug, thiserror::Error)]
#[error("node {what} of {size} bytes over limits.h2_max_header_list ({limit} bytes)")]
pub(crate) struct HeaderListTooLarge {
    /// `response head` or `trailers`.
    pub(crate) what: &'static str,
    /// The list's size, RFC 9113 section 6.5.2 (name + value + 32 per field).
    pub(crate) size: usize,
    /// The limit.
    pub(crate) limit: u32,
}

/// Takes `fields` (the regular fields of a head or trailers; a response head's `:status`, 42
/// bytes, is left out) and returns their RFC 9113 section 6.5.2 size in bytes: name + value + 32
/// octets per field.
fn header_list_size(fields: &http::HeaderMap) -> usize {
    fields
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum()
}

/// `Err` if `fields` (the `what` of an answer) are over `limit` bytes.
fn check_header_list(
    what: &'static str,
    fields: &http::HeaderMap,
    limit: u32,
) -> Result<(), HeaderListTooLarge> {
    let size = header_list_size(fields);
    if size > limit as usize {
        return Err(HeaderListTooLarge { what, size, limit });
    }
    Ok(())
}

/// How sending one request on a connection failed.
// The request goes back inline, as in [`crate::proxy::upstream::request::SendError`]: the answer
// head it competes with in the `Result` is as large, and boxing it would cost an allocation per
// refusal.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StreamError {
    /// The connection takes no new stream (GOAWAY received, or closed): nothing was sent and the
    /// request is handed back.
    NotSent(h2::Error, Request<ProxyBody>),
    /// The stream was opened (part of the request may have gone out).
    Sent(BoxError),
}

/// Sends `req` on the connection of `send` and waits for the node's answer head, pumping the body
/// meanwhile; the answer's head and trailers may be at most `max_header_list` bytes (module docs).
///
/// # Errors
/// [`StreamError::NotSent`] when the connection takes no new stream, [`StreamError::Sent`] with
/// the node's reset or the connection's error (an `h2::Error`), [`BodyFailed`], or
/// [`HeaderListTooLarge`] (the stream is cancelled).
pub(crate) async fn send(
    send: &mut SendRequest<Bytes>,
    req: Request<ProxyBody>,
    max_header_list: u32,
) -> Result<Response<NodeH2Body>, StreamError> {
    if let Err(e) = std::future::poll_fn(|cx| send.poll_ready(cx)).await {
        return Err(StreamError::NotSent(e, req));
    }
    let (parts, body) = req.into_parts();
    // The connection-specific fields the `h2` crate refuses (RFC 9113 section 8.2.2) are gone
    // already: the node's fields are made without hop-by-hop ones
    // ([`crate::proxy::node_headers::node_headers`]).
    let mut head = Request::from_parts(parts, ());
    // As hyper's client did: a known length is declared (RFC 9110 section 8.6).
    if let Some(len) = body.size_hint().exact() {
        let payload_semantics = !matches!(
            *head.method(),
            http::Method::GET | http::Method::HEAD | http::Method::DELETE | http::Method::CONNECT
        );
        if (len != 0 || payload_semantics) && !head.headers().contains_key(header::CONTENT_LENGTH) {
            head.headers_mut()
                .insert(header::CONTENT_LENGTH, http::HeaderValue::from(len));
        }
    }
    let eos = body.is_end_stream();
    let (response, tx) = send
        .send_request(head, eos)
        .map_err(|e| StreamError::Sent(Box::new(e)))?;
    let pump = (!eos).then(|| Pump {
        body,
        tx,
        wait_capacity: false,
    });
    let (head, pump) = Exchange {
        response,
        pump,
        pump_stopped: false,
    }
    .await?;
    let (parts, recv) = head.into_parts();
    // Dropping `recv` cancels the stream (RST_STREAM(CANCEL)): that stream alone fails.
    check_header_list("response head", &parts.headers, max_header_list)
        .map_err(|e| StreamError::Sent(Box::new(e)))?;
    let remaining = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The body is still streaming: one task sends the rest, cancelled with the answer's body.
    let pump = pump.map(|p| {
        let (handle, registration) = AbortHandle::new_pair();
        tokio::spawn(Abortable::new(p.run(), registration));
        PumpGuard(handle)
    });
    Ok(Response::from_parts(
        parts,
        NodeH2Body {
            recv,
            data_done: false,
            remaining,
            max_header_list,
            _pump: pump,
        },
    ))
}

/// Waits for the answer head while pumping the body.
struct Exchange {
    response: ResponseFuture,
    pump: Option<Pump>,
    /// The pump stopped on a stream error: the answer future reports the stream's fate.
    pump_stopped: bool,
}

impl Future for Exchange {
    type Output = Result<(Response<RecvStream>, Option<Pump>), StreamError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let (Some(p), false) = (this.pump.as_mut(), this.pump_stopped) {
            match p.poll_send(cx) {
                Poll::Ready(Ok(())) => this.pump = None,
                Poll::Ready(Err(PumpError::Body(e))) => {
                    return Poll::Ready(Err(StreamError::Sent(Box::new(BodyFailed(e)))));
                }
                Poll::Ready(Err(PumpError::Stream(e))) => {
                    tracing::debug!(error = %e, "upstream h2 stream stopped taking the body");
                    this.pump_stopped = true;
                }
                Poll::Pending => {}
            }
        }
        let head = ready!(Pin::new(&mut this.response).poll(cx))
            .map_err(|e| StreamError::Sent(Box::new(e)))?;
        let pump = if this.pump_stopped {
            None
        } else {
            this.pump.take()
        };
        Poll::Ready(Ok((head, pump)))
    }
}

/// Why the pump stopped early.
enum PumpError {
    /// The client's body failed (the stream was reset with INTERNAL_ERROR).
    Body(BoxError),
    /// The stream failed or was reset by the node.
    Stream(h2::Error),
}

/// Sends a request body on its stream, one chunk per grant of send capacity.
struct Pump {
    body: ProxyBody,
    tx: SendStream<Bytes>,
    /// A chunk went out: wait for capacity before reading the next one (the first chunk goes out
    /// at once, so a complete body never waits for the stream to open).
    wait_capacity: bool,
}

impl Pump {
    /// Sends the body to its end (the task [`send`] spawns for a body still streaming).
    async fn run(mut self) {
        match std::future::poll_fn(|cx| self.poll_send(cx)).await {
            Ok(()) => {}
            Err(PumpError::Body(e)) => {
                tracing::debug!(error = %e, "client request body failed; upstream h2 stream reset");
            }
            Err(PumpError::Stream(e)) => {
                tracing::debug!(error = %e, "upstream h2 stream stopped taking the body");
            }
        }
    }

    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), PumpError>> {
        loop {
            if self.wait_capacity {
                self.tx.reserve_capacity(1);
                while self.tx.capacity() == 0 {
                    match ready!(self.tx.poll_capacity(cx)) {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Poll::Ready(Err(PumpError::Stream(e))),
                        None => {
                            return Poll::Ready(Err(PumpError::Stream(h2::Error::from(
                                h2::Reason::CANCEL,
                            ))))
                        }
                    }
                }
            }
            // A node that reset the stream wants no more of the body. Asked before reading on once
            // a chunk went out (the capacity wait has registered the task for the stream's news
            // anyway), but before the first chunk only when the body makes the pump wait: asking
            // registers the task with the stream, and h2 then wakes it when it opens the stream
            // and when it grants the stream capacity, a wasted poll of the whole request per unary
            // call (bench/README). A reset that came first fails the
            // chunk's `send_data` instead.
            if self.wait_capacity {
                self.check_node_reset(cx)?;
            }
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => f,
                Poll::Ready(Some(Err(e))) => {
                    self.tx.send_reset(h2::Reason::INTERNAL_ERROR);
                    return Poll::Ready(Err(PumpError::Body(e)));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(
                        self.tx
                            .send_data(Bytes::new(), true)
                            .map_err(PumpError::Stream),
                    );
                }
                Poll::Pending => {
                    if !self.wait_capacity {
                        self.check_node_reset(cx)?;
                    }
                    return Poll::Pending;
                }
            };
            let frame = match frame.into_data() {
                Ok(data) => {
                    let eos = self.body.is_end_stream();
                    if data.is_empty() && !eos {
                        continue;
                    }
                    self.tx.send_data(data, eos).map_err(PumpError::Stream)?;
                    if eos {
                        return Poll::Ready(Ok(()));
                    }
                    self.wait_capacity = true;
                    continue;
                }
                Err(frame) => frame,
            };
            if let Ok(trailers) = frame.into_trailers() {
                return Poll::Ready(self.tx.send_trailers(trailers).map_err(PumpError::Stream));
            }
        }
    }

    /// `Err` once the node has reset the stream (with its reason, or the stream's error); else
    /// `Ok`, and the task is woken when the node does (or on other news of the stream from h2).
    fn check_node_reset(&mut self, cx: &mut Context<'_>) -> Result<(), PumpError> {
        match self.tx.poll_reset(cx) {
            Poll::Ready(r) => Err(PumpError::Stream(r.map_or_else(|e| e, h2::Error::from))),
            Poll::Pending => Ok(()),
        }
    }
}

/// Aborts the spawned pump when the answer's body is dropped.
#[derive(Debug)]
struct PumpGuard(AbortHandle);

impl Drop for PumpGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The node's answer body on an upstream h2 stream: DATA frames (their flow-control credit given
/// back as they are read, RFC 9113 section 6.9), then trailers. A reset with NO_ERROR or CANCEL
/// after the answer ends it cleanly (RFC 9113 section 8.1), as hyper's body did.
#[derive(Debug)]
pub struct NodeH2Body {
    recv: RecvStream,
    data_done: bool,
    /// The answer's `content-length` less the bytes read, if it declared one.
    remaining: Option<u64>,
    /// `limits.h2_max_header_list`: trailers over it fail the body ([`HeaderListTooLarge`]).
    max_header_list: u32,
    _pump: Option<PumpGuard>,
}

impl Body for NodeH2Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = &mut *self;
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Fails only for a stream already gone, whose credit h2 returns itself.
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    if let Some(r) = this.remaining.as_mut() {
                        *r = r.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    return match e.reason() {
                        Some(h2::Reason::NO_ERROR | h2::Reason::CANCEL) => Poll::Ready(None),
                        _ => Poll::Ready(Some(Err(e.into()))),
                    };
                }
                None => this.data_done = true,
            }
        }
        match ready!(this.recv.poll_trailers(cx)) {
            Ok(None) => Poll::Ready(None),
            Ok(Some(t)) => Poll::Ready(Some(
                match check_header_list("trailers", &t, this.max_header_list) {
                    Ok(()) => Ok(Frame::trailers(t)),
                    Err(e) => Err(e.into()),
                },
            )),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
