//! The serving of one downstream connection (SPEC section 4 and 10; shutdown as in the [`super`]
//! module docs): HTTP/2 by hyper's h2 server, HTTP/1.x by the gateway's own driver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::AsyncReadExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::drain;
use crate::proxy::downstream::http1 as own_h1;
use crate::proxy::downstream::http1::rewind::Rewind;
use crate::proxy::moving::MovedConn;
use crate::proxy::{DownstreamConn, Proxy};

/// hyper's server for what the gateway's own HTTP/1.x driver ([`crate::proxy::downstream::http1`]) does not
/// serve: HTTP/2 connections.
pub(super) struct DataServers {
    /// The HTTP/2 server, with the limits of `[limits.h2]`.
    pub(super) h2: http2::Builder<TokioExecutor>,
}

/// The servers for `p`'s listeners, with its `[limits]`.
pub(super) fn data_builder(p: &Proxy) -> DataServers {
    let l = &p.settings.limits;
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_header_list_size(l.h2.max_header_list)
        .max_concurrent_streams(l.h2.max_concurrent_streams)
        // A lifetime count of resets the library sends cuts honest long-lived connections
        // (hyperium/h2 #856); resets are limited as a rate by proxy::downstream::h2::watch instead.
        .max_local_error_reset_streams(None)
        // h2 ends a connection with more than 20 client-reset streams waiting to be accepted
        // (its rapid-reset guard). Every client RST_STREAM is already charged by proxy::downstream::h2::watch at
        // read time, within a burst of `h2_max_resets_per_second`; h2's cap of 20 only cut honest
        // cancellers whose frames queued up while the gateway's worker was busy for ~130 ms
        // (h2_abuse::honest_canceller_below_the_cap_is_never_cut on a loaded machine). Twice the
        // burst keeps it as a backstop the meter always reaches first.
        .max_pending_accept_reset_streams(
            (l.h2.max_resets_per_second.get() as usize)
                .saturating_mul(2)
                .max(20),
        )
        .keep_alive_interval(Duration::from_secs(30));
    DataServers { h2 }
}

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a connection accepted just before the drain signal still has to send its first bytes:
/// a client that has just connected sends its request within a round trip, and closing its socket
/// with the request arriving would reset it (an upgrade's old process resets no connection it
/// accepted, SPEC section 13). Its request is then served and answered with `Connection: close`.
const FIRST_BYTES_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Serves one downstream connection over any byte stream (TCP, or TLS over TCP with `tls` set):
/// the first bytes tell HTTP/2 (its preface, hyper's h2 server) from HTTP/1.x (the gateway's own
/// driver, [`crate::proxy::downstream::http1::conn`], which also hands an accepted WebSocket upgrade's socket
/// to the relay). `_permit`, the connection's share of `[limits] max_connections` (`None` for none),
/// is held until the connection ends.
pub(super) async fn serve_data<I>(
    mut io: I,
    peer: SocketAddr,
    proxy: Arc<Proxy>,
    builder: Arc<DataServers>,
    mut watch: drain::Watch,
    _permit: Option<OwnedSemaphorePermit>,
    tls: Option<crate::tls::server::TlsInfo>,
) where
    I: own_h1::upgrade::Socket,
{
    let _gauge = proxy
        .metrics
        .connection(if tls.is_some() { "https" } else { "http" });
    let dc = Arc::new(DownstreamConn::new(peer).with_tls(tls));
    let mut first = BytesMut::new();
    // Set by the drain signal: the first bytes are waited for until then, not longer.
    let mut until: Option<tokio::time::Instant> = None;
    while first.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&first) {
        if first.capacity() == 0 {
            first.reserve(8 * 1024);
        }
        tokio::select! {
            r = io.read_buf(&mut first) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = watch.signaled(), if until.is_none() => {
                until = Some(tokio::time::Instant::now() + FIRST_BYTES_GRACE);
            }
            () = tokio::time::sleep_until(until.unwrap_or_else(tokio::time::Instant::now)), if until.is_some() => return,
        }
    }
    if first.starts_with(H2_PREFACE) {
        serve_h2(
            Rewind::new(first.freeze(), io),
            &proxy,
            &builder,
            watch,
            &dc,
        )
        .await;
    } else {
        own_h1::conn::serve(io, first, proxy.clone(), dc.clone(), watch).await;
    }
    // The connection was its own affinity key: with it gone, so is the binding.
    forget_own_id(&proxy, &dc).await;
}

/// Removes the binding of `dc`'s own conn id, if the connection is its own affinity key (an
/// HTTP/2 connection without an affinity header, SPEC section 5): the connection ended or was
/// sent GOAWAY, so no later request can carry that id.
async fn forget_own_id(proxy: &Proxy, dc: &DownstreamConn) {
    if let Some(id) = dc.conn_id.get() {
        proxy.hopper.store().remove(id).await;
    }
}

/// Serves an idle HTTP/1.1 connection that moved from the old process in an upgrade (SPEC
/// section 13) with the gateway's own driver, from its buffered bytes on. It holds no share of
/// `[limits] max_connections` (it was admitted by the old process); a socket the runtime cannot
/// take is closed.
pub(super) async fn serve_moved(c: MovedConn, proxy: Arc<Proxy>, watch: drain::Watch) {
    let io = match c
        .socket
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(c.socket))
    {
        Ok(io) => io,
        Err(e) => {
            tracing::debug!(peer = %c.peer, error = %e, "moved connection not served");
            return;
        }
    };
    let _gauge = proxy.metrics.connection("http");
    let dc = Arc::new(DownstreamConn::new(c.peer));
    let first = BytesMut::from(&c.buffered[..]);
    own_h1::conn::serve(io, first, proxy.clone(), dc.clone(), watch).await;
    forget_own_id(&proxy, &dc).await;
}

/// hyper's service over the proxy for connection `dc`.
fn service(
    proxy: &Arc<Proxy>,
    dc: &Arc<DownstreamConn>,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = http::Response<crate::proxy::ProxyBody>,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<
        Output = Result<http::Response<crate::proxy::ProxyBody>, std::convert::Infallible>,
    > + Send,
> + Clone {
    let (proxy, dc) = (proxy.clone(), dc.clone());
    service_fn(move |req: http::Request<Incoming>| {
        let req = req.map(|b| b.map_err(Into::into).boxed_unsync());
        // Boxed: hyper's h2 server spawns one task per stream and moves the service future into
        // it (and tokio moves it again into the task cell and its output stage); the request's
        // future is tens of KiB, so unboxed those moves were half of the instructions of a gRPC
        // call (bench/README "HTTP/2 and gRPC per call").
        // The box is allocated before the future is made, so the future can be written into it
        // in place rather than built on the stack and copied (~11,000 instructions per call).
        let slot = Box::new_uninit();
        Box::into_pin(Box::write(slot, proxy.clone().handle(req, dc.clone())))
    })
}

/// `io` under the HTTP/2 abuse limits of `proxy` (SPEC section 4; CASE-25, CASE-26) on the raw
/// frames from `peer`, each GOAWAY for abuse counted by its reason.
fn watched<I>(
    io: Rewind<I>,
    proxy: &Proxy,
    peer: SocketAddr,
) -> crate::proxy::downstream::h2::watch::H2Watch<Rewind<I>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = &proxy.settings.limits;
    let abuse_metrics = proxy.metrics.clone();
    crate::proxy::downstream::h2::watch::H2Watch::new(
        io,
        limits.h2.max_resets_per_second.get(),
        limits.header_read_timeout,
        Arc::new(move |a: crate::proxy::downstream::h2::frames::Abuse| {
            abuse_metrics
                .h2_goaway
                .get_or_create(&crate::metrics::ReasonLabel { reason: a.reason() })
                .inc();
        }),
    )
    .from_source(peer.ip())
}

/// Serves an HTTP/2 connection (its preface in `io`) with hyper's h2 server: the connection's
/// whole life (serve, the drain signal, the GOAWAY of an h2 connection bound to a node that stops
/// being usable) is one `select!` loop whose arms share the connection state.
async fn serve_h2<I>(
    io: Rewind<I>,
    proxy: &Arc<Proxy>,
    builder: &DataServers,
    mut watch: drain::Watch,
    dc: &Arc<DownstreamConn>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let peer = dc.peer;
    let mut io = watched(io, proxy, peer);
    // The watch must see the preface before hyper writes its SETTINGS (it takes a connection
    // the gateway speaks on first for HTTP/1.x): it is read through the watch here, then
    // replayed to hyper, as hyper-util's version detection did.
    let mut preface = [0u8; H2_PREFACE.len()];
    if io.read_exact(&mut preface).await.is_err() {
        return;
    }
    let io = Rewind::new(bytes::Bytes::from_static(H2_PREFACE), io);
    let conn = builder
        .h2
        .serve_connection(TokioIo::new(io), service(proxy, dc));
    tokio::pin!(conn);
    let mut bound = dc.bound.subscribe();
    let mut node_signal: Option<tokio::sync::watch::Receiver<crate::registry::NodeSignal>> = None;
    let mut closing = false;
    loop {
        let node_changed = async {
            match node_signal.as_mut() {
                Some(rx) => rx.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(peer = %peer, error = %e, "downstream connection ended with error");
                }
                return;
            }
            _ = watch.signaled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            r = bound.changed() => {
                if r.is_err() { continue; }
                // Marked changed so its current state is checked at once: the node may have
                // started draining between the placement and this subscription.
                node_signal = bound.borrow_and_update().as_ref().map(|rt| {
                    let mut rx = rt.subscribe();
                    rx.mark_changed();
                    rx
                });
            }
            alive = node_changed, if !closing => {
                let usable = node_signal.as_ref().is_none_or(|rx| rx.borrow().usable);
                if alive && !usable {
                    // The h2 connection's node drains or was ejected: GOAWAY, in-flight streams finish,
                    // the client's next connection binds to a healthy node (SPEC section 5).
                    closing = true;
                    tracing::info!(peer = %peer, "node of this h2 connection is going away; sending GOAWAY");
                    forget_own_id(proxy, dc).await;
                    conn.as_mut().graceful_shutdown();
                } else if !alive {
                    node_signal = None;
                }
            }
        }
    }
}
