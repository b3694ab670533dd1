//! What the scenarios read off answers and nodes: the node that answered, the headers a mock's
//! `/echo` saw, the SPEC error body (section 4), hop counts (section 8) and bindings (section 7).

use crate::{get, request, Gateway, Mock, Resp};

/// The affinity header (SPEC section 7).
pub const HDR: &str = "X-Conn-Id";

/// The SPEC's default fallback body (section 3 `fallback`, section 4).
pub const DEFAULT_FALLBACK: &str = r#"{"code":-1,"message":"service temporarily unavailable"}"#;

/// The `x-node-id` of `r`; panics (with the status and body) when the answer has none.
pub fn node_of(r: &Resp) -> String {
    r.header("x-node-id")
        .unwrap_or_else(|| panic!("no x-node-id on {} {}", r.status, r.text()))
}

/// Every value of header `name` (lower case) the node received, in order, from the mock's `/echo`
/// JSON (SPEC section 9).
pub fn echo_header(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers array")
        .iter()
        .filter(|p| p[0] == name)
        .map(|p| p[1].as_str().expect("value").to_string())
        .collect()
}

/// Asserts `body` is the SPEC error shape `{"code":-1,"message":..}` (section 4) with a non-empty
/// message; returns the message. Panics otherwise.
pub fn json_error(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(body)));
    assert_eq!(v["code"], -1, "{v}");
    let msg = v["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {v}"))
        .to_string();
    assert!(!msg.is_empty(), "{v}");
    msg
}

/// Sum of every `hopping_count_total{...}` series on `gw`'s `/metrics` (SPEC section 8).
pub async fn hops_total(gw: &Gateway) -> f64 {
    let text = gw.metrics_text().await;
    text.lines()
        .filter(|l| l.starts_with("hopping_count_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// The paths mock `m` saw since its last reset, `/health` probes excluded; asserts the mock's
/// bounded path list is complete (so nothing was missed).
pub async fn non_probe_paths(m: &Mock) -> Vec<String> {
    let stats = m.stats().await;
    let paths: Vec<String> = stats["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p.as_str().expect("str").to_string())
        .collect();
    assert_eq!(
        stats["requests"].as_u64().expect("requests"),
        paths.len() as u64,
        "stats path list truncated: {stats}"
    );
    paths.into_iter().filter(|p| p != "/health").collect()
}

/// Binds a conn id to `node` on `gw` and returns it: `id` itself, or the first `id~N` that lands
/// there. New ids are placed by rendezvous hashing (SPEC section 7), so an id that lands elsewhere
/// always would; a variant of it is tried instead (each miss is unbound again). Panics after 64.
pub async fn bind_to(gw: &Gateway, id: &str, node: &str) -> String {
    bind_to_via(gw, "/echo/bind", id, node).await
}

/// As [`bind_to`], binding with `GET path` ([`bind_via`]): for nodes other than `mock-backend`.
pub async fn bind_to_via(gw: &Gateway, path: &str, id: &str, node: &str) -> String {
    for n in 0..64 {
        let id = if n == 0 {
            id.to_string()
        } else {
            format!("{id}~{n}")
        };
        if bind_via(gw, path, &id).await == node {
            return id;
        }
        assert_eq!(unbind(gw, &id).await, 204);
    }
    panic!("could not bind {id} to {node}");
}

/// Sends `GET path` with conn id `id` through `gw`, asserts its 200, and returns the node the id
/// is bound to then (`GET /admin/conns/{id}`, SPEC section 8).
pub async fn bind_via(gw: &Gateway, path: &str, id: &str) -> String {
    let r = get(&gw.url(path), &[(HDR, id)]).await.expect("get");
    assert_eq!(r.status, 200, "{}", r.text());
    bound_node(gw, id).await
}

/// The node conn id `id` is bound to on `gw` (`GET /admin/conns/{id}`); panics without a binding.
pub async fn bound_node(gw: &Gateway, id: &str) -> String {
    let b = gw.admin_json(&format!("/admin/conns/{id}")).await;
    b["node"]
        .as_str()
        .unwrap_or_else(|| panic!("no binding for {id}: {b}"))
        .to_string()
}

/// A client WebSocket over plain TCP (`ws://`), as `tokio_tungstenite::connect_async` opens it.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next text message on WebSocket `ws` within `t`, skipping pings and pongs; panics on any
/// other message, an error, the end of the stream or the deadline.
pub async fn ws_text<S>(ws: &mut S, t: std::time::Duration) -> String
where
    S: futures_util::StreamExt<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin,
{
    use tokio_tungstenite::tungstenite::Message;
    let deadline = tokio::time::Instant::now() + t;
    loop {
        match tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a message in time")
        {
            Some(Ok(Message::Text(s))) => return s.to_string(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

/// A finished command's stdout then stderr as one (lossy UTF-8) text, for assertions and their
/// messages about what a tool said.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Kills `node` (`"node-a"` is `a`, any other id is `b`) and returns the id of the one left
/// running (`"node-b"` or `"node-a"`).
pub async fn kill_one_of(node: &str, a: &mut Mock, b: &mut Mock) -> &'static str {
    if node == "node-a" {
        a.kill().await;
        "node-b"
    } else {
        b.kill().await;
        "node-a"
    }
}

/// `DELETE /admin/conns/<id>` on `gw` (SPEC section 8): the status (204 when it was bound).
/// Panics if the request itself fails.
pub async fn unbind(gw: &Gateway, id: &str) -> u16 {
    request(
        "DELETE",
        &gw.admin(&format!("/admin/conns/{id}")),
        &[],
        Vec::new(),
    )
    .await
    .expect("delete")
    .status
}
