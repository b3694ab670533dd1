//! Forwarding one HTTP request: attempts on the chosen node and, after a failure, on the node
//! (or connection) the SPEC section 4 retry rule picks ([`super::retry::decide`], a pure function
//! with the rule written out and unit tested). This file carries the decisions out: the health
//! penalty, the body replay, moving a bound id along with a retry, and the route timeout (no
//! response head within it: 504; a gRPC deadline bounds head and stream alike, CASE-31).

use std::sync::Arc;

use http::uri::PathAndQuery;
use http::{header, HeaderMap, Method, Request, Response, Uri};
use http_body::Body as _;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::{BodyTap, Replay, RequestBody};
use super::client_body::MinRate;
use super::context::RequestCtx;
use super::expect::{self, ContinueGate};
use super::hop_clock::HopClock;
use super::respond::ProxyError;
use super::retry::{self, Decision, FailAs, Failure, Penalty, Spent};
use super::upstream::SendError;
use super::{BoxError, LogCtx, Proxy, ProxyBody};
use crate::config::Protocol;
use crate::hopper::{Follow, HopReason};
use crate::metrics::RetryLabels;
use crate::registry::{Node, NodeId};
use crate::selection;

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Builds the request for `node`.
pub(crate) fn build(
    method: &Method,
    path_and_query: &PathAndQuery,
    headers: &HeaderMap,
    node: &Node,
    body: ProxyBody,
) -> Request<ProxyBody> {
    let mut req = Request::new(body);
    *req.method_mut() = method.clone();
    *req.headers_mut() = headers.clone();
    match node.settings.protocol {
        Protocol::Http1 => {
            *req.uri_mut() = Uri::from(path_and_query.clone());
        }
        Protocol::H2c | Protocol::H2 => {
            *req.version_mut() = http::Version::HTTP_2;
            let scheme = if node.settings.protocol == Protocol::H2 {
                "https"
            } else {
                "http"
            };
            let authority = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or(node.addr.as_str());
            *req.uri_mut() = format!("{scheme}://{authority}{path_and_query}")
                .parse()
                .unwrap_or_else(|_| Uri::from_static("/"));
            req.headers_mut().remove(header::HOST);
        }
    }
    req
}

/// Picks another node for a retry, excluding `tried`.
fn another(ctx: &RequestCtx, tried: &[NodeId]) -> Option<Arc<Node>> {
    let c = ctx.criteria(tried);
    selection::select(&ctx.table, &ctx.route.cluster, &c, Instant::now()).node
}

/// Forwards `req` to `node` (and others on retry); see the module docs.
pub(crate) async fn forward(
    p: Arc<Proxy>,
    ctx: RequestCtx,
    mut node: Arc<Node>,
    req: Request<Incoming>,
    up_headers: HeaderMap,
    path_and_query: PathAndQuery,
    log: &mut LogCtx,
) -> Result<Response<ProxyBody>, ProxyError> {
    let method = req.method().clone();
    // Expect: 100-continue from an HTTP/1.1 client to an HTTP/1.1 node: the body waits for the node (CASE-15).
    let gate = (req.version() == http::Version::HTTP_11
        && node.settings.protocol == Protocol::Http1
        && expect::wants_continue(&up_headers))
    .then(ContinueGate::new);
    let incoming = req.into_body();
    let empty = incoming.is_end_stream();
    let (mut body, tap): (ProxyBody, BodyTap) = if empty {
        (
            Empty::new().map_err(|never| match never {}).boxed_unsync(),
            BodyTap::empty(),
        )
    } else {
        let incoming = MinRate::new(incoming, p.settings.limits.body_min_rate);
        let (b, tap) = RequestBody::new(
            incoming.map_err(Into::into).boxed_unsync(),
            p.settings.limits.body_idle_timeout,
            ctx.route.config.max_body,
        );
        match &gate {
            Some(g) => (g.hold(b.boxed_unsync(), expect::CONTINUE_WAIT), tap),
            None => (b.boxed_unsync(), tap),
        }
    };
    let retries = ctx.route.config.retries;
    let mut spent = Spent::default();
    let mut tried: Vec<NodeId> = Vec::new();
    // Bounds the response head only: a stream whose head arrived is never cut by the route timeout.
    // A gRPC call with a deadline (grpc-timeout, capped by grpc_max_timeout) is bounded by it
    // instead, head and stream alike, and each attempt tells the node what is left of it.
    let budget = super::grpc_call::budget(&up_headers, ctx.route.config.grpc_max_timeout);
    let deadline = ctx.start + budget.unwrap_or(ctx.route.config.timeout);
    let mut up_headers = up_headers;
    let mut failure_seen: Option<Instant> = None;
    let mut clock = HopClock::new(p.metrics.clone(), ctx.hop_seen);
    let health = |n: &Node| n.settings.health.clone();
    loop {
        log.node = Some(node.id.clone());
        let inflight = node.runtime.start_request();
        let mark = node.runtime.passive_mark();
        if budget.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            up_headers.insert("grpc-timeout", super::grpc_call::encode_timeout(left));
        }
        let mut upstream_req = build(&method, &path_and_query, &up_headers, &node, body);
        if let Some(g) = &gate {
            g.watch(&mut upstream_req);
        }
        let result = tokio::time::timeout_at(deadline, p.upstream.send(&node, upstream_req)).await;
        let err = match result {
            Err(_) => {
                // The call's own deadline running out is not the node's fault (CASE-31).
                if budget.is_none() {
                    node.runtime
                        .record_passive_error(&health(&node), "timeout", Instant::now());
                }
                return Err(ProxyError::Timeout {
                    node: node.id.to_string(),
                    timeout_ms: budget.unwrap_or(ctx.route.config.timeout).as_millis(),
                });
            }
            Ok(Ok(sent)) => {
                if let Some(g) = &gate {
                    g.answered();
                }
                let status = sent.response.status();
                if status.is_server_error() {
                    node.runtime.record_passive_error(
                        &health(&node),
                        &format!("status {}", status.as_u16()),
                        Instant::now(),
                    );
                } else {
                    node.runtime.record_passive_success();
                }
                // Served again: the hops of this request end here.
                drop(clock);
                p.metrics
                    .request_duration
                    .observe(ctx.start.elapsed().as_secs_f64());
                return Ok(super::response::respond(
                    &p,
                    &ctx,
                    &node,
                    budget.map(|_| deadline),
                    sent,
                    inflight,
                    tap,
                    // The caller is done with the context once a response exists.
                    std::mem::take(log),
                ));
            }
            Ok(Err(e)) => e,
        };
        drop(inflight);
        let now = Instant::now();
        failure_seen.get_or_insert(now);
        let detail = err.detail();
        let failure = Failure::of(&err);
        let (returned, cause) = match take_back(err) {
            Ok(back) => back,
            Err(client) => return Err(client),
        };
        charge(&node, failure, &detail, mark, now);
        // What the next attempt sends: the body handed back unsent, or the tap's replay of it.
        let replay = returned.or_else(|| match tap.replay(p.settings.limits.body_idle_timeout) {
            Replay::Body(b) => Some(b),
            Replay::Lost => None,
        });
        let (decision, after) = retry::decide(
            failure,
            is_idempotent(&method),
            replay.is_some(),
            spent,
            retries,
        );
        spent = after;
        match (decision, replay) {
            (Decision::SameNode { retry }, Some(b)) => {
                p.metrics
                    .retries
                    .get_or_create(&RetryLabels {
                        route: ctx.route.id.clone(),
                        reason: retry,
                    })
                    .inc();
                tracing::debug!(node = %node.id, reason = retry, detail, "replaying on a new connection to the same node");
                body = b;
            }
            (
                Decision::OtherNode {
                    hop,
                    retry,
                    fail: kind,
                },
                Some(b),
            ) => {
                tried.push(node.id.clone());
                let Some(next) = another(&ctx, &tried) else {
                    return Err(failed(kind, &node, detail, cause));
                };
                retry_log(&p, &ctx, &node, &next, retry, &detail);
                body = b;
                node = moved(
                    &p,
                    &ctx,
                    &node,
                    next,
                    hop,
                    log,
                    &tried,
                    &mut clock,
                    failure_seen,
                )
                .await;
            }
            (Decision::Fail(kind), _) => return Err(failed(kind, &node, detail, cause)),
            (Decision::SameNode { .. } | Decision::OtherNode { .. }, None) => {
                unreachable!("retry::decide retries only a request whose body can be sent")
            }
        }
    }
}

/// The body an attempt handed back unsent (if any) and the attempt's failure as a cause.
///
/// # Errors
/// The client's own fault when its body stalled, trickled, broke off or passed `max_body` (the
/// node is not at fault and nothing is retried, CASE-22).
fn take_back(err: SendError) -> Result<(Option<ProxyBody>, BoxError), ProxyError> {
    Ok(match err {
        SendError::Connect(e, back) => (Some(back.into_body()), Box::new(e)),
        SendError::NotSent(e, back) => (Some(back.into_body()), Box::new(e)),
        SendError::Sent(e) | SendError::Stale(e) => {
            if let Some(client) = ProxyError::client_fault(&e) {
                return Err(client);
            }
            (None, Box::new(e))
        }
    })
}

/// Charges `node`'s health for `failure` (SPEC section 6: connect errors count like failed
/// probes, other failures as passive errors; a clean refusal or a stale pooled connection not at all).
fn charge(
    node: &Node,
    failure: Failure,
    detail: &str,
    mark: crate::registry::passive::PassiveMark,
    now: Instant,
) {
    let health = &node.settings.health;
    match failure.penalty() {
        Penalty::Connect => {
            node.runtime.record_connect_error(health, detail, mark, now);
        }
        Penalty::Passive => {
            node.runtime.record_passive_error(health, detail, now);
        }
        Penalty::None => {}
    }
}

/// The error a request that cannot be retried fails with.
fn failed(kind: FailAs, node: &Node, detail: String, cause: BoxError) -> ProxyError {
    let node = node.id.to_string();
    match kind {
        FailAs::Connect => ProxyError::Connect {
            node,
            detail,
            cause: Some(cause),
        },
        FailAs::Upstream => ProxyError::Upstream {
            node,
            detail,
            cause: Some(cause),
        },
    }
}

fn retry_log(
    p: &Proxy,
    ctx: &RequestCtx,
    from: &Node,
    to: &Node,
    reason: &'static str,
    detail: &str,
) {
    p.metrics
        .retries
        .get_or_create(&RetryLabels {
            route: ctx.route.id.clone(),
            reason,
        })
        .inc();
    tracing::info!(route = %ctx.route.id, from = %from.id, to = %to.id, reason, detail, "retrying on another node");
}

/// Moves a bound conn id along with a retry; returns the node to try next. When a concurrent
/// request moved the id first (compare-and-set lost), this one follows it there if that node is
/// usable and untried, so the id moves once and its requests land together (CASE-17). A hop
/// counted here is owed to `clock`, timed from `seen` (the request's first failed attempt).
#[allow(clippy::too_many_arguments)]
async fn moved(
    p: &Proxy,
    ctx: &RequestCtx,
    old: &Node,
    next: Arc<Node>,
    reason: HopReason,
    log: &mut LogCtx,
    tried: &[NodeId],
    clock: &mut HopClock,
    seen: Option<Instant>,
) -> Arc<Node> {
    let Some(conn) = &ctx.conn_id else {
        return next;
    };
    log.hops += 1;
    let c = ctx.criteria(tried);
    let now = Instant::now();
    let (node, counted) = p
        .hopper
        .hop(
            conn,
            &old.id,
            next,
            Follow::Winner(&ctx.route.cluster, &c),
            reason,
            now,
        )
        .await;
    if counted {
        clock.push(seen.unwrap_or(now));
    }
    node
}
