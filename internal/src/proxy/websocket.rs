//! WebSocket upgrades (RFC 6455): the handshake goes to the chosen node on a fresh connection with
//! `Sec-WebSocket-*` headers untouched; the node's 101 is relayed as is; then bytes are relayed
//! both ways until either side closes or the gateway shuts down.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::forward::{build, Attempt};
use super::respond::ProxyError;
use super::{headers, LogCtx, Proxy, ProxyBody};
use crate::registry::Node;

/// Proxies a WebSocket handshake to `node` and, on 101, relays the upgraded streams.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn proxy(
    p: Arc<Proxy>,
    ctx: Attempt,
    node: Arc<Node>,
    req: Request<Incoming>,
    mut up_headers: HeaderMap,
    path_and_query: String,
    downstream: OnUpgrade,
    log: &mut LogCtx,
) -> Result<Response<ProxyBody>, ProxyError> {
    log.node = Some(node.id.clone());
    headers::set_websocket_upgrade(&mut up_headers);
    let tcp = p.upstream.connect(&node).await.map_err(|e| ProxyError::Connect { node: node.id.to_string(), detail: e.to_string() })?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| ProxyError::Connect { node: node.id.to_string(), detail: e.to_string() })?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "upstream websocket handshake connection ended");
        }
    });
    let body = Empty::new().map_err(|never| match never {}).boxed_unsync();
    let mut up_req = build(req.method(), &path_and_query, &up_headers, &node, body);
    *up_req.version_mut() = http::Version::HTTP_11;
    let mut resp = send
        .send_request(up_req)
        .await
        .map_err(|e| ProxyError::Upstream { node: node.id.to_string(), detail: super::upstream::describe(&e) })?;
    let (mut parts, up_body) = {
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let node_id = node.id.clone();
            let p2 = p.clone();
            let inflight = node.runtime.start_request();
            let gauge = p.metrics.connection("websocket");
            let mut shutdown = p.shutdown.clone();
            tokio::spawn(async move {
                let _g = (inflight, gauge);
                let (Ok(down), Ok(up)) = (downstream.await, upstream_upgrade.await) else {
                    tracing::debug!(node = %node_id, "websocket upgrade did not complete");
                    return;
                };
                let mut down = TokioIo::new(down);
                let mut up = TokioIo::new(up);
                tokio::select! {
                    r = tokio::io::copy_bidirectional(&mut down, &mut up) => {
                        if let Err(e) = r {
                            tracing::debug!(node = %node_id, error = %e, "websocket relay ended");
                        }
                    }
                    _ = shutdown.signaled() => {}
                }
                let _ = p2;
            });
        }
        resp.into_parts()
    };
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        // Keep the upgrade pair; drop other hop-by-hop headers.
        let upgrade = parts.headers.get(header::UPGRADE).cloned();
        headers::strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        parts.headers.insert(header::UPGRADE, upgrade.unwrap_or(HeaderValue::from_static("websocket")));
    } else {
        headers::strip_hop_by_hop(&mut parts.headers);
    }
    if ctx.issued {
        if let Some(id) = &ctx.conn_id {
            if let Ok(v) = HeaderValue::from_str(id) {
                parts.headers.insert(p.settings.affinity_header.clone(), v);
            }
        }
    }
    p.finish(log, parts.status.as_u16(), ctx.start, 0, 0);
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Response::from_parts(parts, super::respond::full(bytes::Bytes::new())));
    }
    // The node refused the upgrade: relay its answer as an ordinary response.
    Ok(Response::from_parts(parts, up_body.map_err(Into::into).boxed_unsync()))
}
