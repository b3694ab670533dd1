//! Phase 1, match route: the request's host and normalised path against the live route table
//! (SPEC section 4 "Routing"), and the target the node will be sent.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Request};
use tokio::time::Instant;

use super::error::ProxyError;
use crate::routing::table::RequestHead;
use crate::routing::{path, Route, RouteTable};

/// What the route phase settles: the route and where on the node the request goes.
#[derive(Debug)]
pub(crate) struct Matched {
    /// The matched route.
    pub route: Arc<Route>,
    /// The `Host` the node gets: the client's `Host`, else its `:authority`.
    pub host: Option<HeaderValue>,
    /// The node's request target: the client's, with the route's `strip_prefix` removed.
    pub path_and_query: PathAndQuery,
}

/// Matches `req` against `table` at `now` (canary weights roll once per request).
///
/// # Errors
/// [`ProxyError::BadRequest`] when `Host` and `:authority` disagree (CASE-12) or a node could read
/// the path as another route's (encoded slashes, empty segments); [`ProxyError::NoRoute`] when
/// nothing matches (404).
pub(crate) fn match_route<B>(
    table: &RouteTable,
    req: &Request<B>,
    now: Instant,
) -> Result<Matched, ProxyError> {
    let host_field = req.headers().get(header::HOST);
    let host = request_host(req, host_field)?;
    let norm = path::normalize(req.uri().path());
    let head = RequestHead {
        method: req.method(),
        host: host.as_deref().map(strip_port),
        path: &norm,
        headers: req.headers(),
    };
    let roll = rand::random::<f64>() * 100.0;
    let Some(route) = table.match_route(&head, now, roll).cloned() else {
        return Err(ProxyError::NoRoute {
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
        });
    };
    // A node that decodes encoded slashes or merges `//` must not resolve a path that the
    // gateway would have routed elsewhere (README "Routing").
    if let Some(alt) = path::node_reading(req.uri().path()) {
        let alt_head = RequestHead { path: &alt, ..head };
        let same = table
            .match_route(&alt_head, now, roll)
            .is_some_and(|r| r.id == route.id);
        if !same {
            return Err(ProxyError::BadRequest(
                "path with encoded slashes or empty segments that a node could resolve to another route",
            ));
        }
    }
    let path_and_query = upstream_path(req, &norm, route.config.strip_prefix.as_deref());
    let host = host_field
        .cloned()
        .or_else(|| host.as_deref().and_then(|h| HeaderValue::from_str(h).ok()));
    Ok(Matched {
        route,
        host,
        path_and_query,
    })
}

/// The request's host: its `Host` field `host_field`, or `:authority` for HTTP/2. Both present
/// and different is 400 (CASE-12).
fn request_host<'a, B>(
    req: &'a Request<B>,
    host_field: Option<&'a HeaderValue>,
) -> Result<Option<Cow<'a, str>>, ProxyError> {
    let host_hdr = host_field.and_then(|v| v.to_str().ok());
    let authority = req.uri().authority().map(|a| a.as_str());
    match (host_hdr, authority) {
        (Some(h), Some(a))
            if req.version() == http::Version::HTTP_2 && !h.eq_ignore_ascii_case(a) =>
        {
            Err(ProxyError::BadRequest(":authority and host disagree"))
        }
        (Some(h), _) => Ok(Some(ascii_lowercase(h))),
        (None, Some(a)) => Ok(Some(ascii_lowercase(a))),
        (None, None) => Ok(None),
    }
}

/// `s` in lower case, borrowed when it already is.
fn ascii_lowercase(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

/// `h` without its `:port` (RFC 9110 section 7.2: `uri-host [ ":" port ]`, port digits only,
/// possibly empty); an IPv6 literal keeps its brackets. Byte-wise: the generic `rsplit_once`
/// searcher was ~240 instructions per request for a 15-byte host.
fn strip_port(h: &str) -> &str {
    let b = h.as_bytes();
    if b.first() == Some(&b'[') {
        return b
            .iter()
            .position(|&c| c == b']')
            .map_or(h, |end| &h[..end + 1]);
    }
    match b.iter().rposition(|&c| c == b':') {
        Some(colon) if b[colon + 1..].iter().all(u8::is_ascii_digit) => &h[..colon],
        _ => h,
    }
}

/// The path and query sent upstream: the client's, with `strip_prefix` removed; the normalised path
/// when normalisation removed dot segments (so the node resolves what was matched). The client's
/// own target is reused without copying when nothing changes.
fn upstream_path<B>(req: &Request<B>, norm: &str, strip: Option<&str>) -> PathAndQuery {
    let raw = req.uri().path();
    let dotted = raw.contains("/.") || path::contains_ignore_ascii_case(raw.as_bytes(), b"%2e");
    let base = if dotted { norm } else { raw };
    let stripped = strip.filter(|s| base.starts_with(*s));
    if !dotted && stripped.is_none() {
        if let Some(pq) = req.uri().path_and_query() {
            return pq.clone();
        }
    }
    let mut p = String::with_capacity(base.len() + 1 + req.uri().query().map_or(0, str::len));
    match stripped {
        Some(s) => {
            let rest = &base[s.len()..];
            if !rest.starts_with('/') {
                p.push('/');
            }
            p.push_str(rest);
        }
        None => p.push_str(base),
    }
    if let Some(q) = req.uri().query() {
        p.push('?');
        p.push_str(q);
    }
    PathAndQuery::from_maybe_shared(Bytes::from(p))
        .unwrap_or_else(|_| PathAndQuery::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::strip_port;

    #[test]
    fn strip_port_takes_off_a_digit_port_only() {
        let cases = [
            ("a.test", "a.test"),
            ("a.test:8080", "a.test"),
            ("a.test:", "a.test"),
            ("127.0.0.1:41234", "127.0.0.1"),
            ("a.test:80x", "a.test:80x"),
            ("[::1]:8443", "[::1]"),
            ("[::1]", "[::1]"),
            // An unclosed IPv6 literal is kept whole (it used to index past the end).
            ("[::1", "[::1"),
            ("", ""),
        ];
        for (host, want) in cases {
            assert_eq!(strip_port(host), want, "{host:?}");
        }
    }
}
