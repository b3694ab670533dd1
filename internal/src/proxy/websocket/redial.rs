//! The re-dial of a hop (SPEC section 5), without hyper: the socket keeps its handshake as the
//! bytes of an HTTP/1.1 request head ([`Handshake`]), a re-dial writes them to a fresh node
//! connection with `X-Hopped-From` (one write), reads the node's answer head with `httparse`, checks
//! it as an RFC 6455 client must (section 4.1: `101`, the accept key, the subprotocol and
//! extensions the first node agreed to), and keeps the bytes read past the head for the relay
//! ([`Stream::Node`]). No task, channel or per-header allocation per hop (a hop storm
//! re-dials thousands of sockets at once). Spawns nothing.

use std::io;

use bytes::{Bytes, BytesMut};
use http::header::{
    self, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::outcome::{Agreed, DialError, Negotiated};
use super::stream::Stream;
use crate::proxy::downstream::http1::rewind::Rewind;
use crate::proxy::headers::switches_to_websocket;
use crate::proxy::types::Proxy;
use crate::registry::Node;
use crate::tls::client::NodeStream;

/// Header naming the node a re-dialled socket came from (SPEC section 5).
pub(super) const HOPPED_FROM: HeaderName = HeaderName::from_static("x-hopped-from");
/// Largest answer head a re-dialled node may send, bytes (hyper's client default is far larger,
/// but a `101` carries a handful of fields).
const MAX_ANSWER_HEAD: usize = 16 * 1024;
/// Most fields an answer head may have.
const MAX_ANSWER_FIELDS: usize = 64;
/// First read buffer for the answer: a `101` head and a first frame fit.
const ANSWER_BUF: usize = 1024;
/// Length of a `Sec-WebSocket-Accept` value: base64 of a 20-byte SHA-1 (RFC 6455 section 4.2.2).
const ACCEPT_LEN: usize = 28;

/// The handshake a socket replays on every re-dial: the first handshake's request head as bytes.
/// Cheap to clone (the bytes are shared) and compact for an idle socket (one block, no map).
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    /// Request line and fields, each line ending in CRLF, without the closing empty line; without
    /// `X-Hopped-From` (each re-dial adds its own), with the extension offer of [`Handshake::replay`].
    head: Bytes,
    /// False if the first request had no `Host`: each re-dial then names the node's address.
    has_host: bool,
    /// The `Sec-WebSocket-Accept` a node must answer (RFC 6455 section 4.2.2); `None` without a key
    /// (no node can then answer rightly).
    accept: Option<[u8; ACCEPT_LEN]>,
}

impl Handshake {
    /// The replay of a first handshake `method` `path_and_query` with fields `headers` (the
    /// upstream fields as sent to the first node), given what the client `negotiated`: without an
    /// extension offer when it agreed to none, offering exactly its `permessage-deflate`
    /// parameters when it agreed to those (SPEC section 5, "Extensions and subprotocols").
    pub(super) fn replay(
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        negotiated: &Negotiated,
    ) -> Self {
        let mut head = Vec::with_capacity(
            64 + path_and_query.len()
                + headers
                    .iter()
                    .map(|(n, v)| n.as_str().len() + v.len() + 4)
                    .sum::<usize>(),
        );
        head.extend_from_slice(method.as_str().as_bytes());
        head.extend_from_slice(b" ");
        head.extend_from_slice(path_and_query.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers {
            if name == HOPPED_FROM || name == SEC_WEBSOCKET_EXTENSIONS {
                continue;
            }
            field(&mut head, name.as_str().as_bytes(), value.as_bytes());
        }
        match &negotiated.extensions {
            Agreed::None => {}
            // Exactly what the client agreed to, so a node that accepts the offer needs no
            // translation (RFC 7692 section 7.1: an offer's parameters bind the answer).
            Agreed::Deflate(p) => field(
                &mut head,
                SEC_WEBSOCKET_EXTENSIONS.as_str().as_bytes(),
                p.render().as_bytes(),
            ),
            Agreed::Other => {
                for value in headers.get_all(SEC_WEBSOCKET_EXTENSIONS) {
                    field(
                        &mut head,
                        SEC_WEBSOCKET_EXTENSIONS.as_str().as_bytes(),
                        value.as_bytes(),
                    );
                }
            }
        }
        let accept = headers.get(SEC_WEBSOCKET_KEY).and_then(|k| {
            let a = derive_accept_key(k.as_bytes());
            a.as_bytes().try_into().ok()
        });
        Handshake {
            head: Bytes::from(head),
            has_host: headers.contains_key(header::HOST),
            accept,
        }
    }

    /// The request head for a re-dial to `addr` (the node's `host:port`) from node `from`: the
    /// stored fields, `X-Hopped-From`, `Host` if the first request had none, and the empty line.
    /// A `from` or `addr` that is not a valid field value is left out.
    fn request(&self, addr: &str, from: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + from.len() + addr.len() + 40);
        out.extend_from_slice(&self.head);
        if HeaderValue::from_str(from).is_ok() {
            field(&mut out, HOPPED_FROM.as_str().as_bytes(), from.as_bytes());
        }
        if !self.has_host && HeaderValue::from_str(addr).is_ok() {
            field(&mut out, b"host", addr.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// Appends the field line `name: value` CRLF to `out`.
fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Re-dials `node` for a hop off node `from`: the replayed handshake `hs` on a new connection. The
/// node must answer `101` with the accept key of the handshake's key, the same subprotocol the client
/// agreed to (`negotiated`; a node that selects another is not used, SPEC section 5), and no
/// extension the client did not agree to (a `permessage-deflate` client takes a node with other
/// parameters or none: [`super::deflate::Plan`]). Returns the stream and the node's extensions.
///
/// # Errors
/// [`DialError::Connect`] when the connection (or TLS) failed, nothing sent;
/// [`DialError::Exchange`] when it failed after the request went out; [`DialError::Refused`] for
/// an answer that is not a matching `101`.
pub(super) async fn redial_node(
    p: &Proxy,
    node: &Node,
    hs: &Handshake,
    negotiated: &Negotiated,
    from: &str,
) -> Result<(Stream, Agreed), DialError> {
    let io = p.upstream.connect(node).await.map_err(DialError::Connect)?;
    exchange(io, hs.request(&node.addr, from), hs, negotiated).await
}

/// Writes the request head `request` (of `hs`) on the node connection `io` and reads the answer
/// head; returns the stream for the relay, holding the bytes read past the head.
///
/// # Errors
/// As [`redial_node`], but never [`DialError::Connect`].
async fn exchange(
    mut io: NodeStream,
    request: Vec<u8>,
    hs: &Handshake,
    negotiated: &Negotiated,
) -> Result<(Stream, Agreed), DialError> {
    io.write_all(&request).await.map_err(DialError::Exchange)?;
    drop(request);
    let mut buf = BytesMut::with_capacity(ANSWER_BUF);
    let (head_len, agreed) = loop {
        if buf.capacity() == buf.len() {
            buf.reserve(ANSWER_BUF);
        }
        if io.read_buf(&mut buf).await.map_err(DialError::Exchange)? == 0 {
            return Err(DialError::Exchange(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the node closed the connection before its answer head",
            )));
        }
        if let Some(found) = answer(&buf, hs, negotiated)? {
            break found;
        }
        if buf.len() >= MAX_ANSWER_HEAD {
            return Err(DialError::Refused(format!(
                "answer head larger than {MAX_ANSWER_HEAD} bytes"
            )));
        }
    };
    // Copied out (usually the node's first frame, a few bytes) so the read block goes now.
    let early = Bytes::copy_from_slice(&buf[head_len..]);
    Ok((Stream::Node(Rewind::new(early, io)), agreed))
}

/// Parses and checks the answer head at the start of `buf`: `Some((its length, the extensions it
/// accepted))` once complete and a matching `101`, `None` while incomplete.
///
/// # Errors
/// [`DialError::Refused`]: malformed, not `101`, not a switch to WebSocket alone
/// ([`switches_to_websocket`]), or not what the first node agreed to.
fn answer(
    buf: &[u8],
    hs: &Handshake,
    negotiated: &Negotiated,
) -> Result<Option<(usize, Agreed)>, DialError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_ANSWER_FIELDS];
    let mut resp = httparse::Response::new(&mut fields);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(DialError::Refused(format!("malformed answer head: {e}"))),
    };
    let status = resp.code.unwrap_or(0);
    if status != 101 {
        return Err(DialError::Refused(format!("status {status}")));
    }
    let get = |name: &HeaderName| {
        resp.headers
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name.as_str()))
            .map(|f| f.value)
    };
    let all = |name: &'static str| {
        resp.headers
            .iter()
            .filter(move |f| f.name.eq_ignore_ascii_case(name))
            .map(|f| f.value)
    };
    if hs.accept.as_ref().map(<[u8; ACCEPT_LEN]>::as_slice) != get(&SEC_WEBSOCKET_ACCEPT) {
        return Err(DialError::Refused(
            "Sec-WebSocket-Accept does not match the key".into(),
        ));
    }
    if get(&SEC_WEBSOCKET_PROTOCOL) != negotiated.protocol.as_ref().map(HeaderValue::as_bytes) {
        return Err(DialError::Refused(
            "the node selected a different subprotocol".into(),
        ));
    }
    let agreed = Agreed::of(
        resp.headers
            .iter()
            .filter(|f| {
                f.name
                    .eq_ignore_ascii_case(SEC_WEBSOCKET_EXTENSIONS.as_str())
            })
            .map(|f| f.value),
    );
    let fits = matches!(
        (&negotiated.extensions, &agreed),
        (_, Agreed::None)
            | (Agreed::Deflate(_), Agreed::Deflate(_))
            | (Agreed::Other, Agreed::Other)
    );
    if !fits {
        return Err(DialError::Refused(
            "the node accepted an extension that was not offered".into(),
        ));
    }
    if !switches_to_websocket(all("upgrade"), all("connection")) {
        return Err(DialError::Refused(
            "the 101 does not switch to websocket alone".into(),
        ));
    }
    Ok(Some((len, agreed)))
}

#[cfg(test)]
#[path = "redial_tests.rs"]
mod tests;
