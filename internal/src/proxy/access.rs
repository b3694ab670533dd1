//! Phase 6, log: the request's outcome in `gateway_requests_total`, the warm-up outcome of its
//! route table (SPEC section 6 automatic rollback) and the access log line (SPEC section 8), from
//! the [`LogCtx`] the phases filled in. Also the fields read off the request for it: the protocol
//! as operators name it, and the trace id of a W3C Trace Context `traceparent` header (the header
//! itself is forwarded untouched; it is not hop-by-hop).

use std::sync::{Arc, OnceLock};

use http::{HeaderMap, Method, Request, Version};
use tokio::time::Instant;

use super::types::Proxy;
use super::upstream::grpc;
use crate::routing::RouteTable;

/// Access-log fields gathered along the way (SPEC section 8).
#[derive(Debug, Clone, Default)]
pub struct LogCtx {
    /// Method; `None` (logged `-`) for a refused head whose method did not parse.
    pub method: Option<http::Method>,
    /// Target as received (the log shows its path, `-` when `None`: a refused head whose request
    /// line did not parse); a cheap reference-counted copy.
    pub uri: Option<http::Uri>,
    /// Route id or `-`.
    pub route: Option<Arc<str>>,
    /// Node id or `-`.
    pub node: Option<Arc<str>>,
    /// Conn id.
    pub conn_id: Option<crate::hopper::ConnId>,
    /// Hops during this request.
    pub hops: u32,
    /// The gRPC status the response ended with, when it is gRPC (CASE-07).
    pub grpc_status: grpc::GrpcStatus,
    /// The route table snapshot that served the request: [`Proxy::finish`] counts the outcome on
    /// its warm-ups (SPEC section 6 automatic rollback).
    pub table: Option<Arc<RouteTable>>,
    /// Client address.
    pub client: Option<std::net::SocketAddr>,
    /// `http/1.0`, `http/1.1`, `h2`, `ws` or `grpc` ([`protocol`]); `-` for a refused head whose
    /// request line did not parse ([`version_protocol`]).
    pub protocol: &'static str,
    /// Trace id of a valid W3C `traceparent` (the header itself is forwarded untouched).
    pub trace_id: Option<String>,
    /// Set when the gateway made the answer itself: [`super::error::ProxyError::reason`].
    pub reason: Option<&'static str>,
    /// The verified client certificate's subject (mTLS, SPEC section 10).
    pub client_subject: Option<Arc<str>>,
}

impl Proxy {
    /// Records metrics and the access log line for a finished request: `status` (the HTTP
    /// status, also for a gRPC answer), `start` (the request's), `bytes_in`/`bytes_out` (body
    /// bytes from and to the client).
    pub fn finish(&self, log: &LogCtx, status: u16, start: Instant, bytes_in: u64, bytes_out: u64) {
        if let Some(table) = &log.table {
            table.record_outcome(
                log.route.as_deref(),
                log.node.as_deref(),
                status,
                Instant::now(),
            );
        }
        let dash = dash();
        self.counters.inc(
            &self.metrics.requests,
            log.route.as_ref().unwrap_or(dash),
            log.node.as_ref().unwrap_or(dash),
            status,
        );
        if self.settings.access_log {
            let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
            let upstream = log
                .node
                .as_deref()
                .zip(log.table.as_ref())
                .and_then(|(id, t)| t.node(id).map(|n| n.addr.clone()));
            // A node's answer has an upstream status; the gateway's own answers a reason instead.
            let upstream_status = match log.reason {
                None if upstream.is_some() => Some(status),
                _ => None,
            };
            tracing::info!(
                target: "access",
                client = %log.client.map_or_else(|| "-".to_string(), |a| a.to_string()),
                protocol = log.protocol,
                method = %log.method.as_ref().map_or("-", Method::as_str),
                path = %log.uri.as_ref().map_or("-", http::Uri::path),
                status,
                duration_ms = format_args!("{duration_ms:.3}"),
                route = log.route.as_deref().unwrap_or("-"),
                node = log.node.as_deref().unwrap_or("-"),
                conn_id = log.conn_id.as_deref().unwrap_or("-"),
                bytes_in,
                bytes_out,
                hops = log.hops,
                grpc_status = log.grpc_status.get(),
                upstream = upstream.as_deref().unwrap_or("-"),
                upstream_status = %upstream_status.map_or_else(|| "-".to_string(), |s| s.to_string()),
                reason = log.reason.unwrap_or("-"),
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
pub(crate) fn trace_id(headers: &HeaderMap) -> Option<String> {
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
