//! Forwarding one HTTP request: attempts on the chosen node and, after a failure, on the node
//! (or connection) the SPEC section 4 retry rule picks ([`super::retry::decide`], a pure function
//! with the rule written out and unit tested). This file carries the decisions out: the health
//! penalty, the body replay, moving a bound id along with a retry, and the route timeout (no
//! response head within it: 504; a gRPC deadline bounds head and stream alike, CASE-31).

use std::future::Future;
use std::sync::Arc;

use http::{Method, Request};
use tokio::time::Instant;

use super::body::{BodyTap, BoxError, ProxyBody, Replay};
use super::client_body::request_body;
use super::context::{Kind, RequestCtx};
use super::error::ProxyError;
use super::expect::{self, ContinueGate};
use super::hop_clock::HopClock;
use super::http1_codec::fields::NodeAnswer;
use super::respond::Forwarded;
use super::retry::{self, Decision, FailAs, Failure, Penalty, Spent};
use super::types::Proxy;
use super::upstream::client::NodeAnswerBody;
use super::upstream::grpc_call;
use super::upstream::request::{NodeRequest, NodeRequestParts, SendError};
use crate::config::Protocol;
use crate::hopper::{Follow, HopReason};
use crate::metrics::RetryLabels;
use crate::registry::{InflightGuard, Node, NodeId};
use crate::selection;

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Picks another node for a retry, excluding `tried`.
fn another(p: &Proxy, ctx: &RequestCtx, tried: &[NodeId]) -> Option<Arc<Node>> {
    let c = ctx.criteria(p.settings.zone.as_deref(), tried);
    selection::select(&ctx.table, &ctx.route.cluster, &c, Instant::now()).node
}

/// Forwards `req` to `node` (and others on retry) for the request of `ctx`, whose log fields
/// get the node and the hops; `hop_seen` is when the failure behind a hop counted by the
/// selection was first seen (the hop ends when a node answers); see the module docs. The loop is short: send one attempt; on a
/// node's answer, return it for phase 5; on a failure, ask [`retry::decide`] and go on with the
/// node it names, or fail.
///
/// # Errors
/// [`ProxyError::Timeout`] past the route timeout (or the call's gRPC deadline), the client's
/// own body fault ([`ProxyError::client_fault`]), [`ProxyError::Connect`] / [`ProxyError::Upstream`]
/// when no retry is left.
///
/// An `async` block for the reason [`Proxy::serve`] gives.
#[allow(clippy::manual_async_fn)]
pub(crate) fn forward<'a>(
    p: &'a Arc<Proxy>,
    ctx: &'a mut RequestCtx,
    (node, hop_seen): (Arc<Node>, Option<Instant>),
    req: Request<ProxyBody>,
    out: NodeRequestParts,
) -> impl Future<Output = Result<Forwarded, ProxyError>> + 'a {
    async move {
        let method = req.method().clone();
        // Expect: 100-continue from an HTTP/1.1 client to an HTTP/1.1 node: the body waits for the node (CASE-15).
        let gate = (req.version() == http::Version::HTTP_11
            && node.settings.protocol == Protocol::Http1
            && ctx.present.expect
            && expect::wants_continue(&out.headers))
        .then(ContinueGate::new);
        let (mut body, tap) = request_body(
            req.into_body(),
            &p.settings.limits,
            ctx.route.config.max_body,
            gate.as_ref(),
        );
        // Bounds the response head only: a stream whose head arrived is never cut by the route timeout.
        // A gRPC call with a deadline (grpc-timeout, capped by grpc_max_timeout) is bounded by it
        // instead, head and stream alike, and each attempt tells the node what is left of it.
        let budget = grpc_call::budget(
            ctx.kind == Kind::Grpc,
            &out.headers,
            ctx.route.config.grpc_max_timeout,
        );
        let mut a = Attempts {
            clock: HopClock::new(&p.metrics, hop_seen),
            deadline: grpc_call::head_deadline(ctx.start, ctx.route.config.timeout, budget),
            p,
            ctx,
            node,
            method,
            out,
            gate,
            tap: Some(tap),
            budget,
            spent: Spent::default(),
            tried: Vec::new(),
            failure_seen: None,
        };
        loop {
            let failed = match a.send(body).await? {
                Ok((answer, inflight)) => {
                    return Ok(Forwarded {
                        call_deadline: a.budget.map(|_| a.deadline),
                        node: a.node,
                        answer,
                        inflight,
                        tap: a.tap.take().unwrap_or_else(BodyTap::empty),
                    })
                }
                Err(failed) => failed,
            };
            body = a.after_failure(failed).await?;
        }
    }
}

/// The state of one request's attempts (see [`forward`]).
struct Attempts<'a> {
    p: &'a Arc<Proxy>,
    ctx: &'a mut RequestCtx,
    /// The node the next attempt goes to.
    node: Arc<Node>,
    method: Method,
    /// What every attempt sends the node (its fields get the gRPC call's remaining time).
    out: NodeRequestParts,
    gate: Option<ContinueGate>,
    /// The client's body as sent so far; `None` once a response took it.
    tap: Option<BodyTap>,
    /// The gRPC call's budget, if it has one (it then bounds head and stream).
    budget: Option<std::time::Duration>,
    deadline: Instant,
    spent: Spent,
    tried: Vec<NodeId>,
    /// When the request's first attempt failed.
    failure_seen: Option<Instant>,
    clock: HopClock<'a>,
}

/// A failed attempt that may be retried, with the node's passive-health mark taken before it.
type Failed = (SendError, crate::registry::passive::PassiveMark);

impl Attempts<'_> {
    /// Sends `body` to the current node: `Ok(Ok)` is its answer (for phase 5) with its in-flight
    /// count, `Ok(Err)` a failure for [`Attempts::after_failure`].
    ///
    /// # Errors
    /// [`ProxyError::Timeout`] when the deadline passes first (the node is charged unless it was
    /// the call's own deadline, CASE-31).
    async fn send(
        &mut self,
        body: ProxyBody,
    ) -> Result<Result<(NodeAnswer<NodeAnswerBody>, InflightGuard), Failed>, ProxyError> {
        // Borrowed field by field below (no reference count per attempt).
        let node = &self.node;
        self.ctx.log.node = Some(node.id.clone());
        let inflight = node.runtime.start_request();
        let mark = node.runtime.passive_mark();
        if self.budget.is_some() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            self.out.headers.insert(
                super::upstream::grpc::GRPC_TIMEOUT,
                grpc_call::encode_timeout(left),
            );
        }
        let head = NodeRequest {
            method: &self.method,
            target: &self.out.target,
            headers: &self.out.headers,
            forwarded: self.out.forwarded.as_ref(),
            host: self.out.host.as_ref(),
            gate: self.gate.as_ref(),
            raw_answer: !self.ctx.h2,
        };
        let mut deadline = super::deadline::Deadline::at(self.deadline);
        let sent = match deadline.bound(self.p.upstream.send(node, head, body)).await {
            Err(()) => {
                if self.budget.is_none() {
                    let h = &node.settings.health;
                    node.runtime
                        .record_passive_error(h, "timeout", Instant::now());
                }
                return Err(ProxyError::Timeout {
                    node: node.id.to_string(),
                    timeout_ms: self
                        .budget
                        .unwrap_or(self.ctx.route.config.timeout)
                        .as_millis(),
                });
            }
            Ok(Err(e)) => return Ok(Err((e, mark))),
            Ok(Ok(sent)) => sent,
        };
        if let Some(g) = &self.gate {
            g.answered();
        }
        let status = sent.response.status();
        if status.is_server_error() {
            let detail = format!("status {}", status.as_u16());
            node.runtime
                .record_passive_error(&node.settings.health, &detail, Instant::now());
        } else {
            node.runtime.record_passive_success();
        }
        // Served again: the hops of this request end here.
        self.clock.settle();
        self.p
            .metrics
            .request_duration
            .observe(self.ctx.start.elapsed().as_secs_f64());
        Ok(Ok((sent, inflight)))
    }

    /// After a failed attempt: charges the node, asks [`retry::decide`], and returns the body the
    /// next attempt sends (to the same node, or to another one, moving a bound id along).
    ///
    /// # Errors
    /// The client's own body fault, or the failure itself when no retry is left.
    async fn after_failure(&mut self, (err, mark): Failed) -> Result<ProxyBody, ProxyError> {
        let node = self.node.clone();
        let now = Instant::now();
        self.failure_seen.get_or_insert(now);
        let detail = err.detail();
        let failure = Failure::of(&err);
        let (returned, cause) = take_back(err)?;
        charge(&node, failure, &detail, mark, now);
        // What the next attempt sends: the body handed back unsent, or the tap's replay of it.
        let idle = self.p.settings.limits.body_idle_timeout;
        let replay = returned.or_else(|| match self.tap.as_ref()?.replay(idle) {
            Replay::Body(b) => Some(b),
            Replay::Lost => None,
        });
        let retries = self.ctx.route.config.retries;
        let idempotent = is_idempotent(&self.method);
        let (decision, after) =
            retry::decide(failure, idempotent, replay.is_some(), self.spent, retries);
        self.spent = after;
        match (decision, replay) {
            (Decision::Fail(kind), _) => Err(failed(kind, &node, detail, cause)),
            (Decision::SameNode { retry }, Some(body)) => {
                self.p
                    .metrics
                    .retries
                    .get_or_create(&RetryLabels {
                        route: self.ctx.route.id.clone(),
                        reason: retry,
                    })
                    .inc();
                tracing::debug!(node = %node.id, reason = retry, detail, "replaying on a new connection to the same node");
                Ok(body)
            }
            (Decision::OtherNode { hop, retry, fail }, Some(body)) => {
                self.tried.push(node.id.clone());
                let Some(next) = another(self.p, self.ctx, &self.tried) else {
                    return Err(failed(fail, &node, detail, cause));
                };
                retry_log(self.p, self.ctx, &node, &next, retry, &detail);
                self.node = moved(
                    self.p,
                    self.ctx,
                    &node,
                    next,
                    hop,
                    &self.tried,
                    &mut self.clock,
                    self.failure_seen,
                )
                .await;
                Ok(body)
            }
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
        SendError::Connect(e, back) => (Some(back), Box::new(e)),
        SendError::NotSent(e, back) => (Some(back), e),
        SendError::Sent(e) | SendError::Stale(e) => {
            if let Some(client) = ProxyError::client_fault(&*e) {
                return Err(client);
            }
            (None, e)
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

/// Moves a bound conn id along with a retry (a hop, counted in `ctx`'s log fields); returns the
/// node to try next. When a concurrent
/// request moved the id first (compare-and-set lost), this one follows it there if that node is
/// usable and untried, so the id moves once and its requests land together (CASE-17). A hop
/// counted here is owed to `clock`, timed from `seen` (the request's first failed attempt).
#[allow(clippy::too_many_arguments)]
async fn moved(
    p: &Proxy,
    ctx: &mut RequestCtx,
    old: &Node,
    next: Arc<Node>,
    reason: HopReason,
    tried: &[NodeId],
    clock: &mut HopClock<'_>,
    seen: Option<Instant>,
) -> Arc<Node> {
    let Some(conn) = &ctx.conn_id else {
        return next;
    };
    ctx.log.hops += 1;
    let c = ctx.criteria(p.settings.zone.as_deref(), tried);
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
        .await
        .logged();
    if counted {
        clock.push(seen.unwrap_or(now));
    }
    node
}
