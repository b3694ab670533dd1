//! Phase 5, respond: a node's answer as the client gets it (the gateway's own answers to
//! failures are [`super::respond::render`]'s).

use std::sync::Arc;

use http::{header, Response};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::body::{BodyTap, ResponseBody};
use super::context::RequestCtx;
use super::grpc;
use super::grpc_call::CallBody;
use super::http1::node_fields::Answer;
use super::upstream::UpstreamBody;
use super::{headers, LogCtx, Proxy, ProxyBody};
use crate::registry::{InflightGuard, Node};

/// The node's answer `sent` made the client's: hop-by-hop fields and `TE` removed (RFC 9110
/// section 7.6.1), a framed 204's framing dropped (CASE-27), the conn id the gateway issued
/// added; the body relayed frame by frame, cut at `node`'s drain deadline (SPEC section 5) and,
/// for gRPC, at `call_deadline`; when it ends the request is logged (phase 6) with the bytes of
/// `tap` and of the response (an HTTP/1.1 node's connection goes back to the pool by itself,
/// [`super::http1::node_body`]).
// The response needs every piece of the attempt; a struct for one call site would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn respond(
    p: &Arc<Proxy>,
    ctx: &RequestCtx,
    node: &Node,
    call_deadline: Option<Instant>,
    sent: Answer<UpstreamBody>,
    inflight: InflightGuard,
    tap: BodyTap,
    log: LogCtx,
) -> Answer<ProxyBody> {
    let Answer {
        response: sent,
        mut node_fields,
    } = sent;
    let (mut parts, incoming) = sent.into_parts();
    // Relayed frame by frame; cut at the node's drain deadline (gRPC: grpc-status 14), SPEC section 5.
    let mut log = log;
    let is_grpc = grpc::is_grpc(&parts.headers);
    let incoming = grpc::relay(
        &parts.headers,
        is_grpc,
        incoming,
        node,
        &mut log.grpc_status,
    );
    let grpc_status = log.grpc_status.clone();
    // CASE-27, RFC 9112 section 6.3 rule 1: a 204 ends at its head. Framing fields on it are the
    // node's mistake (RFC 9110 section 8.6): never passed on (nor is its connection pooled,
    // [`super::http1::node_head`]).
    // An HTTP/1.x node's fields kept as bytes had these rules applied as they were parsed
    // ([`super::http1::node_fields`]); the map then holds only what the gateway adds.
    if node_fields.is_none() {
        if parts.status == http::StatusCode::NO_CONTENT {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        headers::strip_hop_by_hop(&mut parts.headers);
        // TE is a request header; a node has no business sending it back.
        parts.headers.remove(header::TE);
    }
    if let Some(v) = ctx.issued_id() {
        // Set, not added: a node's field of the same name is not passed on.
        if let Some(node) = node_fields.as_mut() {
            node.drop_named(p.settings.affinity_header.as_str().as_bytes());
        }
        parts.headers.insert(p.settings.affinity_header.clone(), v);
    }
    let status = parts.status.as_u16();
    let proxy = p.clone();
    let start = ctx.start;
    let done = move |bytes_out| {
        drop(inflight);
        proxy.finish(&log, status, start, tap.bytes_in(), bytes_out);
    };
    let body = if is_grpc {
        let call = CallBody::new(incoming, call_deadline, grpc_status);
        ResponseBody::new(call, done).boxed_unsync()
    } else {
        ResponseBody::new(incoming, done).boxed_unsync()
    };
    Answer {
        response: Response::from_parts(parts, body),
        node_fields,
    }
}
