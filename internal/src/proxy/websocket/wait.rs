//! The relay's resting wait ([`Resting`]): the two sides, the node's signal, gateway shutdown and
//! the earliest timer, as one future. It stays armed while a socket is busy (the pump relays
//! inside it, [`super::pump`]), so nearly every wake-up is the sockets'.
//!
//! A `select!` polls every branch on every wake-up; here the node signal's `changed()`, the
//! shutdown wait and the timer are polled once, to register the task's waker, and after that only
//! when a cheap look says they may be ready: a second receiver of the node's signal (one atomic
//! load), the shutdown value, the timer's elapsed flag. Polling a watch's armed `changed()` takes
//! its waiter list's lock; the two watch polls, their wait loops and `select!`'s random start were
//! ~350 of ~3,000 user-space instructions per relayed round trip (CPU per WebSocket
//! message). They are looked at before the sides, so a side that is always ready cannot hide
//! them. Skipping a poll loses no wake-up: the waker each registered is the task's own, which
//! never changes. Spawns nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tokio::time::Sleep;

use crate::drain;
use crate::registry::NodeSignal;

/// What ended a [`Resting`] wait.
#[derive(Debug)]
pub(super) enum Woken<O> {
    /// The sides' future completed with this output.
    Sides(O),
    /// The node's signal changed.
    Signal,
    /// The gateway is shutting down.
    Shutdown,
    /// The timer fired.
    Timer,
}

pin_project_lite::pin_project! {
    /// The resting wait of one relay step (module docs).
    pub(super) struct Resting<'a, S, C, D> {
        #[pin]
        sides: S,
        #[pin]
        signal: C,
        #[pin]
        shutdown: D,
        #[pin]
        sleep: Option<Sleep>,
        // A second receiver of the signal `signal` waits on, seen up to the moment the wait began.
        peek: Option<&'a watch::Receiver<NodeSignal>>,
        fired: &'a drain::Watch,
        armed: bool,
    }
}

impl<'a, S, C, D> Resting<'a, S, C, D> {
    /// Waits for the first of `sides`, `signal` (a `changed()` of the node's signal, looked at
    /// through `peek`: a receiver of the same channel, marked seen as the wait begins, `None`
    /// without a node side), `shutdown` (the wait on the gateway's shutdown watch, `fired` being
    /// any watch of the same signal) and `sleep`.
    pub(super) fn new(
        sides: S,
        signal: C,
        peek: Option<&'a watch::Receiver<NodeSignal>>,
        shutdown: D,
        fired: &'a drain::Watch,
        sleep: Option<Sleep>,
    ) -> Self {
        Resting {
            sides,
            signal,
            shutdown,
            sleep,
            peek,
            fired,
            armed: false,
        }
    }
}

impl<S, C, D> Future for Resting<'_, S, C, D>
where
    S: Future,
    C: Future<Output = ()>,
    D: Future<Output = ()>,
{
    type Output = Woken<S::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let first = !std::mem::replace(this.armed, true);
        // A closed channel (`Err`) is polled every time; `signal` then never completes.
        let signal_may_be_ready = this.peek.is_some_and(|p| p.has_changed().unwrap_or(true));
        if (first || signal_may_be_ready) && this.signal.poll(cx).is_ready() {
            return Poll::Ready(Woken::Signal);
        }
        if (first || this.fired.is_signaled()) && this.shutdown.poll(cx).is_ready() {
            return Poll::Ready(Woken::Shutdown);
        }
        if let Some(mut sleep) = this.sleep.as_mut().as_pin_mut() {
            if (first || sleep.is_elapsed()) && sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woken::Timer);
            }
        }
        this.sides.poll(cx).map(Woken::Sides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The wait of a socket with no node signal: both sides and the signal never ready, so only
    /// `shutdown` or `timer` can end it.
    fn idle<'a, S: Future<Output = ()>>(
        shutdown_wait: S,
        shutdown: &'a drain::Watch,
        timer: Option<tokio::time::Sleep>,
    ) -> Resting<'a, std::future::Pending<()>, std::future::Pending<()>, S> {
        Resting::new(
            std::future::pending::<()>(),
            std::future::pending::<()>(),
            None,
            shutdown_wait,
            shutdown,
            timer,
        )
    }

    /// A wait armed on a node signal and a timer, woken by neither until each fires: after its
    /// first poll it looks at them only through the peek and the elapsed flag, and still wakes
    /// for each (no wake-up lost when their polls are skipped).
    #[tokio::test(start_paused = true)]
    async fn a_signal_or_timer_that_fires_after_the_first_poll_still_ends_the_wait() {
        let (tx, mut rx) = watch::channel(NodeSignal {
            usable: true,
            drain_deadline: None,
        });
        let (_stop, shutdown) = drain::channel();
        let mut shutdown_wait = shutdown.clone();
        let mut peek = rx.clone();
        peek.mark_unchanged();
        let changed = async { rx.changed().await.expect("sender alive") };
        let wait = Resting::new(
            std::future::pending::<()>(),
            changed,
            Some(&peek),
            shutdown_wait.signaled(),
            &shutdown,
            Some(tokio::time::sleep(Duration::from_secs(60))),
        );
        {
            let mut wait = std::pin::pin!(wait);
            assert!(futures_util::poll!(wait.as_mut()).is_pending());
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(futures_util::poll!(wait.as_mut()).is_pending());
            tx.send_modify(|s| s.usable = false);
            assert!(matches!(wait.await, Woken::Signal));
        }
        let mut shutdown_wait = shutdown.clone();
        let wait = idle(
            shutdown_wait.signaled(),
            &shutdown,
            Some(tokio::time::sleep(Duration::from_secs(60))),
        );
        let mut wait = std::pin::pin!(wait);
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        assert!(matches!(wait.await, Woken::Timer));
    }

    /// Shutdown fired after the first poll ends the wait, though its wait is no longer polled on
    /// every wake-up.
    #[tokio::test]
    async fn shutdown_after_the_first_poll_ends_the_wait() {
        let (stop, shutdown) = drain::channel();
        let mut shutdown_wait = shutdown.clone();
        let wait = idle(shutdown_wait.signaled(), &shutdown, None);
        let mut wait = std::pin::pin!(wait);
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        stop.fire();
        assert!(matches!(wait.await, Woken::Shutdown));
    }
}
