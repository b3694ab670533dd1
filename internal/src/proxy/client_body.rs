//! Rules on the client's request body beyond [`super::body`] (SPEC section 4 limits; CASE-22, 23):
//!
//! - [`MinRate`]: a body must bring `limits.body_min_rate` bytes/s averaged over each
//!   `limits.body_rate_window` of time the gateway spends *waiting for the client*; the first window
//!   is grace. Time the node spends not reading (back-pressure) never counts, so a fast client to a
//!   slow node is never cut, while a client trickling one byte every few seconds (which the idle
//!   timeout alone would let hold a connection and a node for hours) is.
//! - [`super::error::ProxyError::client_fault`]: a failed upstream attempt whose cause is the client's body (stalled, too
//!   slow, over `max_body`, or the client went away) is the client's fault: 408/413/400 and the
//!   connection closes; the node gets no passive-health penalty and the request is not retried.
//!
//! Spawns nothing.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, SizeHint};
use tokio::time::Instant;

use super::body::{BoxError, FramePoll};
use http_body_util::{BodyExt, Empty};

use super::body::{BodyTap, ProxyBody, RequestBody};
use super::deadline::Deadline;
use super::expect::{self, ContinueGate};
use crate::config::{BodyMinRate, Limits};

/// Why the client's body was given up on.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// No body bytes for the idle timeout.
    #[error("request body idle for {0:?}")]
    Idle(Duration),
    /// Slower than the minimum rate over a whole window of waiting.
    #[error("request body slower than {min} bytes/s: {bytes} bytes in {window:?} of waiting for the client")]
    BelowMinRate {
        /// The configured minimum, bytes/s.
        min: u64,
        /// Bytes that arrived in the window.
        bytes: u64,
        /// The window.
        window: Duration,
    },
    /// The client's connection failed or closed mid-body.
    #[error("client request body broke off: {0}")]
    Broken(String),
}

pin_project_lite::pin_project! {
    /// The client's body with the minimum-rate rule; see the module docs. A pass-through when the
    /// rule is off.
    pub struct MinRate<B> {
        #[pin]
        inner: B,
        rule: Option<BodyMinRate>,
        // Waiting time (client owed us bytes) accumulated before `pending_since`.
        waited: Duration,
        // When the inner body last returned Pending, while still waiting.
        pending_since: Option<Instant>,
        // Waiting time at which the current window started, and bytes in it.
        window_start: Duration,
        window_bytes: u64,
        in_grace: bool,
        // Taken from the worker's timers at the first wait (a body that never makes the gateway
        // wait costs no timer).
        timer: Option<Deadline>,
    }
}

impl<B> MinRate<B> {
    /// Wraps `inner` with `rule` (`None` = off).
    pub(crate) fn new(inner: B, rule: Option<BodyMinRate>) -> Self {
        MinRate {
            inner,
            rule,
            waited: Duration::ZERO,
            pending_since: None,
            window_start: Duration::ZERO,
            window_bytes: 0,
            in_grace: true,
            timer: None,
        }
    }
}

/// Checks the windows that ended by `waited_now`; `Err` when one of them was too slow.
fn close_windows(
    rule: &BodyMinRate,
    waited_now: Duration,
    window_start: &mut Duration,
    window_bytes: &mut u64,
    in_grace: &mut bool,
) -> Result<(), ClientBodyError> {
    while waited_now.saturating_sub(*window_start) >= rule.window {
        let need = (rule.bytes_per_sec as f64 * rule.window.as_secs_f64()).ceil() as u64;
        if !*in_grace && *window_bytes < need {
            return Err(ClientBodyError::BelowMinRate {
                min: rule.bytes_per_sec,
                bytes: *window_bytes,
                window: rule.window,
            });
        }
        *in_grace = false;
        *window_start += rule.window;
        *window_bytes = 0;
    }
    Ok(())
}

impl<B: Body<Data = Bytes, Error: Into<BoxError>>> Body for MinRate<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let mut this = self.project();
        let Some(rule) = *this.rule else {
            return this
                .inner
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into)));
        };
        let polled = this.inner.as_mut().poll_frame(cx);
        let now = Instant::now();
        match polled {
            Poll::Ready(r) => {
                if let Some(since) = this.pending_since.take() {
                    *this.waited += now.saturating_duration_since(since);
                }
                if let Some(Ok(frame)) = &r {
                    if let Some(d) = frame.data_ref() {
                        *this.window_bytes += d.len() as u64;
                    }
                }
                // Bytes that arrive at the end of a window count for it.
                if r.as_ref().is_some_and(|f| f.is_ok()) {
                    if let Err(e) = close_windows(
                        &rule,
                        *this.waited,
                        this.window_start,
                        this.window_bytes,
                        this.in_grace,
                    ) {
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                }
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let since = *this.pending_since.get_or_insert(now);
                loop {
                    let waited_now = *this.waited + now.saturating_duration_since(since);
                    if let Err(e) = close_windows(
                        &rule,
                        waited_now,
                        this.window_start,
                        this.window_bytes,
                        this.in_grace,
                    ) {
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                    // Wake when the current window of waiting ends, to judge it even if no byte comes.
                    let left = (*this.window_start + rule.window).saturating_sub(waited_now);
                    let timer = match this.timer {
                        Some(t) => {
                            t.sleep().reset(now + left);
                            t
                        }
                        None => this.timer.insert(Deadline::at(now + left)),
                    };
                    if timer.sleep().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
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

/// The client's body as the node gets it: counted against `max_body`, cut when idle or below the
/// minimum rate (SPEC section 4, CASE-22), held behind `gate` for `Expect: 100-continue`, and
/// tapped so a retry can send it again.
pub(crate) fn request_body(
    incoming: ProxyBody,
    limits: &Limits,
    max_body: Option<u64>,
    gate: Option<&ContinueGate>,
) -> (ProxyBody, BodyTap) {
    if incoming.is_end_stream() {
        return (
            Empty::new().map_err(|never| match never {}).boxed_unsync(),
            BodyTap::empty(),
        );
    }
    let incoming = MinRate::new(incoming, limits.body_min_rate);
    let (b, tap) = RequestBody::new(
        incoming.map_err(Into::into).boxed_unsync(),
        limits.body_idle_timeout,
        max_body,
    );
    match gate {
        Some(g) => (g.hold(b.boxed_unsync(), expect::CONTINUE_WAIT), tap),
        None => (b.boxed_unsync(), tap),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    fn rule() -> Option<BodyMinRate> {
        Some(BodyMinRate {
            bytes_per_sec: 100,
            window: Duration::from_secs(1),
        })
    }

    /// A body yielding `chunk` bytes every `every`, `n` times.
    fn trickle(
        chunk: usize,
        every: Duration,
        n: usize,
    ) -> impl Body<Data = Bytes, Error = BoxError> {
        let s = futures_util::stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((
                Ok::<_, BoxError>(Frame::data(Bytes::from(vec![b'x'; chunk]))),
                i + 1,
            ))
        });
        StreamBody::new(s)
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_after_the_grace_window() {
        let mut b = Box::pin(MinRate::new(
            trickle(1, Duration::from_millis(300), 100),
            rule(),
        ));
        let start = Instant::now();
        let err = loop {
            match b.frame().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => break e,
                None => panic!("the trickle was never cut"),
            }
        };
        assert!(
            matches!(
                err.downcast_ref::<ClientBodyError>(),
                Some(ClientBodyError::BelowMinRate { .. })
            ),
            "{err}"
        );
        // Grace window 1 s, then the first judged window 1 s.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_passes_and_a_silent_reader_costs_nothing() {
        let mut b = Box::pin(MinRate::new(
            trickle(50, Duration::from_millis(250), 40),
            rule(),
        ));
        let mut n = 0;
        while let Some(f) = b.frame().await {
            f.expect("steady 200 B/s passes");
            n += 1;
            if n == 5 {
                // The node stops reading for a long time: not the client's fault.
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
        assert_eq!(n, 40);
    }

    #[tokio::test(start_paused = true)]
    async fn off_is_a_pass_through() {
        let mut b = Box::pin(MinRate::new(trickle(1, Duration::from_secs(5), 3), None));
        let mut n = 0;
        while let Some(f) = b.frame().await {
            f.expect("no rule");
            n += 1;
        }
        assert_eq!(n, 3);
    }
}
