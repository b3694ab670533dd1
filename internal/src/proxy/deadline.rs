//! A request's deadline timer (its route timeout; the client body's idle and minimum-rate
//! timers, once the body makes the gateway wait), taken from its worker's pool of timers that are
//! still armed (no timer registered and cancelled per request).
//!
//! A tokio [`Sleep`] registers its entry in the runtime's timer wheel on its first poll (the
//! driver's lock and a wheel insert) and removes it when dropped (the lock again): about 800
//! instructions per proxied request, for a route timeout that almost never fires. A `Sleep`
//! already registered that is reset to a *later* deadline only moves its expiry with one atomic
//! store (tokio's `TimerEntry::reset` fast path; the wheel re-files it when the old time comes).
//! So each worker keeps the timers of finished requests, still registered, and the next
//! request resets one to its own deadline — the connection-level deadline nginx and HAProxy keep,
//! with one timer per request in flight rather than one per connection.
//!
//! Rules:
//! - A pool exists only on a worker that [`install`]ed one (every data-plane worker,
//!   `server::workers::serve`), for that worker's runtime alone: a timer is never used on a runtime
//!   other than the one it was made on. Elsewhere (tests, the admin listener) each [`Deadline`]
//!   is a fresh `Sleep`.
//! - A pooled timer whose old deadline passes before it is reused wakes the task that last
//!   polled it once (a spurious wake-up, which every future tolerates) and is then re-filed or
//!   made afresh on its next use. The pool keeps at most [`POOL_CAP`] timers per worker.
//! - Dropping the [`install`] guard drops the pool while its runtime still runs.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// Timers kept per worker: the requests a worker has in flight at once, beyond which a finished
/// request's timer is dropped.
pub const POOL_CAP: usize = 256;

thread_local!(static POOL: RefCell<Option<Vec<Pin<Box<Sleep>>>>> = const { RefCell::new(None) });

/// Keeps this thread's pool of timers until dropped (module docs).
#[derive(Debug)]
pub struct PoolGuard(());

/// Installs an empty pool of timers on the current thread, which must be running the tokio
/// runtime every later [`Deadline`] on it belongs to. Returns the guard that drops the pool.
pub fn install() -> PoolGuard {
    POOL.with(|p| *p.borrow_mut() = Some(Vec::new()));
    PoolGuard(())
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        // Taken out first: the timers' own drops may not touch the cell while it is borrowed.
        let pool = POOL.with(|p| p.borrow_mut().take());
        drop(pool);
    }
}

/// A timer that fires at a deadline; returned to the worker's pool when dropped.
#[derive(Debug)]
pub struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// A timer for `when`: a pooled one reset to it, or a new one.
    pub fn at(when: Instant) -> Deadline {
        let pooled = POOL.with(|p| p.borrow_mut().as_mut().and_then(Vec::pop));
        let sleep = match pooled {
            Some(mut s) => {
                s.as_mut().reset(when);
                s
            }
            None => Box::pin(tokio::time::sleep_until(when)),
        };
        Deadline { sleep: Some(sleep) }
    }

    /// The timer.
    pub fn sleep(&mut self) -> Pin<&mut Sleep> {
        self.sleep.as_mut().expect("taken only in drop").as_mut()
    }

    /// Runs `fut` until it ends or the deadline passes first: `Ok` with its output, or `Err(())`
    /// at the deadline. `fut` is polled first and held in place (no `select!` tuple it would be
    /// moved into), as `tokio::time::timeout_at` does.
    pub fn bound<F: Future>(&mut self, fut: F) -> Bounded<'_, F> {
        Bounded {
            fut,
            deadline: self,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Deadline::bound`].
    pub struct Bounded<'a, F> {
        #[pin]
        fut: F,
        deadline: &'a mut Deadline,
    }
}

impl<F: Future> Future for Bounded<'_, F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        this.deadline.sleep().poll(cx).map(|()| Err(()))
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let Some(sleep) = self.sleep.take() else {
            return;
        };
        let rest = POOL.with(|p| match p.borrow_mut().as_mut() {
            Some(pool) if pool.len() < POOL_CAP => {
                pool.push(sleep);
                None
            }
            _ => Some(sleep),
        });
        drop(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The address of the timer `d` holds, to tell a pooled timer from a new one.
    fn addr(d: &mut Deadline) -> *const Sleep {
        &*d.sleep() as *const Sleep
    }

    /// Whether `d` has fired by now (one poll with a no-op waker).
    fn fired(d: &mut Deadline) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        std::future::Future::poll(d.sleep(), &mut cx).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_requests_armed_timer_serves_the_next_at_its_new_deadline() {
        let _pool = install();
        let start = Instant::now();
        let mut first = Deadline::at(start + Duration::from_secs(30));
        assert!(!fired(&mut first), "armed, not yet due");
        let used = addr(&mut first);
        drop(first);
        let mut next = Deadline::at(start + Duration::from_secs(60));
        assert_eq!(addr(&mut next), used, "the pooled timer is reused");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(!fired(&mut next), "the old deadline no longer counts");
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(fired(&mut next), "fires at the new deadline");
        drop(next);
        // An earlier deadline than the one an armed pooled timer holds is kept too.
        let mut late = Deadline::at(Instant::now() + Duration::from_secs(30));
        assert!(!fired(&mut late));
        let used = addr(&mut late);
        drop(late);
        let mut soon = Deadline::at(Instant::now() + Duration::from_millis(5));
        assert_eq!(addr(&mut soon), used);
        tokio::time::advance(Duration::from_millis(4)).await;
        assert!(!fired(&mut soon));
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(fired(&mut soon));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_pool_every_deadline_is_a_new_timer_and_the_pool_is_capped() {
        let at = Instant::now() + Duration::from_secs(1);
        let mut a = Deadline::at(at);
        let used = addr(&mut a);
        drop(a);
        let mut b = Deadline::at(at);
        assert!(!fired(&mut b));
        let pooled = POOL.with(|p| p.borrow().is_some());
        assert!(!pooled, "no pool installed, none made: {used:?}");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(fired(&mut b));

        let guard = install();
        let many: Vec<_> = (0..POOL_CAP + 10).map(|_| Deadline::at(at)).collect();
        drop(many);
        let kept = POOL.with(|p| p.borrow().as_ref().map(Vec::len));
        assert_eq!(kept, Some(POOL_CAP));
        drop(guard);
        assert!(
            POOL.with(|p| p.borrow().is_none()),
            "the guard drops the pool"
        );
    }
}
