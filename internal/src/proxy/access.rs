//! Access-log fields read off the request (SPEC section 8, issue 17): the protocol as operators
//! name it, and the trace id of a W3C Trace Context `traceparent` header. Reading only: the
//! `traceparent` header itself is forwarded untouched (it is not hop-by-hop).

use http::{HeaderMap, Method, Request, Version};

/// `grpc` for gRPC requests, `ws` for WebSocket upgrades (HTTP/1.1 `Upgrade: websocket` or an
/// RFC 8441 extended CONNECT), else `h2`, `http/1.1` or `http/1.0` by version.
pub fn protocol<B>(req: &Request<B>, grpc: bool) -> &'static str {
    if grpc {
        return "grpc";
    }
    let ws_upgrade = req
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let extended_connect = req.method() == Method::CONNECT
        && req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    if ws_upgrade || extended_connect {
        return "ws";
    }
    match req.version() {
        Version::HTTP_2 => "h2",
        Version::HTTP_10 | Version::HTTP_09 => "http/1.0",
        _ => "http/1.1",
    }
}

/// The trace id of a valid `traceparent` (W3C Trace Context section 3.2:
/// `version-traceid-parentid-flags`, lower-case hex, trace id not all zeros, version not `ff`);
/// `None` when absent or malformed.
pub fn trace_id(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("traceparent")?.to_str().ok()?.trim();
    let mut parts = v.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    // Version 00 has exactly four fields; later versions may append more (section 3.2.4).
    let ok = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    ok.then(|| trace.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_table() {
        let cases = [
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Some("4bf92f3577b34da6a3ce929d0e0e4736"),
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                None,
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                None,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                None,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                None,
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                Some("4bf92f3577b34da6a3ce929d0e0e4736"),
            ),
            ("garbage", None),
        ];
        for (v, want) in cases {
            let mut h = HeaderMap::new();
            h.insert("traceparent", v.parse().expect("valid header value"));
            assert_eq!(trace_id(&h).as_deref(), want, "{v}");
        }
        assert_eq!(trace_id(&HeaderMap::new()), None);
    }
}
