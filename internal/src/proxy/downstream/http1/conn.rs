//! The HTTP/1.x connection driver: one downstream connection served in its own task, request after
//! request (RFC 9112 section 9).
//!
//! - Heads are read into one buffer and parsed by [`super::request::parse`]; a refused head is
//!   answered with the gateway's JSON error (phase 5 through [`Proxy::refused`]) and
//!   `Connection: close`, and nothing after it is read (CASE-13: nothing smuggled is forwarded).
//! - The request runs the phases ([`Proxy::handle`]) with a body read off this connection
//!   ([`super::body::ConnBody`]); the answer's head and its first body bytes go out in one
//!   `writev`, the rest streams with the encoding [`super::response::encode_head`] chose.
//! - Pipelined requests (section 9.3.2) are answered in order: bytes after a head stay in the
//!   buffer for the next one.
//! - The connection stays open after an answer only if the request allows it (section 9.3), its
//!   body was read to the end (else its rest could be read as a request) and the gateway is not
//!   draining; otherwise the answer says `Connection: close` and the connection closes after it.
//! - The header read timeout (SPEC section 4) is one connection-level deadline, re-armed at the
//!   first byte of each head; an idle keep-alive connection has none (as before).
//! - Drain: an idle connection closes at once; an in-flight request finishes, answered with
//!   `Connection: close`. In an upgrade a cleartext connection moves instead ([`super::leave`]).
//! - A client's end of stream (half-close) ends the connection once the request in flight, if
//!   any, was answered.
//! - An upgrade request (`Upgrade` on HTTP/1.1, or `CONNECT`) runs the phases like any other, with
//!   an [`OnUpgrade`](super::upgrade::OnUpgrade) for the WebSocket phase. A `101` answer is
//!   written here, then the raw socket, with the bytes read past the head in front, is handed on
//!   ([`super::upgrade`]) and the driver ends; any other answer closes the connection after it
//!   (what follows an upgrade head may not be HTTP/1.x: CASE-13).

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::io::AsyncWrite;

use super::body::{lock, BodyRead, ConnBody, Io, Shared};
use super::leave::{self, close};
use super::request::{self, Framing};
use super::response::{self, Answering, BodyLen, Encoding};
use super::upgrade::{self, Socket};
use crate::drain;
use crate::proxy::body::ProxyBody;
use crate::proxy::downstream::Handover;
use crate::proxy::http1_codec::chunked::{self, CHUNK_END, LAST_CHUNK};
use crate::proxy::http1_codec::fields::NodeAnswer;
use crate::proxy::http1_codec::head::HeadLimits;
use crate::proxy::types::{DownstreamConn, Proxy};

/// Serves HTTP/1.x requests on `io` (with `rbuf` already read off it) until the connection ends;
/// see the module docs.
/// Kept as one function: the per-request hot path; a split would pass its loop state around.
pub async fn serve<I: Socket>(
    io: I,
    rbuf: BytesMut,
    proxy: Arc<Proxy>,
    dc: Arc<DownstreamConn>,
    watch: drain::Watch,
) {
    let limits = HeadLimits::from(&proxy.settings.limits);
    let head_timeout = proxy.settings.limits.header_read_timeout;
    let shared: Shared<I> = Arc::new(Mutex::new(Io {
        io,
        rbuf,
        body: BodyRead::Length(0),
        continue_left: None,
        request: 0,
    }));
    let deadline = tokio::time::sleep(head_timeout);
    tokio::pin!(deadline);
    let mut armed = false;
    let mut draining = watch.is_signaled();
    // One wait for the shutdown signal for the whole connection, kept across requests: made per
    // wait for a head, it registered and removed a waiter on the signal every request.
    let mut stop_watch = watch.clone();
    let stop = async move { stop_watch.signaled().await };
    tokio::pin!(stop);
    let mut out = Vec::with_capacity(512);
    loop {
        // One lock for the parse, what is left after it and the body reader's state for a
        // parsed head (each lock is two atomic operations).
        let (parsed, pending, gen) = {
            let mut g = lock(&shared);
            let parsed = if g.rbuf.is_empty() {
                Ok(None)
            } else {
                request::parse(&mut g.rbuf, &limits)
            };
            if let Ok(Some(head)) = &parsed {
                g.request += 1;
                g.body = BodyRead::new(head.framing);
                g.continue_left = match head.framing {
                    Framing::Length(0) => None,
                    _ => head.expect_continue.then_some(0),
                };
            }
            (parsed, !g.rbuf.is_empty(), g.request)
        };
        let head = match parsed {
            Ok(Some(head)) => head,
            Err(why) => {
                let seen = request::line_seen(&lock(&shared).rbuf, &limits);
                // Answered in the client's version when its request line said it (RFC 9110
                // section 6.2: a server answers with its own major version, and HTTP/1.0 with
                // 1.0), and without a body to a `HEAD` (section 9.3.2).
                let method = match seen.method {
                    Some(Method::HEAD) => Method::HEAD,
                    _ => Method::GET,
                };
                let http10 = seen.version == Some(http::Version::HTTP_10);
                let resp = proxy.refused(why.into_error(), &dc, seen);
                let a = Answering {
                    method: &method,
                    http10,
                    keep_alive: false,
                };
                let _ = write_response(&shared, NodeAnswer::from(resp), a, &mut out).await;
                close(&shared).await;
                return;
            }
            Ok(None) => {
                let moving = draining && leave::moves::<I>(&proxy.mover);
                if moving || (draining && !pending) {
                    let mover = moving.then_some(&*proxy.mover);
                    leave::leave(shared, mover, dc.peer).await;
                    return;
                }
                if pending && !armed {
                    armed = true;
                    deadline
                        .as_mut()
                        .reset(tokio::time::Instant::now() + head_timeout);
                }
                tokio::select! {
                    biased;
                    r = poll_fn(|cx| lock(&shared).poll_fill(cx)) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(_) => continue,
                    },
                    () = &mut deadline, if armed => {
                        tracing::debug!(peer = %dc.peer, "request head not complete within the header read timeout");
                        return;
                    }
                    () = &mut stop, if !draining => {
                        draining = true;
                        continue;
                    }
                }
            }
        };
        armed = false;
        let method = head.parts.method.clone();
        let http10 = head.parts.version == http::Version::HTTP_10;
        let body: ProxyBody = match head.framing {
            // A zero-sized body: boxing it allocates nothing.
            Framing::Length(0) => http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed_unsync(),
            Framing::Length(n) => ConnBody::new(shared.clone(), Some(n), gen).boxed_unsync(),
            Framing::Chunked => ConnBody::new(shared.clone(), None, gen).boxed_unsync(),
        };
        let req = Request::from_parts(head.parts, body);
        let (handoff, on_upgrade) = match head.upgrade {
            true => {
                let (h, on) = upgrade::pending();
                (Some(h), Some(on))
            }
            false => (None, None),
        };
        let resp = match proxy
            .serve(
                req,
                &dc,
                Handover {
                    on_upgrade,
                    present: head.present,
                },
            )
            .await
        {
            Ok(r) => r,
            Err(never) => match never {},
        };
        draining |= watch.is_signaled();
        let body_done = lock(&shared).body.is_done();
        let switching = resp.response.status() == StatusCode::SWITCHING_PROTOCOLS;
        let a = Answering {
            method: &method,
            http10,
            // An upgrade head is the connection's last HTTP/1.x request (module docs).
            keep_alive: head.keep_alive
                && body_done
                && (!draining || leave::moves::<I>(&proxy.mover))
                && !head.upgrade,
        };
        let written = write_response(&shared, resp, a, &mut out).await;
        match (written, handoff) {
            (Ok(_), Some(handoff)) if switching && body_done => {
                hand_on(shared, handoff).await;
                return;
            }
            (Ok(true), _) => {}
            _ => {
                close(&shared).await;
                return;
            }
        }
    }
}

/// Hands the socket of `shared`, with its unread bytes in front, to the upgrade's holder once its
/// `101` went out; closes it if nobody waits for it, or if a request body still holds it.
async fn hand_on<I: Socket>(shared: Shared<I>, handoff: upgrade::Handoff) {
    let io = match Arc::try_unwrap(shared) {
        Ok(m) => m.into_inner().unwrap_or_else(|e| e.into_inner()),
        Err(shared) => {
            close(&shared).await;
            return;
        }
    };
    let Io { io, rbuf, .. } = io;
    // Copied: the read buffer (8 KiB or more) must not live on with an idle socket (memory per
    // idle WebSocket); usually nothing followed the head.
    let early = match rbuf.is_empty() {
        true => Bytes::new(),
        false => Bytes::copy_from_slice(&rbuf),
    };
    drop(rbuf);
    if let Err(mut socket) = handoff.give(io.upgraded(early)) {
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut socket).await;
    }
}

/// Writes `resp` as the answer `a` describes: head and first body bytes in one `writev`, then
/// the rest of the body as it comes, and flushes the socket if it buffers writes
/// ([`Socket::BUFFERS_WRITES`]). Returns whether the connection stays open.
///
/// # Errors
/// The socket's write error; a body that failed mid-answer (the connection must close).
/// Kept as one function: the per-request hot path, one pass over the answer's frames.
async fn write_response<I: Socket>(
    shared: &Shared<I>,
    answer: NodeAnswer<ProxyBody>,
    a: Answering<'_>,
    out: &mut Vec<u8>,
) -> io::Result<bool> {
    let (parts, mut body) = answer.response.into_parts();
    let reason = parts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| r.as_bytes());
    let len = BodyLen {
        exact: body.size_hint().exact(),
        empty: body.is_end_stream(),
    };
    out.clear();
    let fields = response::Fields {
        node: answer.node_fields.as_ref(),
        map: &parts.headers,
    };
    let head = response::encode_head(out, parts.status, reason, fields, a, len);
    let (enc, mut keep, send_trailers) = (head.encoding, head.keep_alive, head.trailers);
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        // No further HTTP/1.x on this connection: it is handed on, or closed.
        keep = false;
    }
    let mut head_sent = false;
    let mut left = match enc {
        Encoding::Length(n) => n,
        _ => 0,
    };
    let mut size = [0u8; 18];
    loop {
        // The first frame only if it is ready: a head is never held back for a slow body.
        let frame = if head_sent {
            body.frame().await
        } else {
            let ready = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(f) => Poll::Ready(Some(f)),
                Poll::Pending => Poll::Ready(None),
            })
            .await;
            match ready {
                Some(f) => f,
                None => {
                    write_all(shared, &mut [IoSlice::new(out)]).await?;
                    head_sent = true;
                    continue;
                }
            }
        };
        let head: &[u8] = if head_sent { &[] } else { out };
        head_sent = true;
        match frame {
            None => {
                let tail = if enc == Encoding::Chunked {
                    LAST_CHUNK
                } else {
                    &[]
                };
                write_all(shared, &mut [IoSlice::new(head), IoSlice::new(tail)]).await?;
                // A body shorter than its Content-Length leaves the client waiting for the rest.
                keep &= left == 0;
                break;
            }
            Some(Err(e)) => {
                if !head.is_empty() {
                    // Nothing of the answer was sent; the client sees the connection close.
                    tracing::debug!(error = %e, "response body failed before its first byte");
                } else {
                    tracing::debug!(error = %e, "response body failed mid-answer");
                }
                return Err(io::Error::other(e));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    match enc {
                        Encoding::Chunked if !data.is_empty() => {
                            let tail = if end { LAST_CHUNK } else { &[] };
                            write_all(
                                shared,
                                &mut [
                                    IoSlice::new(head),
                                    IoSlice::new(chunked::chunk_head(data.len(), &mut size)),
                                    IoSlice::new(&data),
                                    IoSlice::new(CHUNK_END),
                                    IoSlice::new(tail),
                                ],
                            )
                            .await?;
                            if end {
                                drain_body(&mut body).await;
                                break;
                            }
                        }
                        Encoding::Length(_) => {
                            let n = usize::try_from(left).map_or(data.len(), |l| l.min(data.len()));
                            left -= n as u64;
                            if n < data.len() {
                                keep = false;
                            }
                            write_all(shared, &mut [IoSlice::new(head), IoSlice::new(&data[..n])])
                                .await?;
                        }
                        Encoding::CloseDelimited => {
                            write_all(shared, &mut [IoSlice::new(head), IoSlice::new(&data)])
                                .await?;
                        }
                        Encoding::Chunked | Encoding::Empty => {
                            write_all(shared, &mut [IoSlice::new(head)]).await?;
                        }
                    }
                }
                Err(frame) => {
                    let trailers = frame.into_trailers().ok();
                    // Only a trailer section is built; the plain last chunk is a constant.
                    let last: std::borrow::Cow<'_, [u8]> = match (&trailers, enc) {
                        (Some(t), Encoding::Chunked) if send_trailers => {
                            chunked::last_chunk_with(t).into()
                        }
                        (_, Encoding::Chunked) => LAST_CHUNK.into(),
                        _ => (&[][..]).into(),
                    };
                    write_all(shared, &mut [IoSlice::new(head), IoSlice::new(&last)]).await?;
                    drain_body(&mut body).await;
                    break;
                }
            },
        }
    }
    if I::BUFFERS_WRITES {
        poll_fn(|cx| Pin::new(&mut lock(shared).io).poll_flush(cx)).await?;
    }
    Ok(keep)
}

/// Polls a body whose answer is complete to its end, so its completion runs (pool, access log).
async fn drain_body(body: &mut ProxyBody) {
    while let Some(Ok(_)) = body.frame().await {}
}

/// Writes every byte of `bufs` (empty slices skipped) with vectored writes.
async fn write_all<I: AsyncWrite + Unpin>(
    shared: &Shared<I>,
    bufs: &mut [IoSlice<'_>],
) -> io::Result<()> {
    let mut bufs = bufs;
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut lock(shared).io).poll_write_vectored(cx, bufs)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}
