//! Request-head checks hyper does not make for us, applied before anything is forwarded
//! (SPEC section 4 limits; CASES 13, 16). A refused head gets a JSON 4xx and, where the framing is
//! ambiguous, the connection is closed so no smuggled bytes are ever read as a request.
//!
//! On HTTP/1.x, [`crate::proxy::http1_codec::head`] has already judged the head as [`super::http1`]
//! parsed it (malformed or conflicting `Content-Length`, transfer codings, obs-fold, colon-less
//! lines, control characters, the request-line and header-block limits).
//! This module checks the parsed request, for every protocol: the request-target form (RFC 9112
//! section 3.2), any `Transfer-Encoding` other than exactly `chunked`, more than one `Host` line,
//! the request-target limit (414), and the header block size and count limits (431), all with
//! JSON bodies.

use http::{header, Request};

use crate::config::Limits;
use crate::proxy::error::ProxyError;

/// Checks `req`'s head against the framing rules and `limits`.
///
/// # Errors
/// [`ProxyError::BadRequest`] for ambiguous framing (the connection must close),
/// [`ProxyError::UriTooLong`] past `max_request_line`, [`ProxyError::HeadersTooLarge`] past
/// `max_header_bytes` or `max_headers`.
pub fn check_head<B>(req: &Request<B>, limits: &Limits) -> Result<(), ProxyError> {
    check_target(req)?;
    let uri = req.uri();
    let target = uri.path_and_query().map_or(1, |pq| pq.as_str().len())
        + uri
            .authority()
            .map_or(0, |a| a.as_str().len() + "http://".len());
    let line = req.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    if line > limits.max_request_line {
        return Err(ProxyError::UriTooLong {
            limit: limits.max_request_line,
        });
    }
    let headers = req.headers();
    if headers.len() > limits.max_headers {
        return Err(ProxyError::HeadersTooLarge {
            limit: format!("{} fields", limits.max_headers),
        });
    }
    // One pass: the counted bytes (each field line is "name: value\r\n"), the `Host` lines,
    // the `Transfer-Encoding` lines (at most one kept: a second is refused either way) and
    // whether a `Content-Length` is given.
    let (mut bytes, mut hosts, mut te_lines, mut length) = (0usize, 0usize, 0usize, false);
    let mut te: &[u8] = b"";
    for (k, v) in headers {
        bytes += k.as_str().len() + v.len() + 4;
        if k == header::HOST {
            hosts += 1;
        } else if k == header::TRANSFER_ENCODING {
            te_lines += 1;
            te = v.as_bytes();
        } else if k == header::CONTENT_LENGTH {
            length = true;
        }
    }
    if bytes > limits.max_header_bytes {
        return Err(ProxyError::HeadersTooLarge {
            limit: format!("{} bytes", limits.max_header_bytes),
        });
    }
    // RFC 9112 section 3.2: more than one Host line is a 400; which one would a node pick?
    if hosts > 1 {
        return Err(ProxyError::BadRequest("more than one Host header"));
    }
    if te_lines > 0 {
        // hyper drops Content-Length when Transfer-Encoding is present, so on HTTP/1.1 this never
        // fires: proxy::head refuses that case as the head is parsed. Kept for other parsers.
        if length {
            return Err(ProxyError::BadRequest(
                "Content-Length together with Transfer-Encoding",
            ));
        }
        // Only a single, exact `chunked` is unambiguous between every pair of parsers.
        if te_lines != 1 || !te.eq_ignore_ascii_case(b"chunked") {
            return Err(ProxyError::BadRequest(
                "Transfer-Encoding other than a single \"chunked\"",
            ));
        }
    }
    Ok(())
}

/// RFC 9112 section 3.2: a request-target is origin-form (`/path?query`), absolute-form
/// (`http://host/path`; every HTTP/2 request is read as this), `*` for `OPTIONS` only, or
/// authority-form (`host:port`) for `CONNECT` only. `CONNECT` itself is not judged here, but an
/// extended `CONNECT` (RFC 8441 section 4) is refused unless its `:protocol` is `websocket`: SPEC
/// section 4 forwards only WebSocket upgrades, and RFC 8441 section 4 forbids turning it into a
/// tunnel to `:authority`.
///
/// # Errors
/// [`ProxyError::BadRequest`] for any other form, and for an extended `CONNECT` to another
/// protocol (400, connection closed; on HTTP/2 the stream ends with the answer).
pub fn check_target<B>(req: &Request<B>) -> Result<(), ProxyError> {
    let uri = req.uri();
    if req.method() == http::Method::CONNECT {
        let protocol = req.extensions().get::<hyper::ext::Protocol>();
        if protocol.is_some_and(|p| !p.as_str().eq_ignore_ascii_case("websocket")) {
            return Err(ProxyError::BadRequest(
                "extended CONNECT for a protocol other than websocket",
            ));
        }
        return Ok(());
    }
    if uri.path() == "*" {
        return if req.method() == http::Method::OPTIONS {
            Ok(())
        } else {
            Err(ProxyError::BadRequest(
                "request-target \"*\" is only allowed with OPTIONS",
            ))
        };
    }
    if uri.scheme().is_some() {
        return Ok(());
    }
    if uri.authority().is_some() {
        return Err(ProxyError::BadRequest(
            "authority-form request-target is only allowed with CONNECT",
        ));
    }
    if !uri.path().starts_with('/') {
        return Err(ProxyError::BadRequest(
            "request-target is neither origin-form nor absolute-form",
        ));
    }
    Ok(())
}

/// Refuses a request whose declared `Content-Length` is over the route's `max_body` (bytes)
/// before anything is sent (SPEC section 4); a body without a declared length is counted as it
/// streams ([`crate::proxy::body::RequestBody`]).
///
/// # Errors
/// [`ProxyError::BodyTooLarge`] (413, connection closed).
pub fn check_declared_body<B>(req: &Request<B>, max_body: Option<u64>) -> Result<(), ProxyError> {
    let Some(limit) = max_body else {
        return Ok(());
    };
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn req(headers: &[(&str, &str)], uri: &str) -> Request<()> {
        let mut b = Request::post(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("valid")
    }

    #[test]
    fn framing_and_limits() {
        let l = Config::go_defaults().limits;
        assert!(check_head(&req(&[("transfer-encoding", "chunked")], "/"), &l).is_ok());
        assert!(check_head(&req(&[("content-length", "5")], "/"), &l).is_ok());
        for bad in [
            vec![("content-length", "52"), ("transfer-encoding", "chunked")],
            vec![("transfer-encoding", "chunked, chunked")],
            vec![
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            vec![("transfer-encoding", "gzip, chunked")],
            vec![("host", "a.test"), ("host", "b.test")],
        ] {
            assert!(
                matches!(
                    check_head(&req(&bad, "/"), &l),
                    Err(ProxyError::BadRequest(_))
                ),
                "{bad:?}"
            );
        }
        // RFC 9112 section 3.2 request-target forms.
        for (method, target, ok) in [
            ("GET", "/a?b", true),
            ("GET", "http://app.example.test/a", true),
            ("OPTIONS", "*", true),
            ("GET", "*", false),
            ("POST", "*", false),
            ("GET", "app.example.test:443", false),
            ("OPTIONS", "app.example.test:80", false),
            ("CONNECT", "app.example.test:443", true),
        ] {
            let r = Request::builder()
                .method(method)
                .uri(target)
                .body(())
                .expect("valid");
            assert_eq!(check_target(&r).is_ok(), ok, "{method} {target}");
        }
        // RFC 8441 section 4: only a WebSocket may be asked for with an extended CONNECT.
        for (protocol, ok) in [
            ("websocket", true),
            ("WebSocket", true),
            ("connect-udp", false),
            ("foo", false),
        ] {
            let r = Request::builder()
                .method("CONNECT")
                .version(http::Version::HTTP_2)
                .uri("https://app.example.test/")
                .extension(hyper::ext::Protocol::from_static(protocol))
                .body(())
                .expect("valid");
            assert_eq!(check_target(&r).is_ok(), ok, "{protocol}");
        }
        let long = format!("/{}", "a".repeat(17 * 1024));
        assert!(matches!(
            check_head(&req(&[], &long), &l),
            Err(ProxyError::UriTooLong { .. })
        ));
        let ok = format!("/{}", "a".repeat(8000));
        assert!(check_head(&req(&[], &ok), &l).is_ok());
        let cookie = "a".repeat(33 * 1024);
        assert!(matches!(
            check_head(&req(&[("cookie", &cookie)], "/"), &l),
            Err(ProxyError::HeadersTooLarge { .. })
        ));
    }
}
