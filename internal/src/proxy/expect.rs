//! `Expect: 100-continue` on HTTP/1.1 (RFC 9110 section 10.1.1; CASE-15).
//!
//! The downstream HTTP/1.1 server answers `100 Continue` the first time a request body is polled
//! (as hyper's server does), and the upstream client polls the body right after writing the head. Left alone, the gateway would tell
//! every client "go on" at once and push the body upstream before the node had a say. The
//! [`ContinueGate`] holds the upstream request body (and so the client's) back until one of:
//!
//! - the node sends its own `100 Continue` (seen by the upstream client,
//!   [`super::upstream::http1::conn`]): the body flows, and the client gets exactly one `100` (the
//!   downstream server's, when the body is first polled);
//! - [`CONTINUE_WAIT`] passes without an answer (a node that ignores `Expect`): the body flows;
//! - the node's final answer arrives first (an early 401/413): the client's body is dropped unread,
//!   so the client gets that answer with no `100` before it, and the upstream request is aborted
//!   rather than completed with a body that never came.
//!
//! Spawns nothing; the state is shared between the upstream client, the forwarder and the body.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{header, HeaderMap};
use http_body::{Body, SizeHint};
use http_body_util::BodyExt;
use tokio::time::Sleep;

use super::body::{BoxError, FramePoll, ProxyBody};

/// How long the gateway waits for a node's `100 Continue` before sending the body anyway: curl's
/// own wait, so a node that ignores `Expect` costs a client no more than talking to it directly.
pub(crate) const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// Why a held body never flowed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ContinueError {
    /// The node answered before asking for the body; the upstream request is abandoned.
    #[error("node answered before asking for the request body (Expect: 100-continue)")]
    AnsweredFirst,
}

/// True if `headers` carry `Expect: 100-continue` (the only expectation defined, RFC 9110 10.1.1).
pub(crate) fn wants_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

#[derive(Debug, Default)]
struct GateState {
    open: AtomicBool,
    answered: AtomicBool,
    waker: AtomicWaker,
}

/// Shared switch between the node's interim answer, the forwarder and the held body.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContinueGate(Arc<GateState>);

impl ContinueGate {
    /// A closed gate.
    pub(crate) fn new() -> Self {
        ContinueGate::default()
    }

    /// The node answered `100 Continue`: the held body flows.
    pub(crate) fn opened(&self) {
        self.0.open.store(true, Ordering::Release);
        self.0.waker.wake();
    }

    /// The node's final answer head arrived: if the body is still held, it is never sent.
    pub(crate) fn answered(&self) {
        if !self.0.open.load(Ordering::Acquire) {
            self.0.answered.store(true, Ordering::Release);
            self.0.waker.wake();
        }
    }

    /// Wraps `inner` so it is not polled until the gate opens or `wait` passes from the first poll
    /// (the moment the upstream head was written).
    pub(crate) fn hold(&self, inner: ProxyBody, wait: Duration) -> ProxyBody {
        Held {
            inner: Some(inner),
            gate: self.0.clone(),
            wait,
            timer: None,
        }
        .boxed_unsync()
    }
}

struct Held {
    inner: Option<ProxyBody>,
    gate: Arc<GateState>,
    wait: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Held {
    fn ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ContinueError>> {
        if self.gate.open.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        self.gate.waker.register(cx.waker());
        // Checked again after registering, so a wake between the first check and now is not lost.
        if self.gate.open.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        if self.gate.answered.load(Ordering::Acquire) {
            return Poll::Ready(Err(ContinueError::AnsweredFirst));
        }
        let wait = self.wait;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
        if timer.as_mut().poll(cx).is_ready() {
            tracing::debug!(
                wait_ms = wait.as_millis() as u64,
                "node sent no 100 Continue in time; sending the request body"
            );
            self.gate.open.store(true, Ordering::Release);
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        match self.ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                // Dropping the client's body unread tells the downstream server not to send 100 and to
                // close the connection after the answer (the client may never send the body).
                self.inner = None;
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Ready(Ok(())) => match self.inner.as_mut() {
                Some(inner) => Pin::new(inner).poll_frame(cx),
                None => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(Body::size_hint).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    fn body(s: &'static str) -> ProxyBody {
        Full::new(Bytes::from_static(s.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    #[tokio::test(start_paused = true)]
    async fn held_until_the_wait_passes() {
        let gate = ContinueGate::new();
        let mut held = gate.hold(body("abc"), Duration::from_secs(1));
        let start = tokio::time::Instant::now();
        let frame = held.frame().await.expect("a frame").expect("ok");
        assert_eq!(frame.into_data().expect("data"), "abc");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn opened_by_the_node_or_dropped_by_its_answer() {
        let gate = ContinueGate::new();
        let mut held = gate.hold(body("abc"), Duration::from_secs(1));
        let g = gate.0.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            g.open.store(true, Ordering::Release);
            g.waker.wake();
        });
        let start = tokio::time::Instant::now();
        assert!(held.frame().await.expect("a frame").is_ok());
        assert_eq!(start.elapsed(), Duration::from_millis(100));

        let gate = ContinueGate::new();
        let mut held = gate.hold(body("abc"), Duration::from_secs(1));
        gate.answered();
        let err = held
            .frame()
            .await
            .expect("a frame")
            .expect_err("answered first");
        assert!(err.downcast_ref::<ContinueError>().is_some());
        assert!(held.is_end_stream());
    }

    #[test]
    fn only_100_continue_counts() {
        let mut h = HeaderMap::new();
        assert!(!wants_continue(&h));
        h.insert(header::EXPECT, "100-Continue".parse().expect("valid"));
        assert!(wants_continue(&h));
        h.insert(header::EXPECT, "200-ok".parse().expect("valid"));
        assert!(!wants_continue(&h));
    }
}
