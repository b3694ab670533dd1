//! Phase 3, select node: the node the request goes to first — the conn id's bound node while it
//! can serve, else a fresh selection that the hopper rebinds and counts as a hop (SPEC sections
//! 5 and 7) — or, when no node is selectable, the route's `on_all_down` (SPEC section 4).

use std::sync::Arc;

use tokio::time::Instant;

use super::context::RequestCtx;
use super::error::ProxyError;
use super::types::{DownstreamConn, Proxy};
use crate::config::{NoMatch, OnAllDown};
use crate::metrics::ClusterLabel;
use crate::registry::Node;
use crate::selection;

/// Selects the first node for `ctx`, recording a hop counted on the way in its log fields;
/// returns the node and, after such a hop, when the failure behind it was first seen
/// ([`crate::hopper::Placement::hop_seen`]), which the hop's latency is timed from. An HTTP/2 connection without an affinity header is bound to the node
/// (`dc.bound`), so that node's drain sends the connection GOAWAY (SPEC section 5).
///
/// # Errors
/// [`ProxyError::VersionRejected`] when no node has the requested version and the route's canary
/// says `no_match = "reject"` (503); [`ProxyError::NoHealthyNode`] when no node is selectable and
/// the route falls back.
pub(crate) async fn select(
    p: &Proxy,
    ctx: &mut RequestCtx,
    dc: &DownstreamConn,
) -> Result<(Arc<Node>, Option<Instant>), ProxyError> {
    let placement = p
        .hopper
        .place(
            ctx.conn_id.as_ref(),
            &ctx.table,
            &ctx.route.cluster,
            &ctx.criteria(p.settings.zone.as_deref(), &[]),
            ctx.start,
        )
        .await;
    if let Some(miss) = &placement.version_miss {
        let requested = ctx.wanted.version.as_deref().unwrap_or_default();
        let canary = ctx.route.config.canary.as_ref();
        if canary.is_some_and(|c| c.no_match == NoMatch::Reject) {
            return Err(ProxyError::VersionRejected {
                cluster: ctx.route.cluster.name.to_string(),
                version: requested.to_string(),
            });
        }
        p.metrics
            .canary_fallback
            .get_or_create(&ClusterLabel {
                cluster: ctx.route.cluster.name.clone(),
            })
            .inc();
        tracing::warn!(cluster = %ctx.route.cluster.name, requested_version = requested, candidates = miss.candidates, matched = miss.matched, "no node matches the requested version; using all candidates");
    }
    if placement.hopped_from.is_some() {
        ctx.log.hops += 1;
    }
    let node = match placement.node {
        Some(n) => n,
        None => all_down(p, ctx)?,
    };
    if ctx.h2 && ctx.issued && ctx.kind != super::context::Kind::WebSocket {
        dc.bound.send_if_modified(|b| {
            let changed = b.as_ref().is_none_or(|r| r.id() != &node.id);
            *b = Some(node.runtime.clone());
            changed
        });
    }
    Ok((node, placement.hop_seen))
}

/// No selectable node: the route's `on_all_down` (SPEC section 4) — the fallback answer, or with
/// `fail_open` any node of the cluster that is not draining, counted in `gateway_fail_open_total`.
fn all_down(p: &Proxy, ctx: &RequestCtx) -> Result<Arc<Node>, ProxyError> {
    let route = &ctx.route;
    let fallback = || ProxyError::NoHealthyNode {
        cluster: route.cluster.name.to_string(),
        fallback: route.config.fallback.clone(),
    };
    match route.config.on_all_down {
        OnAllDown::Fallback => Err(fallback()),
        OnAllDown::FailOpen => {
            let all: Vec<_> = route
                .cluster
                .nodes
                .iter()
                .filter(|n| !n.runtime.is_draining())
                .map(|n| selection::Candidate {
                    node: n.clone(),
                    weight: u64::from(n.weight.max(1)),
                })
                .collect();
            let node = selection::picker::pick(&route.cluster, &all, &mut rand::rng())
                .ok_or_else(fallback)?;
            p.metrics
                .fail_open
                .get_or_create(&ClusterLabel {
                    cluster: route.cluster.name.clone(),
                })
                .inc();
            Ok(node)
        }
    }
}
