//! Body wrappers on the request path.
//!
//! - [`RequestBody`]: streams the client's body upstream while keeping a copy of up to
//!   [`REPLAY_LIMIT`] bytes, so a request whose body fit can be replayed on another node; enforces the
//!   body idle timeout and the route's `max_body`, and counts bytes in.
//! - [`ResponseBody`]: streams the node's answer down, counts bytes out, and runs a completion hook
//!   (access log, metrics, in-flight count, pooled-connection return) exactly once when it ends or is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::{Instant, Sleep};

use super::{BoxError, ProxyBody};

/// Largest body kept for replay (bytes). Past it a failed upload is not retried (SPEC section 4:
/// "not yet streamed past recall").
pub const REPLAY_LIMIT: usize = 64 * 1024;

/// Errors a [`RequestBody`] raises.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// No body bytes arrived for the idle timeout.
    #[error("request body idle for {0:?}")]
    Idle(Duration),
    /// More than `max_body` bytes.
    #[error("request body larger than {0} bytes")]
    TooLarge(u64),
}

/// What the capture of a request body holds.
#[derive(Debug, Default)]
pub struct Capture {
    chunks: Vec<Bytes>,
    len: usize,
    overflowed: bool,
    ended: bool,
    polled: bool,
}

/// Shared view of a request body's capture and byte count.
#[derive(Debug, Default, Clone)]
pub struct BodyTap {
    capture: Arc<Mutex<Capture>>,
    /// Bytes read from the client so far.
    pub bytes_in: Arc<AtomicU64>,
}

/// Whether a request body can be sent again after a failed attempt.
pub enum Replay {
    /// Never polled: no byte of it was read (the original went with the failed attempt).
    Untouched,
    /// Fully captured within [`REPLAY_LIMIT`]: a fresh copy to send.
    Body(ProxyBody),
    /// Streamed past recall, or not yet complete: it cannot be sent again.
    Lost,
}

impl BodyTap {
    /// Whether the body can be replayed: a fresh copy when it was read to its end within
    /// [`REPLAY_LIMIT`], [`Replay::Untouched`] when it was never polled, else [`Replay::Lost`].
    pub fn replay(&self) -> Replay {
        let c = self
            .capture
            .lock()
            .expect("capture mutex is never poisoned");
        if !c.polled {
            return Replay::Untouched;
        }
        if c.ended && !c.overflowed {
            let chunks = c.chunks.clone();
            let stream = futures_util::stream::iter(
                chunks
                    .into_iter()
                    .map(|b| Ok::<_, BoxError>(Frame::data(b))),
            );
            return Replay::Body(http_body_util::StreamBody::new(stream).boxed_unsync());
        }
        Replay::Lost
    }

    /// True once any body byte was handed upstream.
    pub fn polled(&self) -> bool {
        self.capture
            .lock()
            .expect("capture mutex is never poisoned")
            .polled
    }
}

pin_project_lite::pin_project! {
    /// The client's body on its way upstream; see the module docs.
    pub struct RequestBody<B> {
        #[pin]
        inner: B,
        tap: BodyTap,
        idle: Duration,
        #[pin]
        timer: Sleep,
        max: Option<u64>,
        seen: u64,
    }
}

impl<B> RequestBody<B> {
    /// Wraps `inner` with idle timeout `idle` and optional `max` bytes; returns the body and its tap.
    pub fn new(inner: B, idle: Duration, max: Option<u64>) -> (Self, BodyTap) {
        let tap = BodyTap::default();
        let body = RequestBody {
            inner,
            tap: tap.clone(),
            idle,
            timer: tokio::time::sleep(idle),
            max,
            seen: 0,
        };
        (body, tap)
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        {
            let mut c = this
                .tap
                .capture
                .lock()
                .expect("capture mutex is never poisoned");
            c.polled = true;
        }
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => {
                if this.timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(BodyError::Idle(*this.idle)))));
                }
                Poll::Pending
            }
            Poll::Ready(None) => {
                this.tap
                    .capture
                    .lock()
                    .expect("capture mutex is never poisoned")
                    .ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(frame))) => {
                this.timer.as_mut().reset(Instant::now() + *this.idle);
                if let Some(data) = frame.data_ref() {
                    *this.seen += data.len() as u64;
                    this.tap
                        .bytes_in
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    if let Some(max) = *this.max {
                        if *this.seen > max {
                            return Poll::Ready(Some(Err(Box::new(BodyError::TooLarge(max)))));
                        }
                    }
                    let mut c = this
                        .tap
                        .capture
                        .lock()
                        .expect("capture mutex is never poisoned");
                    if !c.overflowed {
                        if c.len + data.len() <= REPLAY_LIMIT {
                            c.len += data.len();
                            c.chunks.push(data.clone());
                        } else {
                            c.overflowed = true;
                            c.chunks = Vec::new();
                        }
                    }
                }
                if self_end(&this.inner) {
                    this.tap
                        .capture
                        .lock()
                        .expect("capture mutex is never poisoned")
                        .ended = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn self_end<B: Body>(b: &Pin<&mut B>) -> bool {
    b.is_end_stream()
}

/// Runs once when a response body finishes (`complete = true`) or is dropped early.
pub type Completion = Box<dyn FnOnce(u64, bool) + Send>;

pin_project_lite::pin_project! {
    /// The node's answer on its way down; see the module docs.
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        bytes_out: u64,
        done: Option<Completion>,
    }

    impl<B> PinnedDrop for ResponseBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(done) = this.done.take() {
                done(*this.bytes_out, false);
            }
        }
    }
}

impl<B> ResponseBody<B> {
    /// Wraps `inner`; `done(bytes_out, complete)` runs exactly once.
    pub fn new(inner: B, done: Completion) -> Self {
        ResponseBody {
            inner,
            bytes_out: 0,
            done: Some(done),
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
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
                        done(*this.bytes_out, true);
                    }
                }
            }
            None => {
                if let Some(done) = this.done.take() {
                    done(*this.bytes_out, true);
                }
            }
            Some(Err(_)) => {
                if let Some(done) = this.done.take() {
                    done(*this.bytes_out, false);
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
