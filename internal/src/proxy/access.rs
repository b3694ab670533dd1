//! Phase 6, log: the request's outcome in `gateway_requests_total`, the warm-up outcome of its
//! route table (SPEC section 6 automatic rollback) and the access log line (SPEC section 8), from
//! the request's context the phases filled in ([`RequestCtx`], its
//! [`super::context::LogFields`]). Also the fields read off the request for it: the protocol as
//! operators name it, and the trace id of a W3C Trace Context `traceparent` header (the header
//! itself is forwarded untouched; it is not hop-by-hop).

use std::sync::{Arc, OnceLock};

use http::{HeaderMap, Method, Request, Version};
use tokio::time::Instant;

use super::context::{RequestCtx, RouteSlot};
use super::types::Proxy;

impl Proxy {
    /// Records metrics and the access log line for the finished request of `ctx`: `status` (the
    /// HTTP status, also for a gRPC answer), `bytes_in`/`bytes_out` (body bytes from and to the
    /// client), `reason` when the gateway made the answer itself
    /// ([`super::error::ProxyError::reason`]); the route table snapshot of `ctx` counts the outcome
    /// on its warm-ups (SPEC section 6 automatic rollback).
    pub(crate) fn finish<R: RouteSlot>(
        &self,
        ctx: &RequestCtx<R>,
        status: u16,
        bytes_in: u64,
        bytes_out: u64,
        reason: Option<&'static str>,
    ) {
        let log = &ctx.log;
        let route = ctx.route.id();
        ctx.table.record_outcome(
            route.map(|r| &**r),
            log.node.as_deref(),
            status,
            Instant::now(),
        );
        let dash = dash();
        self.counters.inc(
            &self.metrics.requests,
            route.unwrap_or(dash),
            log.node.as_ref().unwrap_or(dash),
            status,
        );
        if self.settings.access_log {
            let duration_ms = ctx.start.elapsed().as_secs_f64() * 1000.0;
            let upstream = log
                .node
                .as_deref()
                .and_then(|id| ctx.table.node(id).map(|n| n.addr.clone()));
            // A node's answer has an upstream status; the gateway's own answers a reason instead.
            let upstream_status = match reason {
                None if upstream.is_some() => Some(status),
                _ => None,
            };
            tracing::info!(
                target: "access",
                client = %log.client.map_or_else(|| "-".to_string(), |a| a.to_string()),
                protocol = log.protocol,
                method = %log.method.as_ref().map_or("-", Method::as_str),
                path = %log.shown_path(),
                status,
                duration_ms = format_args!("{duration_ms:.3}"),
                route = route.map_or("-", |r| &**r),
                node = log.node.as_deref().unwrap_or("-"),
                conn_id = ctx.conn_id.as_deref().unwrap_or("-"),
                bytes_in,
                bytes_out,
                hops = log.hops,
                grpc_status = log.grpc_status.get(),
                upstream = upstream.as_deref().unwrap_or("-"),
                upstream_status = %upstream_status.map_or_else(|| "-".to_string(), |s| s.to_string()),
                reason = reason.unwrap_or("-"),
                trace_id = log.trace_id.as_deref(),
                client_subject = log.client_subject.as_deref(),
            );
        }
    }
}

/// The shared `-` label for requests without a route or node, borrowed (no reference count
/// taken per request).
fn dash() -> &'static Arc<str> {
    static DASH: OnceLock<Arc<str>> = OnceLock::new();
    DASH.get_or_init(|| Arc::from("-"))
}

/// `grpc` for gRPC requests, `ws` for WebSocket upgrades (HTTP/1.1 `Upgrade: websocket` or an
/// RFC 8441 extended CONNECT), else `h2`, `http/1.1` or `http/1.0` by version; `upgrade` is
/// `req`'s (first) `Upgrade` field, looked up once by the caller.
pub(crate) fn protocol<B>(
    req: &Request<B>,
    grpc: bool,
    upgrade: Option<&http::HeaderValue>,
) -> &'static str {
    if grpc {
        return "grpc";
    }
    let ws_upgrade = upgrade.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let extended_connect = req.method() == Method::CONNECT
        && req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    if ws_upgrade || extended_connect {
        return "ws";
    }
    version_protocol(Some(req.version()))
}

/// `h2`, `http/1.1` or `http/1.0` for a request's `version`; `-` when it is not known (a refused
/// head whose request line did not parse).
pub(crate) fn version_protocol(version: Option<Version>) -> &'static str {
    match version {
        None => "-",
        Some(Version::HTTP_2) => "h2",
        Some(Version::HTTP_10 | Version::HTTP_09) => "http/1.0",
        Some(_) => "http/1.1",
    }
}

/// The trace id of a valid `traceparent` (W3C Trace Context section 3.2:
/// `version-traceid-parentid-flags`, lower-case hex, trace id not all zeros, version not `ff`);
/// `None` when absent or malformed.
pub(crate) fn trace_id(headers: &HeaderMap) -> Option<Box<str>> {
    // A constant name: looking a `&str` up parses it into a name first, on every request.
    const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
    let v = headers.get(TRACEPARENT)?.to_str().ok()?.trim();
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
    ok.then(|| Box::from(trace))
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
