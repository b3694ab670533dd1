//! DNS service discovery (SPEC section 12) against a real DNS server: `dnsmasq` started
//! by the test on a loopback port with a hosts file it rewrites, `[server] resolver` pointing at
//! it, and mock nodes sharing one port on 127.0.0.2, 127.0.0.3, ... (`mock-backend --listen-host`).

use integration_tests::check::Ws;
use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use integration_tests::dns::{Dnsmasq, HostMock};
use integration_tests::{free_port, get, wait_until, Gateway, FAST_HEALTH};
use serde_json::{json, Value};
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const NAME: &str = "provider.hopgw.test";

/// A gateway config: resolver at `dns`, one discovery cluster `c` for [`NAME`]:`port` with the
/// given `interval` and a 2 s drain, one catch-all route hopping WebSockets.
fn config(dns: &Dnsmasq, port: u16, interval: &str) -> String {
    format!(
        "[server]\nresolver = \"{}\"\n{FAST_HEALTH}\n[[clusters]]\nname = \"c\"\ndiscovery = {{ kind = \"dns\", name = \"{NAME}\", port = {port}, interval = \"{interval}\", drain_period = \"2s\", metadata = {{ version = \"v1\" }} }}\n\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"hop\"\n",
        dns.addr()
    )
}

/// The nodes of cluster `c` in `/admin/nodes`, by id.
async fn nodes(gw: &Gateway) -> Vec<Value> {
    let all = gw.admin_json("/admin/nodes").await;
    all.as_array()
        .expect("array")
        .iter()
        .filter(|n| n["cluster"] == "c")
        .cloned()
        .collect()
}

async fn node_ids(gw: &Gateway) -> HashSet<String> {
    nodes(gw)
        .await
        .iter()
        .map(|n| n["id"].as_str().expect("id").to_string())
        .collect()
}

/// Waits until cluster `c` has exactly `want` node ids.
async fn wait_ids(gw: &Gateway, want: &[String], what: &str) {
    let want: HashSet<String> = want.iter().cloned().collect();
    wait_until(Duration::from_secs(10), what, || {
        let want = want.clone();
        async move { node_ids(gw).await == want }
    })
    .await;
}

/// Nodes serving `n` fresh `GET /data` requests.
async fn served_by(gw: &Gateway, n: usize) -> HashSet<String> {
    let mut seen = HashSet::new();
    for _ in 0..n {
        let r = get(&gw.url("/data"), &[]).await.expect("request");
        assert_eq!(r.status, 200, "{}", r.text());
        seen.insert(r.header("x-node-id").expect("x-node-id"));
    }
    seen
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// The next text message as JSON within `t`, skipping control frames.
async fn next_json(ws: &mut Ws, t: Duration) -> Value {
    let deadline = Instant::now() + t;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a message in time")
            .expect("socket open")
            .expect("no socket error");
        match m {
            Message::Text(s) => return serde_json::from_str(&s).expect("JSON greeting"),
            Message::Close(c) => panic!("the client saw a Close: {c:?}"),
            _ => {}
        }
    }
}

/// SPEC 12, records added and removed: a name with one A record gives one node
/// (`source = "dns:<name>"`, recent `last_resolved_ms`, cluster metadata); an added record gives a
/// second node that is probed before its first request and then gets traffic; removing a record
/// drains that node: it leaves the table, its WebSocket hops to the remaining node with the client
/// socket open, and new requests go to the remaining node only.
/// Long on purpose: one DNS server and one gateway through add, probe, remove and drain.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn dns_records_added_become_probed_nodes_and_removed_ones_drain_with_ws_hop() {
    let port = free_port();
    let m2 = HostMock::start("127.0.0.2", port).await;
    let m3 = HostMock::start("127.0.0.3", port).await;
    let dns = Dnsmasq::start(&[("127.0.0.2", NAME)], 1).await;
    let before = unix_ms();
    let gw = Gateway::start(&config(&dns, port, "1s")).await;
    wait_ids(&gw, &[m2.id()], "the one discovered node").await;
    let n = &nodes(&gw).await[0];
    assert_eq!(n["addr"], m2.id());
    assert_eq!(n["source"], format!("dns:{NAME}"));
    assert_eq!(n["metadata"], json!({"version": "v1"}));
    let resolved = n["last_resolved_ms"].as_u64().expect("last_resolved_ms");
    assert!(
        resolved >= before && resolved <= unix_ms(),
        "{resolved} not in [{before}, now]"
    );
    assert_eq!(served_by(&gw, 10).await, HashSet::from([m2.id()]));

    // A record added: the node appears, probed before any request reached it.
    dns.set_records(&[("127.0.0.2", NAME), ("127.0.0.3", NAME)]);
    wait_ids(&gw, &[m2.id(), m3.id()], "the added node").await;
    let paths = m3.stats().await["paths"].clone();
    assert_eq!(
        paths[0], "/health",
        "the new node's first request is the probe: {paths}"
    );
    wait_until(Duration::from_secs(10), "both nodes to serve", || async {
        served_by(&gw, 10).await.len() == 2
    })
    .await;

    // A WebSocket on one node; that node's record removed: the socket hops, the node drains.
    let req = format!("ws://127.0.0.1:{}/ws", gw.port)
        .into_client_request()
        .map(|mut r| {
            r.headers_mut()
                .insert("x-conn-id", "dns-ws-1".parse().expect("value"));
            r
        })
        .expect("request");
    let handshake = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(req),
    );
    let (mut ws, _) = handshake
        .await
        .expect("handshake in time")
        .expect("upgrade accepted");
    let first = next_json(&mut ws, Duration::from_secs(3)).await;
    let from = first["node"].as_str().expect("node").to_string();
    let (gone, stays) = if from == m2.id() {
        ("127.0.0.2", m3.id())
    } else {
        ("127.0.0.3", m2.id())
    };
    let keep = if gone == "127.0.0.2" {
        "127.0.0.3"
    } else {
        "127.0.0.2"
    };
    dns.set_records(&[(keep, NAME)]);
    wait_ids(
        &gw,
        std::slice::from_ref(&stays),
        "the removed node to leave",
    )
    .await;
    let hop = next_json(&mut ws, Duration::from_secs(5)).await;
    assert_eq!(
        hop,
        json!({"node": stays, "conn_id": "dns-ws-1", "hopped_from": from})
    );
    ws.send(Message::text("after-the-hop")).await.expect("send");
    let next = timeout(Duration::from_secs(3), ws.next()).await;
    let echo = next
        .expect("echo in time")
        .expect("open")
        .expect("no error");
    assert_eq!(echo, Message::text("after-the-hop"));
    gw.logs
        .wait_for(
            &["node removed by reload; draining", &from],
            Duration::from_secs(2),
        )
        .await;
    assert_eq!(served_by(&gw, 10).await, HashSet::from([stays]));
}

/// SPEC 12, DNS server stopped: an empty answer and then a stopped DNS server keep the
/// last good node set (both nodes stay in the table, healthy, serving) while
/// `gateway_discovery_errors_total{cluster="c"}` rises; once the server answers again with one
/// record, the set follows it.
#[tokio::test]
async fn dns_failures_keep_the_last_good_set_and_count_errors() {
    let port = free_port();
    let m2 = HostMock::start("127.0.0.2", port).await;
    let m3 = HostMock::start("127.0.0.3", port).await;
    let both = [("127.0.0.2", NAME), ("127.0.0.3", NAME)];
    let mut dns = Dnsmasq::start(&both, 1).await;
    let gw = Gateway::start(&config(&dns, port, "1s")).await;
    let ids = [m2.id(), m3.id()];
    wait_ids(&gw, &ids, "both discovered nodes").await;
    let series = "gateway_discovery_errors_total{cluster=\"c\"}";
    assert_eq!(gw.metric(series).await, 0.0);

    // No record for the name: an error, not an empty cluster.
    dns.set_records(&[("127.0.0.9", "other.hopgw.test")]);
    wait_until(
        Duration::from_secs(10),
        "an error for the empty answer",
        || async { gw.metric(series).await >= 1.0 },
    )
    .await;
    assert_eq!(node_ids(&gw).await, ids.iter().cloned().collect());

    // The DNS server gone: errors keep rising, the nodes stay and serve.
    dns.stop().await;
    let seen = gw.metric(series).await;
    wait_until(Duration::from_secs(15), "two more errors", || async {
        gw.metric(series).await >= seen + 2.0
    })
    .await;
    assert_eq!(node_ids(&gw).await, ids.iter().cloned().collect());
    for n in nodes(&gw).await {
        assert_eq!(n["state"], "healthy", "{n}");
    }
    assert_eq!(served_by(&gw, 20).await.len(), 2);
    gw.logs
        .wait_for(
            &[
                "DNS discovery failed; keeping the last good node set",
                "cluster=c",
            ],
            Duration::from_secs(2),
        )
        .await;

    // Back with one record: the set follows.
    dns.restart(&[("127.0.0.2", NAME)]).await;
    wait_ids(&gw, &[m2.id()], "the set to follow the answer again").await;
    gw.logs
        .wait_for(&["DNS discovery resolves again"], Duration::from_secs(2))
        .await;
}

/// SPEC 12: a DNS server that stops answering is seen within the interval, whatever its records'
/// TTL: with `interval = "1s"` and records valid for an hour, `gateway_discovery_errors_total`
/// rises within 5 s of the server being killed (no cached answer stands in for it, one attempt per
/// resolution bounded by the interval), and the last good set stays.
#[tokio::test]
async fn dns_server_that_stops_answering_is_counted_within_the_interval() {
    let port = free_port();
    let m2 = HostMock::start("127.0.0.2", port).await;
    let mut dns = Dnsmasq::start(&[("127.0.0.2", NAME)], 3600).await;
    let gw = Gateway::start(&config(&dns, port, "1s")).await;
    wait_ids(&gw, &[m2.id()], "the discovered node").await;
    let series = "gateway_discovery_errors_total{cluster=\"c\"}";
    assert_eq!(gw.metric(series).await, 0.0);

    dns.stop().await;
    wait_until(
        Duration::from_secs(5),
        "a discovery error within 5 s of the DNS server dying",
        || async { gw.metric(series).await >= 1.0 },
    )
    .await;
    assert_eq!(node_ids(&gw).await, HashSet::from([m2.id()]));
}

/// The Spring Cloud LoadBalancer lesson: with a 1 h resolution interval and a 1 h TTL,
/// a discovered node whose process dies while its record stays is ejected by its probes within the
/// timing promise, and no re-resolution happened meanwhile (`last_resolved_ms` unchanged).
#[tokio::test]
async fn dead_discovered_node_is_ejected_by_probes_whatever_the_resolution_interval() {
    let port = free_port();
    let m2 = HostMock::start("127.0.0.2", port).await;
    let mut m3 = HostMock::start("127.0.0.3", port).await;
    let dns = Dnsmasq::start(&[("127.0.0.2", NAME), ("127.0.0.3", NAME)], 3600).await;
    let gw = Gateway::start(&config(&dns, port, "1h")).await;
    wait_ids(&gw, &[m2.id(), m3.id()], "both discovered nodes").await;
    let resolved = gw.node(&m3.id()).await["last_resolved_ms"].clone();
    assert!(resolved.as_u64().is_some(), "{resolved}");

    m3.kill().await;
    let t0 = Instant::now();
    gw.wait_node_state(&m3.id(), "ejected", Duration::from_secs(10))
        .await;
    let took = t0.elapsed();
    // FAST_HEALTH: eject_after 3 intervals of 200 ms plus one 200 ms timeout; 400 ms of slack.
    eprintln!("dead discovered node ejected after {took:?}");
    assert!(
        took <= Duration::from_millis(800 + 400),
        "ejected after {took:?}"
    );
    let n = gw.node(&m3.id()).await;
    assert_eq!(
        n["source"],
        format!("dns:{NAME}"),
        "still listed by DNS: {n}"
    );
    assert_eq!(n["last_resolved_ms"], resolved, "no re-resolution: {n}");
    assert_eq!(served_by(&gw, 10).await, HashSet::from([m2.id()]));
}
