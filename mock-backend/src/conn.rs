//! Accept loops and per-connection driving for both listeners.
//!
//! Owns: the hyper connection builders and the per-connection idle keep-alive close
//! (`POST /control/keepalive`, on the in-flight accounting of [`crate::tracker`]).
//! Every connection is one task in the node's task set; it ends when the client leaves, when the
//! idle close fires (HTTP/1.1 only), or after a graceful close on shutdown. Never closes a
//! connection while a request on it is in flight or a request head is partly received.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::tls::MockStream;
use crate::tracker::{forward_writes, sleep_until_opt, ConnTracker, CountingIo};
use crate::State;
use tokio_rustls::TlsAcceptor;

/// HTTP/1.1 header field limit: far above the gateway's, so the mock never rejects what the
/// gateway forwards (the gateway's own limits are what tests exercise).
const H1_MAX_HEADERS: usize = 1000;
/// h2 header list limit (256 KiB), for the same reason (hyper's default is 16 KiB).
const H2_MAX_HEADER_LIST: u32 = 256 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Most a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the TLS handshake (when `tls` is given) within [`TLS_HANDSHAKE_TIMEOUT`]; `None` (logged)
/// when it fails.
async fn handshake(stream: TcpStream, tls: Option<&TlsAcceptor>) -> Option<MockStream> {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, MockStream::accept(stream, tls)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(err)) => {
            eprintln!("mock-backend: TLS handshake failed: {err}");
            None
        }
        Err(_) => {
            eprintln!("mock-backend: TLS handshake timed out");
            None
        }
    }
}

/// Accepts forever on the main port, serving each connection as HTTP/1.1 or h2c (over TLS when
/// `tls` is given).
pub(crate) async fn accept_http(
    listener: TcpListener,
    state: Arc<State>,
    tls: Option<TlsAcceptor>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().max_headers(H1_MAX_HEADERS);
    builder.http2().max_header_list_size(H2_MAX_HEADER_LIST);
    accept_each(listener, state, tls, builder, serve_http).await;
}

/// Accepts forever on the gRPC port, serving each connection as h2c only (h2 over TLS when `tls`
/// is given).
pub(crate) async fn accept_grpc(
    listener: TcpListener,
    state: Arc<State>,
    tls: Option<TlsAcceptor>,
) {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder.max_header_list_size(H2_MAX_HEADER_LIST);
    accept_each(listener, state, tls, builder, serve_grpc).await;
}

/// Accepts forever on `listener`; each connection is one task of the node's set that runs the TLS
/// handshake (when `tls` is given) and then `serve` with the shared `builder`.
async fn accept_each<B, F, Fut>(
    listener: TcpListener,
    state: Arc<State>,
    tls: Option<TlsAcceptor>,
    builder: B,
    serve: F,
) where
    B: Send + Sync + 'static,
    F: Fn(MockStream, Arc<State>, Arc<B>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let builder = Arc::new(builder);
    loop {
        let stream = accept(&listener).await;
        let (state2, builder, tls) = (Arc::clone(&state), Arc::clone(&builder), tls.clone());
        state.tasks.spawn(async move {
            if let Some(stream) = handshake(stream, tls.as_ref()).await {
                serve(stream, state2, builder).await;
            }
        });
    }
}

/// Returns the next accepted stream, retrying (with a short pause) on accept errors.
async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                // Nagle would hold small SSE events and ticks back; losing it is only slower.
                if let Err(err) = stream.set_nodelay(true) {
                    eprintln!("mock-backend: set_nodelay failed: {err}");
                }
                return stream;
            }
            Err(err) => {
                eprintln!("mock-backend: accept failed: {err}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

async fn serve_grpc(
    stream: MockStream,
    state: Arc<State>,
    builder: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
) {
    // Only the stream count (for GOAWAY) is used here: h2 connections are never idle-closed.
    let tracker = Arc::new(ConnTracker::new());
    let shutdown = state.shutdown.subscribe();
    let delay_ms = state.grpc_read_delay_ms.load(Ordering::Relaxed);
    let service = {
        let tracker = Arc::clone(&tracker);
        // Counted at its first stream: a TCP health probe's connect is not an h2 connection.
        let counted = AtomicBool::new(false);
        service_fn(move |req| {
            if !counted.swap(true, Ordering::Relaxed) {
                state.grpc_connections.fetch_add(1, Ordering::Relaxed);
            }
            crate::grpc::handle(Arc::clone(&state), Arc::clone(&tracker), req)
        })
    };
    let idle = std::future::pending();
    match Duration::from_millis(delay_ms) {
        Duration::ZERO => {
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            drive(conn, |c| c.graceful_shutdown(), &tracker, idle, shutdown).await;
        }
        delay => {
            let conn =
                builder.serve_connection(TokioIo::new(LateReads::new(stream, delay)), service);
            drive(conn, |c| c.graceful_shutdown(), &tracker, idle, shutdown).await;
        }
    }
}

/// A stream whose received bytes are handed on `delay` after they arrived (writes are
/// immediate): a node whose event loop is busy, so it sees a client's RST_STREAM late and keeps
/// sending DATA meanwhile (CASE-25 C). A reader task moves the bytes into a queue with their due
/// time; it ends with the stream.
struct LateReads {
    queue: tokio::sync::mpsc::Receiver<(Instant, Bytes)>,
    head: Option<(Instant, Bytes)>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    write: tokio::io::WriteHalf<MockStream>,
}

impl LateReads {
    fn new(stream: MockStream, delay: Duration) -> Self {
        use tokio::io::AsyncReadExt;
        let (mut read, write) = tokio::io::split(stream);
        let (tx, queue) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = read.read(&mut buf).await {
                let due = Instant::now() + delay;
                if tx
                    .send((due, Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        LateReads {
            queue,
            head: None,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            write,
        }
    }
}

impl AsyncRead for LateReads {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.head.is_none() {
            match this.queue.poll_recv(cx) {
                Poll::Ready(Some(item)) => this.head = Some(item),
                // The peer closed (or the socket failed): end of stream.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let (due, bytes) = this.head.as_mut().expect("set above");
        if Instant::now() < *due {
            this.sleep.as_mut().reset(*due);
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let n = bytes.len().min(buf.remaining());
        buf.put_slice(&bytes.split_to(n));
        if bytes.is_empty() {
            this.head = None;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for LateReads {
    forward_writes!(write);

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.write).poll_shutdown(cx)
    }
}

async fn serve_http(
    stream: MockStream,
    state: Arc<State>,
    builder: Arc<auto::Builder<TokioExecutor>>,
) {
    let tracker = Arc::new(ConnTracker::new());
    let io = TokioIo::new(CountingIo {
        inner: stream,
        tracker: Arc::clone(&tracker),
    });
    let shutdown = state.shutdown.subscribe();
    let idle = {
        let (tracker, state) = (Arc::clone(&tracker), Arc::clone(&state));
        async move {
            idle_close(Arc::clone(&tracker), state.idle_ms.subscribe()).await;
            if state.idle_reset.load(Ordering::Relaxed) {
                tracker.reset_on_close();
            }
        }
    };
    let service = {
        let tracker = Arc::clone(&tracker);
        service_fn(move |req| crate::http::handle(Arc::clone(&state), Arc::clone(&tracker), req))
    };
    let conn = builder.serve_connection_with_upgrades(io, service);
    drive(conn, |c| c.graceful_shutdown(), &tracker, idle, shutdown).await;
}

/// Polls `conn` to completion; starts its graceful shutdown (h1: close when idle, h2: GOAWAY)
/// when `idle` fires, the tracker asks for a GOAWAY, or the node stops.
async fn drive<C, E>(
    conn: C,
    graceful: impl Fn(Pin<&mut C>),
    tracker: &ConnTracker,
    idle: impl Future<Output = ()>,
    mut shutdown: watch::Receiver<bool>,
) where
    C: Future<Output = Result<(), E>>,
{
    tokio::pin!(conn);
    tokio::pin!(idle);
    let mut closing = false;
    loop {
        tokio::select! {
            // A client that goes away mid-request is routine for a test backend: the connection's
            // error has no one to be reported to, so it ends the task quietly.
            _ = conn.as_mut() => return,
            () = tracker.kill.notified() => return,
            () = &mut idle, if !closing => {
                graceful(conn.as_mut());
                closing = true;
            }
            () = tracker.goaway.notified(), if !closing => {
                graceful(conn.as_mut());
                closing = true;
            }
            // Err means the node's State is gone: stop as well.
            _ = shutdown.wait_for(|stop| *stop), if !closing => {
                graceful(conn.as_mut());
                closing = true;
            }
        }
    }
}

/// Resolves once the connection has been idle (no request in flight, no byte received since
/// the last response) for the configured `idle_ms`; never resolves while `idle_ms` is 0 or the
/// connection is exempt (h2, upgraded).
async fn idle_close(tracker: Arc<ConnTracker>, mut idle_ms: watch::Receiver<u64>) {
    loop {
        let ms = *idle_ms.borrow_and_update();
        if tracker.exempt.load(Ordering::Relaxed) {
            return std::future::pending().await;
        }
        if ms == 0 {
            if idle_ms.changed().await.is_err() {
                return std::future::pending().await;
            }
            continue;
        }
        let limit = Duration::from_millis(ms);
        let deadline = match tracker.idle_since() {
            Some(since) if Instant::now() >= since + limit => return,
            Some(since) => Some(since + limit),
            None => None,
        };
        // Re-evaluate on whichever comes first: the deadline, a response finishing, a new setting.
        tokio::select! {
            () = sleep_until_opt(deadline) => {}
            () = tracker.became_idle.notified() => {}
            changed = idle_ms.changed() => if changed.is_err() {
                return std::future::pending().await;
            }
        }
    }
}
