//! One HTTP/1.1 connection to a node ([`NodeConn`]) and one exchange on it ([`send`]), driven in
//! the task of the request that uses it: no connection task, no channel between the request and
//! its connection (issue 16).
//!
//! An exchange:
//! 1. writes the request head ([`super::node_head::encode_request`]); a write failure here hands
//!    the request back unsent (the node cannot act on a partial head);
//! 2. writes the body ([`super::node_pump::Pump`]: `Content-Length` bytes, or chunked) while
//!    it reads the answer, so a node may answer before the body is all sent (an early 413, a
//!    refusal of `Expect: 100-continue`) and a write error does not hide the answer that explains it;
//! 3. parses the answer's head ([`super::node_head::parse_response`]), skipping interim answers: a
//!    `100 Continue` opens the request's [`ContinueGate`] (RFC 9110 section 15.2.1), other 1xx are
//!    dropped, a `101` to a request without `Upgrade` is refused;
//! 4. returns the answer with a [`NodeBody`] that reads the rest off the connection and puts the
//!    connection back in the pool when the exchange ended cleanly.
//!
//! Failures are attributed as the retry rule needs them (SPEC section 4, [`SendError`]): the
//! request handed back unsent; a reused connection the node had closed (EOF or reset before any
//! byte of an answer: stale, CASE-21); or failed after sending.

use std::future::poll_fn;
use std::io;
use std::task::{ready, Context, Poll};

use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;

use super::node_body::NodeBody;
use super::node_head::{self, ResponseHead};
pub use super::node_io::{NodeConn, NodeError};
use super::node_pump::{Pump, PumpError};
use super::pool::{self, Home};
use crate::proxy::expect::ContinueGate;
use crate::proxy::send_error::SendError;
use crate::proxy::{BoxError, ProxyBody};

/// Sends `req` (origin-form target, HTTP/1.1) on `conn` and returns the node's answer, whose
/// body reads on from `conn` and returns it to `home` after a clean end (module docs). `reused`
/// says whether `conn` came from the pool (it may be stale).
///
/// # Errors
/// [`SendError::NotSent`] with `req` when its head could not be written;
/// [`SendError::Stale`] when a reused connection was closed or reset before any byte of an answer;
/// [`SendError::Sent`] otherwise (its [`NodeError`] says what failed).
pub async fn send(
    mut conn: NodeConn,
    reused: bool,
    req: Request<ProxyBody>,
    mut home: Home,
) -> Result<Response<NodeBody>, SendError> {
    let body = req.body();
    let (exact, empty) = (body.size_hint().exact(), body.is_end_stream());
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let length = node_head::encode_request(
        conn.wbuf(),
        req.method(),
        target,
        req.headers(),
        exact,
        empty,
    );
    if let Err(e) = conn.write_head().await {
        return Err(SendError::NotSent(Box::new(NodeError::Write(e)), req));
    }
    let (parts, body) = req.into_parts();
    let gate = parts.extensions.get::<ContinueGate>();
    let mut pump = Pump::new(body, length);
    let mut read_any = false;
    let head =
        poll_fn(|cx| poll_head(&mut conn, cx, &mut pump, &parts.method, gate, &mut read_any)).await;
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            let stale = reused && !read_any && is_closed(&e);
            let e: BoxError = Box::new(e);
            return Err(if stale {
                SendError::Stale(e)
            } else {
                SendError::Sent(e)
            });
        }
    };
    home.ttl = pool::ttl(home.ttl, &head.parts.headers);
    let body = NodeBody::new(conn, head.framing, head.reusable, pump, home);
    Ok(Response::from_parts(head.parts, body))
}

/// True if `e` is what a connection the node closed while it sat idle looks like: EOF, or a
/// reset or broken pipe, before any answer.
fn is_closed(e: &NodeError) -> bool {
    match e {
        NodeError::Closed => true,
        NodeError::Read(io) | NodeError::Write(io) => matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

/// Step 2 and 3 of the module docs: keeps the body flowing and reads until the final head.
fn poll_head(
    conn: &mut NodeConn,
    cx: &mut Context<'_>,
    pump: &mut Pump,
    method: &Method,
    gate: Option<&ContinueGate>,
    read_any: &mut bool,
) -> Poll<Result<ResponseHead, NodeError>> {
    if let Poll::Ready(Err(e)) = pump.poll(conn.io_mut(), cx) {
        match e {
            PumpError::Body(e) => return Poll::Ready(Err(NodeError::Body(e))),
            PumpError::Length => return Poll::Ready(Err(NodeError::BodyLength)),
            // Kept: the node's answer may explain it (read on below).
            PumpError::Write(_) => {}
        }
    }
    loop {
        while !conn.rbuf().is_empty() {
            let Some(head) = node_head::parse_response(conn.rbuf(), method)? else {
                break;
            };
            match head.parts.status {
                StatusCode::CONTINUE => {
                    if let Some(g) = gate {
                        g.opened();
                    }
                }
                StatusCode::SWITCHING_PROTOCOLS => {
                    return Poll::Ready(Err(NodeError::UnexpectedUpgrade))
                }
                s if s.is_informational() => {}
                _ => return Poll::Ready(Ok(head)),
            }
        }
        match ready!(conn.poll_fill(cx)) {
            Ok(0) => {
                return Poll::Ready(Err(match pump.take_write_error() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Closed,
                }))
            }
            Ok(_) => *read_any = true,
            Err(e) => {
                return Poll::Ready(Err(match pump.take_write_error() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Read(e),
                }))
            }
        }
    }
}

#[cfg(test)]
#[path = "node_conn_tests.rs"]
mod tests;
