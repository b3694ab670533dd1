//! The in-flight and idle accounting of one HTTP connection ([`ConnTracker`]): what the idle
//! keep-alive close (`POST /control/keepalive`) relies on to never close a connection with a
//! request in flight or a request head partly received.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::Version;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::respond::RespBody;
use crate::tls::MockStream;

/// What one HTTP connection has been doing, for the idle keep-alive close.
#[derive(Debug)]
pub(crate) struct ConnTracker {
    /// Bytes read from the socket so far.
    bytes_read: AtomicU64,
    idle: Mutex<IdleState>,
    /// Signalled when the last in-flight response finishes.
    pub(crate) became_idle: Notify,
    /// Set for h2 and upgraded connections, which are never idle-closed.
    pub(crate) exempt: AtomicBool,
    /// Non-control requests (streams) seen, for `/control/goaway`.
    streams: AtomicU64,
    /// Signalled when the connection should send a graceful GOAWAY.
    pub(crate) goaway: Notify,
    /// Signalled when the connection should be dropped at once, streams and all (the gRPC
    /// `x-mock-grpc-break-after` knob: a node that breaks its streams after their headers).
    pub(crate) kill: Notify,
    /// End the connection with RST (`SO_LINGER` 0, no FIN) when its socket is closed.
    reset: AtomicBool,
}

#[derive(Debug)]
struct IdleState {
    in_flight: u32,
    /// When the last response finished (or the connection was accepted).
    since: Instant,
    /// `bytes_read` at that moment: any byte after it is the start of a new request.
    read_mark: u64,
}

impl ConnTracker {
    pub(crate) fn new() -> Self {
        Self {
            bytes_read: AtomicU64::new(0),
            idle: Mutex::new(IdleState {
                in_flight: 0,
                since: Instant::now(),
                read_mark: 0,
            }),
            became_idle: Notify::new(),
            exempt: AtomicBool::new(false),
            streams: AtomicU64::new(0),
            goaway: Notify::new(),
            kill: Notify::new(),
            reset: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, IdleState> {
        // Every update is a single step, so a poisoned state is still consistent.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the request's HTTP version; returns a guard that counts the request as in flight
    /// until dropped (attach it to the response body). h2 connections become exempt.
    pub(crate) fn start(self: &Arc<Self>, version: Version) -> InFlight {
        if version >= Version::HTTP_2 {
            self.exempt();
        }
        self.lock().in_flight += 1;
        InFlight {
            tracker: Arc::clone(self),
        }
    }

    /// Counts one non-control stream; on an h2 connection, asks for a graceful GOAWAY once
    /// `goaway_after` (0 = never) streams have been seen.
    pub(crate) fn count_stream(&self, version: Version, goaway_after: u64) {
        let seen = self.streams.fetch_add(1, Ordering::Relaxed) + 1;
        if version >= Version::HTTP_2 && goaway_after > 0 && seen >= goaway_after {
            self.goaway.notify_one();
        }
    }

    /// Marks the connection as never idle-closed (it is being upgraded).
    pub(crate) fn exempt(&self) {
        self.exempt.store(true, Ordering::Relaxed);
    }

    /// Makes the connection end with RST instead of FIN when its socket is closed.
    pub(crate) fn reset_on_close(&self) {
        self.reset.store(true, Ordering::Relaxed);
    }

    /// Returns when the connection became idle, or `None` while it is busy.
    pub(crate) fn idle_since(&self) -> Option<Instant> {
        let idle = self.lock();
        let quiet = self.bytes_read.load(Ordering::SeqCst) == idle.read_mark;
        (idle.in_flight == 0 && quiet).then_some(idle.since)
    }
}

/// Counts one request as in flight while alive.
#[derive(Debug)]
pub(crate) struct InFlight {
    tracker: Arc<ConnTracker>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut idle = self.tracker.lock();
        idle.in_flight = idle.in_flight.saturating_sub(1);
        if idle.in_flight == 0 {
            idle.since = Instant::now();
            idle.read_mark = self.tracker.bytes_read.load(Ordering::SeqCst);
        }
        drop(idle);
        self.tracker.became_idle.notify_one();
    }
}

/// A response body that keeps its request counted as in flight until hyper drops it
/// (after the last byte is written, or when the client goes away).
#[derive(Debug)]
pub(crate) struct Tracked {
    inner: RespBody,
    _in_flight: InFlight,
}

impl Tracked {
    /// Takes a body and the request's in-flight guard; returns the body carrying the guard.
    pub(crate) fn new(inner: RespBody, in_flight: InFlight) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection that counts the bytes read from it.
pub(crate) struct CountingIo {
    pub(crate) inner: MockStream,
    pub(crate) tracker: Arc<ConnTracker>,
}

impl AsyncRead for CountingIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if read > 0 {
            let read = u64::try_from(read).unwrap_or(u64::MAX);
            self.tracker.bytes_read.fetch_add(read, Ordering::SeqCst);
        }
        polled
    }
}

/// `poll_write` and `poll_flush` of an IO wrapper that hands what it writes straight to its
/// `$field` (the wrappers differ in reading and shutting down, not in writing).
macro_rules! forward_writes {
    ($field:ident) => {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.$field).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.$field).poll_flush(cx)
        }
    };
}
pub(crate) use forward_writes;

impl AsyncWrite for CountingIo {
    forward_writes!(inner);

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.tracker.reset.load(Ordering::Relaxed) {
            // No FIN: the close in `drop` sends the RST.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for CountingIo {
    fn drop(&mut self) {
        if self.tracker.reset.load(Ordering::Relaxed) {
            if let Err(err) = self.inner.tcp().set_zero_linger() {
                eprintln!("mock-backend: SO_LINGER 0 failed: {err}");
            }
        }
    }
}

/// Sleeps until `deadline`, or forever when there is none.
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
