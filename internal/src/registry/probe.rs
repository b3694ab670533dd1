//! One probe of one node: a TCP connect, `GET <path>` over HTTP/1.1, h2c or h2 (over TLS when
//! the cluster has `tls`, with the same verification as requests) with status-range and
//! optional JSON-pointer checks, or a gRPC health call ([`grpc`]) over the same
//! connector (SPEC section 3 `[health]`). Never retries a real failure; an h2
//! stream refused because the node is going away (GOAWAY) is retried once on a new connection,
//! since that says nothing about the node's health (CASE-18).

pub(crate) mod grpc;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::config::{HealthConfig, ProbeKind, Protocol};
use crate::tls::client::{self as tls, Alpn, ClusterTls};

/// Most a probe reads of a response body for the JSON check (bytes).
const MAX_PROBE_BODY: usize = 64 * 1024;

/// What one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeOutcome {
    /// Passed every check.
    Pass,
    /// Failed; the text says why (status, body, connect error).
    Fail(String),
    /// No complete answer within the probe's `timeout` (the duration given).
    Timeout(Duration),
}

/// Probes node `id` at `addr` (`host:port`) once with `h`, within `h.timeout` overall; http probes
/// go over TLS when `tls` is given (a failed handshake is a failed probe naming its reason).
pub(crate) async fn probe(
    addr: &str,
    id: &str,
    protocol: Protocol,
    tls: Option<&ClusterTls>,
    h: &HealthConfig,
) -> ProbeOutcome {
    let target = Target {
        addr,
        id,
        protocol,
        tls,
        timeout: h.timeout,
    };
    match tokio::time::timeout(h.timeout, probe_inner(&target, h)).await {
        Ok(outcome) => outcome,
        Err(_) => ProbeOutcome::Timeout(h.timeout),
    }
}

/// A bare TCP connect within `timeout`, used by reloads before a swap (SPEC section 6).
///
/// # Errors
/// The connect error, or `TimedOut`.
pub(crate) async fn connect_probe(addr: &str, timeout: Duration) -> std::io::Result<()> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )),
    }
}

/// Where one probe goes: the node's address and id, its cluster's protocol and TLS settings, and
/// the probe's timeout (bounds the TLS handshake too).
pub(super) struct Target<'a> {
    pub(super) addr: &'a str,
    pub(super) id: &'a str,
    pub(super) protocol: Protocol,
    pub(super) tls: Option<&'a ClusterTls>,
    pub(super) timeout: Duration,
}

async fn probe_inner(t: &Target<'_>, h: &HealthConfig) -> ProbeOutcome {
    match h.kind {
        ProbeKind::Tcp => {
            return match TcpStream::connect(t.addr).await {
                Ok(_) => ProbeOutcome::Pass,
                Err(e) => ProbeOutcome::Fail(format!("connect: {e}")),
            };
        }
        ProbeKind::Grpc => return grpc::probe(t, h).await,
        ProbeKind::Http => {}
    }
    match http_probe(t, h).await {
        Ok(outcome) => outcome,
        // A stream refused by a GOAWAY is not the node's failure: try once on a new connection.
        Err(e) if is_goaway_refusal(&e) => http_probe(t, h)
            .await
            .unwrap_or_else(|e| ProbeOutcome::Fail(format!("request: {e}"))),
        Err(e) => ProbeOutcome::Fail(format!("request: {e}")),
    }
}

/// True if `e` is a stream refused because the node is going away (GOAWAY, REFUSED_STREAM).
pub(super) fn is_goaway_refusal(e: &hyper::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = src {
        if let Some(h2e) = err.downcast_ref::<h2::Error>() {
            return h2e.is_go_away() || h2e.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        src = err.source();
    }
    e.is_canceled()
}

async fn http_probe(t: &Target<'_>, h: &HealthConfig) -> Result<ProbeOutcome, hyper::Error> {
    let (addr, protocol) = (t.addr, t.protocol);
    let alpn = if protocol == Protocol::H2 {
        Alpn::H2
    } else {
        Alpn::Http1
    };
    let stream = match tls::connect(addr, t.id, t.tls, alpn, t.timeout).await {
        Ok(s) => s,
        Err(e) => return Ok(ProbeOutcome::Fail(connect_detail(&e))),
    };
    let io = TokioIo::new(stream);
    let req = http::Request::get(h.path.as_str())
        .header(http::header::HOST, addr)
        .header(http::header::USER_AGENT, "hopping-gateway-health")
        .body(Empty::<Bytes>::new())
        .expect("a GET with a validated path and static headers is a valid request");
    let resp = match protocol {
        Protocol::Http1 => {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            send.send_request(req).await?
        }
        Protocol::H2c | Protocol::H2 => {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            let (mut parts, body) = req.into_parts();
            let scheme = if t.tls.is_some() { "https" } else { "http" };
            parts.uri = format!("{scheme}://{addr}{}", h.path)
                .parse()
                .unwrap_or(parts.uri);
            parts.headers.remove(http::header::HOST);
            send.send_request(http::Request::from_parts(parts, body))
                .await?
        }
    };
    let status = resp.status().as_u16();
    if !h.expect_status.contains(&status) {
        return Ok(ProbeOutcome::Fail(format!("status {status}")));
    }
    let Some(expect) = &h.expect_json else {
        return Ok(ProbeOutcome::Pass);
    };
    let body = match Limited::new(resp.into_body(), MAX_PROBE_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(ProbeOutcome::Fail(format!("body: {e}"))),
    };
    Ok(check_json(&body, &expect.pointer, &expect.equals))
}

/// A failed connect as a probe detail: the handshake error as is, else `connect: <error>`.
fn connect_detail(e: &std::io::Error) -> String {
    match tls::handshake_error(e) {
        Some(hs) => hs.to_string(),
        None => format!("connect: {e}"),
    }
}

/// Checks that the JSON `body` holds the string `equals` at RFC 6901 `pointer`.
pub(crate) fn check_json(body: &[u8], pointer: &str, equals: &str) -> ProbeOutcome {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return ProbeOutcome::Fail(format!("body is not JSON: {e}")),
    };
    match v.pointer(pointer) {
        Some(serde_json::Value::String(s)) if s == equals => ProbeOutcome::Pass,
        Some(other) => ProbeOutcome::Fail(format!("body {pointer} = {other}, want {equals:?}")),
        None => ProbeOutcome::Fail(format!("body has no {pointer}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_pointer_check() {
        assert_eq!(
            check_json(br#"{"business":"UP"}"#, "/business", "UP"),
            ProbeOutcome::Pass
        );
        assert_ne!(
            check_json(br#"{"business":"DOWN"}"#, "/business", "UP"),
            ProbeOutcome::Pass
        );
        assert_ne!(check_json(b"nope", "/business", "UP"), ProbeOutcome::Pass);
        assert_ne!(check_json(br#"{}"#, "/business", "UP"), ProbeOutcome::Pass);
    }
}
