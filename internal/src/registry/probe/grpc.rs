//! The gRPC health probe (`health.kind = "grpc"`): one unary `grpc.health.v1.Health/Check` call
//! (grpc/grpc `doc/health-checking.md`, proto `grpc/health/v1/health.proto`) over the cluster's
//! HTTP/2 connection, asking about `health.grpc_service` (`""` = the whole server).
//!
//! `SERVING` passes. Every other answer fails the probe with its reason: a status other than
//! `SERVING` (`NOT_SERVING`, `UNKNOWN`, `SERVICE_UNKNOWN`), a `grpc-status` other than 0 (e.g. 12
//! UNIMPLEMENTED from a server without the health service, 5 NOT_FOUND for an unknown service), an
//! HTTP status other than 200, a body that is not one health message, or a transport error. The
//! caller's `timeout` bounds the whole call ([`super::probe`]), so a hung node is a
//! timeout, like an HTTP probe. Spawns only the connection task of the one probe connection.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{ProbeOutcome, Target};
use crate::config::HealthConfig;
use crate::tls::client::{self as tls, Alpn};

/// Path of the health method (gRPC PROTOCOL-HTTP2: `/<package>.<service>/<method>`).
pub(crate) const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
/// Most a probe reads of the answer (bytes): a health message is a few bytes.
const MAX_ANSWER: usize = 16 * 1024;
/// Length of the gRPC message prefix: compressed flag (1 byte) + big-endian length (4 bytes).
const PREFIX_LEN: usize = 5;

/// The messages of `grpc.health.v1`, written with prost's derive so no `protoc` is needed.
pub(crate) mod proto {
    /// `HealthCheckRequest { string service = 1; }`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub(crate) struct HealthCheckRequest {
        /// Service name; empty = the whole server.
        #[prost(string, tag = "1")]
        pub service: String,
    }

    /// `HealthCheckResponse { ServingStatus status = 1; }`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub(crate) struct HealthCheckResponse {
        /// A [`ServingStatus`] value.
        #[prost(enumeration = "ServingStatus", tag = "1")]
        pub status: i32,
    }

    /// `HealthCheckResponse.ServingStatus`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum ServingStatus {
        /// No answer known.
        Unknown = 0,
        /// Serving: the only passing answer.
        Serving = 1,
        /// Alive but not serving.
        NotServing = 2,
        /// Used only by `Watch`: the service is not known.
        ServiceUnknown = 3,
    }
}

/// Takes the probe's target (node address and id, cluster protocol and TLS) and health settings;
/// returns the outcome of one `Health/Check` call on a new connection made by the cluster's
/// connector (h2c, or h2 over TLS with ALPN `h2`). A stream refused by a GOAWAY is retried once on
/// a new connection (it says nothing about the node).
pub(super) async fn probe(t: &Target<'_>, h: &HealthConfig) -> ProbeOutcome {
    match connect_and_check(t, &h.grpc_service).await {
        Ok(outcome) => outcome,
        Err(e) if super::is_goaway_refusal(&e) => connect_and_check(t, &h.grpc_service)
            .await
            .unwrap_or_else(|e| ProbeOutcome::Fail(format!("grpc request: {e}"))),
        Err(e) => ProbeOutcome::Fail(format!("grpc request: {e}")),
    }
}

/// Opens the probe connection the way the cluster's data connections are opened, then checks.
async fn connect_and_check(t: &Target<'_>, service: &str) -> Result<ProbeOutcome, hyper::Error> {
    let io = match tls::connect(t.addr, t.id, t.tls, Alpn::H2, t.timeout).await {
        Ok(s) => s,
        Err(e) => return Ok(ProbeOutcome::Fail(format!("connect: {e}"))),
    };
    check(io, t.addr, service).await
}

/// Takes an established connection `io` (cleartext or TLS, already past ALPN), the `authority`
/// for `:authority` and the `service` name; returns the outcome of one `Health/Check` call over
/// HTTP/2 on it.
///
/// # Errors
/// The HTTP/2 handshake's or request's error (the caller decides whether a GOAWAY refusal is
/// retried); every answer the node gives, good or bad, is an `Ok` outcome.
pub(crate) async fn check<IO>(
    io: IO,
    authority: &str,
    service: &str,
) -> Result<ProbeOutcome, hyper::Error>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let uri = match format!("http://{authority}{HEALTH_CHECK_PATH}").parse::<http::Uri>() {
        Ok(u) => u,
        Err(e) => {
            return Ok(ProbeOutcome::Fail(format!(
                "node address {authority:?}: {e}"
            )))
        }
    };
    let req = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, "hopping-gateway-health")
        .body(Full::new(encode_request(service)))
        .expect("a POST with a parsed URI and static headers is a valid request");
    let resp = send.send_request(req).await?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Ok(ProbeOutcome::Fail(format!("grpc: HTTP status {status}")));
    }
    // Trailers-Only answers carry grpc-status in the headers.
    if let Some(code) = grpc_status(resp.headers()).filter(|c| *c != 0) {
        return Ok(ProbeOutcome::Fail(failed_call(code, resp.headers())));
    }
    let collected = match Limited::new(resp.into_body(), MAX_ANSWER).collect().await {
        Ok(c) => c,
        Err(e) => return Ok(ProbeOutcome::Fail(format!("grpc body: {e}"))),
    };
    let trailers = collected.trailers().cloned().unwrap_or_default();
    match grpc_status(&trailers) {
        Some(0) => {}
        Some(code) => return Ok(ProbeOutcome::Fail(failed_call(code, &trailers))),
        None => return Ok(ProbeOutcome::Fail("grpc: no grpc-status trailer".into())),
    }
    Ok(judge(&collected.to_bytes()))
}

/// The request body: one uncompressed gRPC message.
fn encode_request(service: &str) -> Bytes {
    use prost::Message;
    let msg = proto::HealthCheckRequest {
        service: service.to_string(),
    };
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX_LEN + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).expect("a service name is far shorter than 4 GiB"));
    msg.encode(&mut buf)
        .expect("the buffer was reserved with the message's encoded length");
    buf.freeze()
}

fn grpc_status(headers: &http::HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

fn failed_call(code: u32, headers: &http::HeaderMap) -> String {
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    format!("grpc-status {code} {message}")
        .trim_end()
        .to_string()
}

/// Takes the answer body of a successful call; returns `Pass` for exactly one message saying
/// `SERVING`, else a failure naming what came.
pub(crate) fn judge(body: &[u8]) -> ProbeOutcome {
    use prost::Message;
    let mut buf = body;
    if buf.len() < PREFIX_LEN {
        return ProbeOutcome::Fail("grpc: no health message in the answer".into());
    }
    let compressed = buf.get_u8() != 0;
    let len = buf.get_u32() as usize;
    if compressed {
        return ProbeOutcome::Fail("grpc: compressed health message (not requested)".into());
    }
    if buf.len() != len {
        return ProbeOutcome::Fail(format!(
            "grpc: health message framing: prefix says {len} bytes, {} came",
            buf.len()
        ));
    }
    match proto::HealthCheckResponse::decode(buf) {
        Ok(r) => match proto::ServingStatus::try_from(r.status) {
            Ok(proto::ServingStatus::Serving) => ProbeOutcome::Pass,
            Ok(other) => ProbeOutcome::Fail(format!("grpc health: {}", other.as_str_name())),
            Err(_) => ProbeOutcome::Fail(format!("grpc health: unknown status {}", r.status)),
        },
        Err(e) => ProbeOutcome::Fail(format!("grpc health: undecodable answer: {e}")),
    }
}

impl proto::ServingStatus {
    /// The proto enum value's name, as operators see it in grpc_health_probe output.
    pub fn as_str_name(self) -> &'static str {
        match self {
            proto::ServingStatus::Unknown => "UNKNOWN",
            proto::ServingStatus::Serving => "SERVING",
            proto::ServingStatus::NotServing => "NOT_SERVING",
            proto::ServingStatus::ServiceUnknown => "SERVICE_UNKNOWN",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn answer(status: i32) -> Vec<u8> {
        let msg = proto::HealthCheckResponse { status };
        let mut v = vec![0];
        v.extend_from_slice(&(msg.encoded_len() as u32).to_be_bytes());
        msg.encode(&mut v).expect("vec grows");
        v
    }

    #[test]
    fn only_serving_passes() {
        assert_eq!(judge(&answer(1)), ProbeOutcome::Pass);
        let cases = [
            (answer(2), "NOT_SERVING"),
            (answer(0), "UNKNOWN"),
            (answer(3), "SERVICE_UNKNOWN"),
            (answer(9), "unknown status 9"),
            (Vec::new(), "no health message"),
            (answer(1)[..4].to_vec(), "no health message"),
            (answer(1)[..6].to_vec(), "framing"),
        ];
        for (body, want) in cases {
            match judge(&body) {
                ProbeOutcome::Fail(why) => assert!(why.contains(want), "{why} vs {want}"),
                other => panic!("{body:?}: {other:?}, want a failure with {want}"),
            }
        }
    }

    #[test]
    fn request_is_one_framed_message() {
        let b = encode_request("echo");
        assert_eq!(&b[..5], &[0, 0, 0, 0, 6]);
        let m = proto::HealthCheckRequest::decode(&b[5..]).expect("decodes");
        assert_eq!(m.service, "echo");
    }
}
