//! The request head the gateway writes to an HTTP/1.1 node, in the client half of the codec (RFC
//! 9112 sections 3, 5, 6; the rules hyper's client applied, so nodes see the same requests as
//! before). The node's response head is [`super::head`]'s.
//!
//! Request head ([`encode_request`]), rule by rule:
//! - Section 3: `method SP request-target SP HTTP/1.1 CRLF`, the target in origin form (the
//!   path and query the route phase settled).
//! - Section 5: the fields as given, one `name: value CRLF` line each, names in lower case (as
//!   hyper sent them).
//! - Section 6: a `Content-Length` given frames the body (sent once, however many lines of the
//!   one value the client gave, RFC 9110 section 8.6); else a body known to be empty gets
//!   none (`Content-Length: 0` for `POST`, `PUT` and `PATCH`, whose empty body is content, RFC
//!   9110 section 8.6), a body of known size gets its length, and any other body is chunked.

use http::{header, Method};

use crate::proxy::upstream::request::NodeRequest;

/// Serialises the request head `req` for an HTTP/1.1 node into `dst` (cleared first): method,
/// target (origin form), fields, then the forwarding fields kept beside the map (SPEC section 4;
/// `X-Forwarded-Host` from the request's host), and the framing field the module docs' rules add
/// for a body whose exact size is `exact` (`None`: unknown) and that is known to be empty when
/// `empty`. Returns how the body is to be sent: `Some(n)` exactly `n` bytes, `None` chunked.
pub(crate) fn encode_request(
    dst: &mut Vec<u8>,
    req: &NodeRequest<'_>,
    exact: Option<u64>,
    empty: bool,
) -> Option<u64> {
    let (method, headers) = (req.method, req.headers);
    dst.clear();
    dst.extend_from_slice(method.as_str().as_bytes());
    dst.push(b' ');
    dst.extend_from_slice(req.target.as_str().as_bytes());
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    let mut given = None;
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH {
            if given.is_some() {
                // A length repeated on another line (the request judge let only one value
                // through): the node gets it once.
                continue;
            }
            given = std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
            if given.is_none() {
                // Not a length: never passed on (the body is framed below instead).
                continue;
            }
        } else if name == header::TRANSFER_ENCODING {
            // Hop-by-hop: the body's coding is this hop's choice.
            continue;
        }
        field(dst, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(f) = req.forwarded {
        field(dst, b"x-forwarded-for", f.peer.as_bytes());
        field(dst, b"x-forwarded-proto", f.proto.as_bytes());
        if let Some(h) = req.host {
            field(dst, b"x-forwarded-host", h.as_bytes());
        }
    }
    let framing = match (given, exact, empty) {
        (Some(n), _, _) => Some(n),
        (None, _, true) => {
            if matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
                field(dst, b"content-length", b"0");
            }
            Some(0)
        }
        (None, Some(n), false) => {
            use std::io::Write as _;
            write!(dst, "content-length: {n}\r\n").expect("writing to a Vec never fails");
            Some(n)
        }
        (None, None, false) => {
            field(dst, b"transfer-encoding", b"chunked");
            None
        }
    };
    dst.extend_from_slice(b"\r\n");
    framing
}

fn field(dst: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    dst.extend_from_slice(name);
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value);
    dst.extend_from_slice(b"\r\n");
}

#[cfg(test)]
#[path = "request_head_tests.rs"]
mod tests;
