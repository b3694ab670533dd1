//! One HTTP/1.1 connection to a node ([`NodeConn`]) and one exchange on it ([`send`]), driven in
//! the task of the request that uses it: no connection task, no channel between the request and
//! its connection.
//!
//! An exchange:
//! 1. writes the request head ([`super::request_head::encode_request`]); a write failure here hands
//!    the request back unsent (the node cannot act on a partial head);
//! 2. writes the body ([`super::pump::Pump`]: `Content-Length` bytes, or chunked) while
//!    it reads the answer, so a node may answer before the body is all sent (an early 413, a
//!    refusal of `Expect: 100-continue`) and a write error does not hide the answer that explains it;
//! 3. parses the answer's head ([`super::head::parse_response`]), skipping interim answers: a
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

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body::Body as _;

use super::body::NodeBody;
use super::head::{self, ResponseHead};
pub use super::io::{NodeConn, NodeError};
use super::pool::{self, Home};
use super::pump::{Pump, PumpError};
use super::request_head;
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::expect::ContinueGate;
use crate::proxy::http1_codec::fields::NodeAnswer;
use crate::proxy::upstream::request::{NodeRequest, SendError};
use crate::tls::client::NodeStream;

/// Sends `head` (origin-form target, HTTP/1.1) and `body` on `conn` and returns the node's
/// answer, whose body reads on from `conn` and returns it to `home` after a clean end (module
/// docs). `reused` says whether `conn` came from the pool (it may be stale).
///
/// # Errors
/// [`SendError::NotSent`] with `body` when the head could not be written;
/// [`SendError::Stale`] when a reused connection was closed or reset before any byte of an answer;
/// [`SendError::Sent`] otherwise (its [`NodeError`] says what failed; a `101` is one).
pub async fn send(
    conn: NodeConn,
    reused: bool,
    head: NodeRequest<'_>,
    body: ProxyBody,
    home: Home,
) -> Result<NodeAnswer<NodeBody>, SendError> {
    match exchange(conn, reused, head, body, home, false).await? {
        Answered::Answer(r) => Ok(r),
        Answered::Switched { .. } => unreachable!("a 101 is an error unless an upgrade was asked"),
    }
}

/// A WebSocket handshake's answer (RFC 6455 section 4.1): the connection itself after a `101`, or
/// any other answer as an ordinary response.
#[derive(Debug)]
pub enum Handshook {
    /// `101 Switching Protocols`: the answer's head, and the node's stream with the bytes read
    /// past that head (often the node's first frame) to be read first.
    Switched {
        /// Status, version and fields of the `101`.
        head: http::response::Parts,
        /// The node's stream.
        io: NodeStream,
        /// Bytes read past the head.
        early: Bytes,
    },
    /// Any other answer, its body read off the connection ([`NodeBody`]).
    Answer(Response<NodeBody>),
}

/// Sends the upgrade request `head` (a WebSocket handshake, no body) on a fresh `conn`; a `101`
/// to WebSocket hands the connection over ([`Handshook::Switched`]), any other answer streams as
/// usual and its connection is then closed (`home`'s ttl should be zero).
///
/// # Errors
/// As [`send`] (never [`SendError::Stale`]: the connection is fresh); a `101` that switches to
/// anything but WebSocket alone ([`crate::proxy::headers::switches_to_websocket`]) is
/// [`NodeError::UpgradeNotOffered`], and its connection is closed (SPEC section 4).
pub async fn handshake(
    conn: NodeConn,
    head: NodeRequest<'_>,
    home: Home,
) -> Result<Handshook, SendError> {
    let body = crate::proxy::body::full(Bytes::new());
    Ok(match exchange(conn, false, head, body, home, true).await? {
        // Asked with `raw_answer: false` (a handshake's answer reaches hyper's map or the
        // relay), so every field is in the map.
        Answered::Answer(r) => Handshook::Answer(r.response),
        Answered::Switched { head, io, early } => {
            let h = &head.headers;
            if !crate::proxy::headers::switches_to_websocket(
                h.get_all(http::header::UPGRADE)
                    .iter()
                    .map(|v| v.as_bytes()),
                h.get_all(http::header::CONNECTION)
                    .iter()
                    .map(|v| v.as_bytes()),
            ) {
                // Dropping the stream closes the node connection: it is never pooled.
                drop(io);
                return Err(SendError::Sent(Box::new(NodeError::UpgradeNotOffered)));
            }
            Handshook::Switched { head, io, early }
        }
    })
}

/// What [`exchange`] returns: [`Handshook`] by another name, private to the two entry points.
// The large variant is the common one (every answer); boxing it would cost an allocation per
// request, and the value lives only from `exchange` to its two callers.
#[allow(clippy::large_enum_variant)]
enum Answered {
    Answer(NodeAnswer<NodeBody>),
    Switched {
        head: http::response::Parts,
        io: NodeStream,
        early: Bytes,
    },
}

/// Steps 1–4 of the module docs; with `upgrade`, a `101` is the final answer.
async fn exchange(
    mut conn: NodeConn,
    reused: bool,
    req: NodeRequest<'_>,
    body: ProxyBody,
    mut home: Home,
    upgrade: bool,
) -> Result<Answered, SendError> {
    let (exact, empty) = (body.size_hint().exact(), body.is_end_stream());
    let length = request_head::encode_request(conn.wbuf(), &req, exact, empty);
    if let Err(e) = conn.write_head().await {
        return Err(SendError::NotSent(Box::new(NodeError::Write(e)), body));
    }
    let gate = req.gate;
    let mut pump = Pump::new(body, length);
    let mut read_any = false;
    let mut write_error = None;
    let head = poll_fn(|cx| {
        let mut ask = Ask {
            pump: &mut pump,
            method: req.method,
            gate,
            upgrade,
            read_any: &mut read_any,
            write_error: &mut write_error,
        };
        poll_head(&mut conn, cx, &mut ask)
    })
    .await;
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
    let (framing, reusable) = (head.framing, head.reusable);
    home.ttl = pool::ttl(home.ttl, head.keep_alive_timeout);
    let switching = head.status == StatusCode::SWITCHING_PROTOCOLS;
    let (parts, node_fields) = match head.into_parts(req.raw_answer && !upgrade) {
        Ok(p) => p,
        Err(e) => return Err(SendError::Sent(Box::new(NodeError::from(e)))),
    };
    if switching {
        let (io, early) = conn.into_parts();
        return Ok(Answered::Switched {
            head: parts,
            io,
            early,
        });
    }
    let body = NodeBody::new(conn, framing, reusable, pump, home);
    Ok(Answered::Answer(NodeAnswer {
        response: Response::from_parts(parts, body),
        node_fields,
    }))
}

/// What the head's reader works with besides the connection.
struct Ask<'a> {
    pump: &'a mut Pump,
    method: &'a Method,
    gate: Option<&'a ContinueGate>,
    /// A `101` ends the exchange (an upgrade was asked for).
    upgrade: bool,
    /// Set once any byte of an answer arrived.
    read_any: &'a mut bool,
    /// Why writing the body failed, kept while the answer that may explain it is read.
    write_error: &'a mut Option<io::Error>,
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
    ask: &mut Ask<'_>,
) -> Poll<Result<ResponseHead, NodeError>> {
    let (pump, method, gate, upgrade) = (&mut *ask.pump, ask.method, ask.gate, ask.upgrade);
    let (read_any, write_error) = (&mut *ask.read_any, &mut *ask.write_error);
    if let Poll::Ready(Err(e)) = pump.poll(conn.io_mut(), cx) {
        match e {
            PumpError::Body(e) => return Poll::Ready(Err(NodeError::Body(e))),
            PumpError::Length => return Poll::Ready(Err(NodeError::BodyLength)),
            // Kept: the node's answer may explain it (read on below).
            PumpError::Write(w) => *write_error = Some(w),
        }
    }
    loop {
        while !conn.rbuf().is_empty() {
            let Some(head) = head::parse_response(conn.rbuf(), method)? else {
                break;
            };
            match head.status {
                StatusCode::CONTINUE => {
                    if let Some(g) = gate {
                        g.opened();
                    }
                }
                StatusCode::SWITCHING_PROTOCOLS if upgrade => return Poll::Ready(Ok(head)),
                StatusCode::SWITCHING_PROTOCOLS => {
                    return Poll::Ready(Err(NodeError::UnexpectedUpgrade))
                }
                s if s.is_informational() => {}
                _ => return Poll::Ready(Ok(head)),
            }
        }
        match ready!(conn.poll_fill(cx)) {
            Ok(0) => {
                return Poll::Ready(Err(match write_error.take() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Closed,
                }))
            }
            Ok(_) => *read_any = true,
            Err(e) => {
                return Poll::Ready(Err(match write_error.take() {
                    Some(w) if !*read_any => NodeError::Write(w),
                    _ => NodeError::Read(e),
                }))
            }
        }
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
