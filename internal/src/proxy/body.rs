//! The body type on both sides of the proxy ([`ProxyBody`], its error [`BoxError`]) and the body
//! wrappers on the request path.
//!
//! - [`RequestBody`]: streams the client's body upstream while keeping a copy of up to
//!   [`REPLAY_LIMIT`] bytes, so a request can be replayed on another node while no more than that
//!   was read, whatever point the failed attempt reached: the replay sends the copy again and reads
//!   on from the client (the client's body lives in the shared [`BodyTap`], not in the attempt, so
//!   a node that refuses a stream before its body was read loses nothing); enforces the body idle
//!   timeout and the route's `max_body`, and counts bytes in.
//! - [`ResponseBody`]: streams the node's answer down, counts bytes out, and runs a completion hook
//!   (access log, metrics, in-flight count) exactly once when it ends or is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::deadline::Deadline;

/// Boxed error for bodies (the cause of a failed body frame; read with `downcast_ref`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type on both sides of the proxy: streamed [`Bytes`] frames (data and trailers),
/// never buffered whole.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What a body's `poll_frame` returns here: the next data or trailers frame, an error (the cause
/// boxed), or the end (`Ready(None)`).
pub(crate) type FramePoll = Poll<Option<Result<Frame<Bytes>, BoxError>>>;

/// Largest body kept for replay (bytes). Past it a failed upload is not retried (SPEC section 4:
/// "not yet streamed past recall").
pub(crate) const REPLAY_LIMIT: usize = 64 * 1024;

/// Errors a [`RequestBody`] raises.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// No body bytes arrived for the idle timeout.
    #[error("request body idle for {0:?}")]
    Idle(Duration),
    /// More than `max_body` bytes.
    #[error("request body larger than {0} bytes")]
    TooLarge(u64),
}

/// What the capture of a request body holds: the client's body itself (so a later attempt can go on
/// reading it), the chunks read so far (up to [`REPLAY_LIMIT`]), and which attempt reads it now.
#[derive(Default)]
struct Capture {
    /// The client's body; `None` for a body that had none.
    inner: Option<ProxyBody>,
    chunks: Vec<Bytes>,
    len: usize,
    overflowed: bool,
    ended: bool,
    /// The attempt allowed to read `inner`; a replay moves it on, so an abandoned attempt's body
    /// (still held by a dying connection task) can never steal a chunk from the next one.
    epoch: u64,
    /// The route's `max_body` and the bytes read from the client against it.
    max: Option<u64>,
    seen: u64,
    /// The client body's size hint when it arrived (a replay has the same length).
    hint: SizeHint,
}

/// Shared view of a request body's capture and byte count.
#[derive(Clone)]
pub(crate) struct BodyTap {
    /// `None` for a request without a body (no capture is allocated for it).
    capture: Option<Arc<Mutex<Capture>>>,
}

impl BodyTap {
    /// The tap of a request without a body: it replays as an empty body.
    pub(crate) fn empty() -> Self {
        BodyTap { capture: None }
    }

    /// Bytes read from the client so far.
    pub(crate) fn bytes_in(&self) -> u64 {
        self.capture.as_ref().map_or(0, |c| {
            c.lock().expect("capture mutex is never poisoned").seen
        })
    }
}

/// Whether a request body can be sent again after a failed attempt.
pub(crate) enum Replay {
    /// The body for the next attempt: the chunks read so far, then the rest of the client's body
    /// read on from where the failed attempt left it.
    Body(ProxyBody),
    /// More than [`REPLAY_LIMIT`] bytes went to the failed attempt: it cannot be sent again.
    Lost,
}

impl BodyTap {
    /// Whether the body can be replayed (SPEC section 4, "not yet streamed past recall"): while at
    /// most [`REPLAY_LIMIT`] bytes were read, a [`Replay::Body`] that sends them again and then goes
    /// on with the client's body, whatever point the failed attempt reached (never polled, partly
    /// read, or read to its end); else [`Replay::Lost`]. The failed attempt's body is cut off: a
    /// later poll of it ends with an error.
    pub(crate) fn replay(&self, idle: Duration) -> Replay {
        let Some(capture) = &self.capture else {
            return Replay::Body(full(Bytes::new()));
        };
        let mut c = capture.lock().expect("capture mutex is never poisoned");
        if c.overflowed {
            return Replay::Lost;
        }
        c.epoch += 1;
        let body = RequestBody {
            capture: capture.clone(),
            epoch: c.epoch,
            next: 0,
            idle,
            timer: None,
        };
        Replay::Body(body.boxed_unsync())
    }
}

/// Why a request body ended with an error.
#[derive(Debug, thiserror::Error)]
#[error("request body moved to another attempt")]
struct Moved;

pin_project_lite::pin_project! {
    /// The client's body on its way upstream; see the module docs.
    pub struct RequestBody {
        capture: Arc<Mutex<Capture>>,
        epoch: u64,
        // Index of the next captured chunk to send again before reading on (replays only).
        next: usize,
        idle: Duration,
        // The idle timeout, taken from the worker's timers when the body first waits for the
        // client and reset by each frame after that (a body that is whole when it is read costs
        // no timer).
        timer: Option<Deadline>,
    }
}

impl RequestBody {
    /// Wraps `inner` with idle timeout `idle` and optional `max` bytes; returns the body and its tap.
    pub(crate) fn new(inner: ProxyBody, idle: Duration, max: Option<u64>) -> (Self, BodyTap) {
        let capture = Arc::new(Mutex::new(Capture {
            hint: inner.size_hint(),
            inner: Some(inner),
            max,
            ..Capture::default()
        }));
        let tap = BodyTap {
            capture: Some(capture.clone()),
        };
        let body = RequestBody {
            capture,
            epoch: 0,
            next: 0,
            idle,
            timer: None,
        };
        (body, tap)
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.project();
        let mut guard = this
            .capture
            .lock()
            .expect("capture mutex is never poisoned");
        let c = &mut *guard;
        if c.epoch != *this.epoch {
            return Poll::Ready(Some(Err(Box::new(Moved))));
        }
        // A replay first sends again what the failed attempt had read.
        if let Some(chunk) = c.chunks.get(*this.next) {
            *this.next += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        let Some(inner) = c.inner.as_mut().filter(|_| !c.ended) else {
            return Poll::Ready(None);
        };
        match Pin::new(&mut *inner).poll_frame(cx) {
            Poll::Pending => {
                drop(guard);
                let idle = *this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Deadline::at(Instant::now() + idle));
                if timer.sleep().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(BodyError::Idle(*this.idle)))));
                }
                Poll::Pending
            }
            Poll::Ready(None) => {
                c.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Some(Ok(frame))) => {
                let end = inner.is_end_stream();
                if let Some(t) = this.timer {
                    t.sleep().reset(Instant::now() + *this.idle);
                }
                if let Some(data) = frame.data_ref() {
                    c.seen += data.len() as u64;
                    if let Some(max) = c.max {
                        if c.seen > max {
                            return Poll::Ready(Some(Err(Box::new(BodyError::TooLarge(max)))));
                        }
                    }
                    if !c.overflowed {
                        if c.len + data.len() <= REPLAY_LIMIT {
                            c.len += data.len();
                            c.chunks.push(data.clone());
                            // Sent by this attempt: a replay of it starts at the chunks.
                            *this.next = c.chunks.len();
                        } else {
                            c.overflowed = true;
                            c.chunks = Vec::new();
                        }
                    }
                }
                c.ended |= end;
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let c = self
            .capture
            .lock()
            .expect("capture mutex is never poisoned");
        c.epoch == self.epoch
            && self.next >= c.chunks.len()
            && (c.ended || c.inner.as_ref().is_none_or(|b| b.is_end_stream()))
    }

    fn size_hint(&self) -> SizeHint {
        let c = self
            .capture
            .lock()
            .expect("capture mutex is never poisoned");
        if c.epoch != self.epoch {
            return SizeHint::default();
        }
        c.hint
    }
}

pin_project_lite::pin_project! {
    /// The node's answer on its way down; see the module docs. `done` runs once, with the bytes
    /// sent down, when the body ends, fails or is dropped early (a closure held in place, not
    /// boxed: an allocation less per request).
    pub struct ResponseBody<B, F: FnOnce(u64)> {
        #[pin]
        inner: B,
        bytes_out: u64,
        done: Option<F>,
    }

    impl<B, F: FnOnce(u64)> PinnedDrop for ResponseBody<B, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(done) = this.done.take() {
                done(*this.bytes_out);
            }
        }
    }
}

impl<B, F: FnOnce(u64)> ResponseBody<B, F> {
    /// Wraps `inner`; `done(bytes_out)` runs exactly once.
    pub(crate) fn new(inner: B, done: F) -> Self {
        ResponseBody {
            inner,
            bytes_out: 0,
            done: Some(done),
        }
    }
}

impl<B: Body<Data = Bytes, Error: Into<BoxError>>, F: FnOnce(u64)> Body for ResponseBody<B, F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let mut this = self.project();
        let r = ready!(this.inner.as_mut().poll_frame(cx));
        match &r {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    *this.bytes_out += d.len() as u64;
                }
                // The last frame may not be followed by another poll: finish now.
                if this.inner.is_end_stream() {
                    if let Some(done) = this.done.take() {
                        done(*this.bytes_out);
                    }
                }
            }
            None => {
                if let Some(done) = this.done.take() {
                    done(*this.bytes_out);
                }
            }
            Some(Err(_)) => {
                if let Some(done) = this.done.take() {
                    done(*this.bytes_out);
                }
            }
        }
        Poll::Ready(r.map(|x| x.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body from bytes.
pub fn full(b: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
