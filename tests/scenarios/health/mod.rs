//! Health that sees alive-but-useless nodes (SPEC section 3 `[health]`, section 8): HTTP probes with a
//! JSON body check, TCP probes, the weight ladder and slow start, passive ejection, the timing
//! promise, and the last-node guard against a timeout storm.

mod ejection;
mod ladder;
mod probe;

use integration_tests::{get, Gateway, Mock};
use integration_tests::{Cluster, Config, Health, Route};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// A gateway config: `[health]` lines, one cluster `c` with `nodes` (id, addr) and extra cluster
/// lines, and one catch-all route with extra route lines.
fn config(
    health: &str,
    cluster_extra: &str,
    nodes: &[(&str, String)],
    route_extra: &str,
) -> String {
    Config::new()
        .health(Health::http().line(health))
        .with_cluster(Cluster::new("c").line(cluster_extra).addrs(nodes))
        .route(Route::prefix("api", "/", "c").line(route_extra))
        .toml()
}

/// Starts a gateway over mocks `a` and `b` (node ids `a`, `b`) with `[health]` lines `health` and
/// no extra cluster or route lines ([`config`]).
async fn gateway_ab(health: &str, a: &Mock, b: &Mock) -> Gateway {
    Gateway::start(&config(health, "", &[("a", a.addr()), ("b", b.addr())], "")).await
}

/// `[health]` lines probing `/actuator/health/business` (JSON `/business` must be "UP") every
/// 200 ms with probe timeout `timeout`, ladder 2/20 %/3/2, slow start 3 s, then `extra` lines.
fn business_health(timeout: &str, extra: &str) -> String {
    format!(
        r#"path = "/actuator/health/business"
expect_status = [200, 599]
expect_json = {{ pointer = "/business", equals = "UP" }}
interval = "200ms"
timeout = "{timeout}"
degrade_after = 2
degraded_percent = 20
eject_after = 3
recover_after = 2
slow_start = "3s"
{extra}"#
    )
}

/// Starts mocks `a` and `b` and a gateway over them ([`gateway_ab`] with `health`): (a, b, gateway).
async fn nodes_ab(health: &str) -> (Mock, Mock, Gateway) {
    let a = Mock::start("a").await;
    let b = Mock::start("b").await;
    let gw = gateway_ab(health, &a, &b).await;
    (a, b, gw)
}

/// Waits up to 2 s for the log line "node state changed" of node `node` into state `to` with
/// reason `why`; returns that line. Panics if none comes.
async fn change_logged(gw: &Gateway, node: &str, to: &str, why: &str) -> String {
    let node = format!("node={node}");
    gw.logs
        .wait_for(
            &["node state changed", &node, to, why],
            Duration::from_secs(2),
        )
        .await
}

/// `gateway_health_transitions_total` of node `node` in cluster `c` into state `to`.
async fn transitions_to(gw: &Gateway, node: &str, to: &str) -> f64 {
    gw.metric(&format!(
        "gateway_health_transitions_total{{cluster=\"c\",node=\"{node}\",to=\"{to}\"}}"
    ))
    .await
}

/// The admin view of node `id`: (state, weight).
async fn view(gw: &Gateway, id: &str) -> (String, f64) {
    let n = gw.node(id).await;
    (
        n["state"].as_str().expect("state").to_string(),
        n["weight"].as_f64().expect("weight"),
    )
}

/// Polls node `id` every 10 ms until `state`; returns the time since `since` and the weight then.
async fn time_to_state(
    gw: &Gateway,
    id: &str,
    state: &str,
    since: Instant,
    timeout: Duration,
) -> (Duration, f64) {
    loop {
        let (s, w) = view(gw, id).await;
        if s == state {
            return (since.elapsed(), w);
        }
        assert!(
            since.elapsed() < timeout,
            "node {id} not {state} after {timeout:?} (is {s})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends `n` `GET /data` with `concurrency` tasks; returns requests served per node id.
async fn spread(gw: &Gateway, n: usize, concurrency: usize) -> HashMap<String, usize> {
    load(gw, concurrency, |served| served < n / concurrency).await
}

/// `GET /data` from `concurrency` keep-alive loops, each going on while `more(requests it has
/// served)` holds; requests served per node id. Every answer must be 200.
async fn load(
    gw: &Gateway,
    concurrency: usize,
    more: impl Fn(usize) -> bool + Copy,
) -> HashMap<String, usize> {
    let url = gw.url("/data");
    let tasks = (0..concurrency).map(|_| {
        let url = url.clone();
        async move {
            let mut seen = Vec::new();
            while more(seen.len()) {
                let r = get(&url, &[]).await.expect("request");
                assert_eq!(r.status, 200, "{}", r.text());
                seen.push(r.header("x-node-id").expect("x-node-id"));
            }
            seen
        }
    });
    let mut counts = HashMap::new();
    for id in futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .flatten()
    {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

/// `GET /data` from `concurrency` keep-alive loops until `until`; requests served per node id.
async fn load_until(gw: &Gateway, concurrency: usize, until: Instant) -> HashMap<String, usize> {
    load(gw, concurrency, |_| Instant::now() < until).await
}

/// Share of node `id` in `counts` (0 when nothing was served).
fn share_of(counts: &HashMap<String, usize>, id: &str) -> f64 {
    let all: usize = counts.values().sum();
    if all == 0 {
        return 0.0;
    }
    *counts.get(id).unwrap_or(&0) as f64 / all as f64
}
