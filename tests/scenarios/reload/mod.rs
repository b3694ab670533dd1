//! Hot reload with zero downtime (SPEC section 3 `[routes.warmup]`, section 6; CASE-01, CASE-02,
//! CASE-17 reload part): atomic swap under load, coalesced triggers (latest file wins), pre-swap
//! connect probe, invalid files, warm-up ramp and automatic rollback, the rollback endpoint, node
//! state and bindings carried over by node id, and drain of removed nodes.

mod carry_over;
mod refused;
mod routes;
mod swap;
mod under_load;
mod warmup;

use integration_tests::{free_port, get, request, wait_until, Gateway, Mock, FAST_HEALTH};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// `[[clusters]]` named `name` with `nodes` as `(id, addr, metadata TOML or "")`.
fn cluster(name: &str, nodes: &[(&str, &str, &str)], extra: &str) -> String {
    let mut s = format!("[[clusters]]\nname = \"{name}\"\n{extra}\n");
    for (id, addr, meta) in nodes {
        s.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
        if !meta.is_empty() {
            s.push_str(&format!("  metadata = {meta}\n"));
        }
    }
    s
}

/// A `[[routes]]` block: `prefix` to `cluster`, stripping `strip`, plus `extra` lines.
fn route(id: &str, prefix: &str, cluster: &str, strip: &str, extra: &str) -> String {
    format!("[[routes]]\nid = \"{id}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\ncluster = \"{cluster}\"\nstrip_prefix = \"{strip}\"\n{extra}\n")
}

/// A whole config file: [`FAST_HEALTH`], cluster `name` over `nodes` ([`cluster`]) and route `api`
/// for `/api` to it, stripping `/api`, with `route_extra` lines ([`route`]).
fn api_file(name: &str, nodes: &[(&str, &str, &str)], route_extra: &str) -> String {
    format!(
        "{FAST_HEALTH}{}{}",
        cluster(name, nodes, ""),
        route("api", "/api", name, "/api", route_extra)
    )
}

/// Starts node-a and node-b and a gateway on [`api_file`] `name` over node-a alone:
/// (node-a, node-b, that file, the gateway).
async fn on_node_a(name: &str) -> (Mock, Mock, String, Gateway) {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let v1 = api_file(name, &[("node-a", &a.addr(), "")], "");
    let gw = Gateway::start(&v1).await;
    (a, b, v1, gw)
}

/// The status of `GET path` on `gw` (pooled connection); panics if there is no answer.
async fn status_of(gw: &Gateway, path: &str) -> u16 {
    get(&gw.url(path), &[]).await.expect("request").status
}

/// `gateway_reloads_total` with label `result` (`ok`, `invalid`, `rolled_back`, ...).
async fn reloads(gw: &Gateway, result: &str) -> f64 {
    gw.metric(&format!("gateway_reloads_total{{result=\"{result}\"}}"))
        .await
}

async fn generation(gw: &Gateway) -> u64 {
    gw.admin_json("/admin/routes").await["generation"]
        .as_u64()
        .expect("generation")
}

async fn route_ids(gw: &Gateway) -> Vec<String> {
    let v = gw.admin_json("/admin/routes").await;
    v["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

/// `GET path` on a fresh connection (`Connection: close`): status and `x-node-id`.
async fn fresh_get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: app.example.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("answer within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let node = text
        .lines()
        .find_map(|l| l.strip_prefix("x-node-id: "))
        .unwrap_or("-")
        .trim()
        .to_string();
    (status, node)
}

/// One request of a load run: status, serving node, whether it asked for `x-version: v2`.
type Outcome = (u16, String, bool);

/// Background load: `tasks` loops, each one request per `every`, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Vec<Outcome>>>,
}

impl Load {
    /// Each spec is `(path, v2, fresh)`: `x-version: v2` or not, fresh connection or pooled keep-alive.
    fn start(gw: &Gateway, specs: &[(&str, bool, bool)], every: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = specs
            .iter()
            .map(|&(path, v2, fresh)| {
                let (stop, url, port, path) =
                    (stop.clone(), gw.url(path), gw.port, path.to_string());
                tokio::spawn(async move {
                    let headers: &[(&str, &str)] = if v2 { &[("x-version", "v2")] } else { &[] };
                    let mut tick = tokio::time::interval(every);
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let (status, node) = if fresh {
                            fresh_get(port, &path, headers).await
                        } else {
                            let r = get(&url, headers).await.expect("request");
                            (
                                r.status,
                                r.header("x-node-id").unwrap_or_else(|| "-".into()),
                            )
                        };
                        out.push((status, node, v2));
                    }
                    out
                })
            })
            .collect();
        Load { stop, handles }
    }

    async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for h in self.handles {
            all.extend(h.await.expect("load task"));
        }
        all
    }
}

/// A loopback address whose TCP connect hangs: a listener with a full accept queue drops SYNs.
/// Keep the returned sockets alive while the address is in use.
async fn hanging_addr() -> (String, tokio::net::TcpListener, Vec<TcpStream>) {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = sock.listen(1).expect("listen");
    let addr = listener.local_addr().expect("local addr");
    let mut fill = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            fill.push(s);
        }
    }
    let probe = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await;
    assert!(
        probe.is_err(),
        "the accept queue of {addr} is full, so a connect hangs"
    );
    (addr.to_string(), listener, fill)
}
