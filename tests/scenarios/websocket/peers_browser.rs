//! `websocket = "hop"` with a real browser (SPEC section 5, "Extensions and subprotocols"): headless
//! Chromium, which offers permessage-deflate on every socket, through the gateway to Python
//! `websockets` deflate nodes (`tests/peers/ws_peer.py`); the socket's node is killed under it.

use super::peers::gateway_over;
use super::*;
use integration_tests::nodes::hand_node;
use integration_tests::peers::{Compression::Deflate, PyNode};
use integration_tests::read_head;
use integration_tests::webdriver::Browser;

/// The page: `start(url)` opens the socket; `burst(tag, n)` sends `n` distinct messages (2 KiB-ish
/// compressible text and 4 KiB pseudo-random binary in turn); `report()` says how many echoes
/// came back matching what was sent, in order, and every close and error event seen.
const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>WebSocket hop</title>
<script>
var t = { opened: false, ext: null, sent: [], got: [], closes: [], errors: 0 };
var ws;
function start(url) {
  ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { t.opened = true; t.ext = ws.extensions; };
  ws.onmessage = (e) => t.got.push(e.data);
  ws.onclose = (e) => t.closes.push([e.code, e.reason]);
  ws.onerror = () => { t.errors += 1; };
}
function message(tag, i) {
  if (i % 2 === 0) return tag + "." + i + ":" + "the quick brown fox jumps over the lazy dog; ".repeat(45);
  // xorshift32 seeded by the tag and index: distinct, incompressible bytes.
  let x = (i + 1) * 2654435761 ^ [...tag].reduce((h, ch) => h * 31 + ch.charCodeAt(0), 7);
  const b = new Uint8Array(4096);
  for (let k = 0; k < b.length; k++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; b[k] = x & 255; }
  return b.buffer;
}
function burst(tag, n) {
  for (let i = 0; i < n; i++) { const m = message(tag, i); t.sent.push(m); ws.send(m); }
}
function same(a, b) {
  if (typeof a === "string" || typeof b === "string") return a === b;
  const x = new Uint8Array(a), y = new Uint8Array(b);
  return x.length === y.length && x.every((v, k) => v === y[k]);
}
function report() {
  let matching = 0;
  while (matching < t.got.length && matching < t.sent.length && same(t.sent[matching], t.got[matching])) matching++;
  return { sent: t.sent.length, got: t.got.length, matching, closes: t.closes, errors: t.errors, ext: t.ext };
}
</script>
"#;

/// Serves [`PAGE`] to every request on a loopback port of its own; returns its URL and the task.
async fn serve_page() -> (String, tokio::task::JoinHandle<()>) {
    let (addr, task) = hand_node(|mut s| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                PAGE.len()
            );
            let _ = s.write_all(format!("{head}{PAGE}").as_bytes()).await;
        }
    })
    .await;
    (format!("http://{addr}/"), task)
}

/// Waits until the page has `n` echoes; asserts all match what it sent, in order, and that the
/// socket saw no close and no error.
async fn expect_echoes(br: &Browser, n: usize) {
    let r = br
        .wait_js(
            &format!("const r = report(); return r.got >= {n} || r.closes.length > 0 ? r : null;"),
            Duration::from_secs(10),
            &format!("{n} echoes in the page"),
        )
        .await;
    assert_eq!(
        (
            &r["sent"],
            &r["got"],
            &r["matching"],
            &r["closes"],
            &r["errors"]
        ),
        (&json!(n), &json!(n), &json!(n), &json!([]), &json!(0)),
        "{r}"
    );
}

/// Chromium's socket, deflate negotiated with a Python node, stays open when that node is
/// killed: the gateway hops it to the other deflate node and 50 messages after the hop echo
/// exactly, with no close or error event in the page.
#[tokio::test]
async fn ws_browser_deflate_socket_stays_open_when_its_node_dies() {
    let mut nodes = PyNode::start_all(&[("node-a", Deflate, &[]), ("node-b", Deflate, &[])]).await;
    let gw = gateway_over(&[&nodes[0], &nodes[1]]).await;
    let (page, _server) = serve_page().await;
    let br = Browser::start().await;
    br.goto(&page).await;
    br.exec(
        "start(arguments[0]); return true;",
        json!([format!("ws://127.0.0.1:{}/ws", gw.port)]),
    )
    .await
    .expect("start the socket");
    let ext = br
        .wait_js(
            "return t.opened && (t.ext || 'none');",
            Duration::from_secs(10),
            "the socket to open",
        )
        .await;
    assert!(
        ext.as_str()
            .is_some_and(|e| e.contains("permessage-deflate")),
        "negotiated: {ext}"
    );
    br.exec("burst('before', 20); return true;", json!([]))
        .await
        .expect("burst");
    expect_echoes(&br, 20).await;

    // The browser sets no conn id: the gateway issued one, which the node saw in its handshake.
    wait_until(
        Duration::from_secs(2),
        "a node to report the socket",
        || {
            let seen = nodes.iter().any(|n| !n.conns().is_empty());
            async move { seen }
        },
    )
    .await;
    let first = nodes
        .iter()
        .position(|n| !n.conns().is_empty())
        .expect("a node holds the socket");
    let id = nodes[first].conns()[0]["conn_id"]
        .as_str()
        .expect("the gateway sent a conn id")
        .to_string();
    let (from, to) = (nodes[first].id.clone(), nodes[1 - first].id.clone());
    nodes[first].kill().await;
    wait_until(Duration::from_secs(5), "the binding to move", || async {
        gw.admin_json(&format!("/admin/conns/{id}")).await["node"] == to.as_str()
    })
    .await;
    br.exec("burst('after', 50); return true;", json!([]))
        .await
        .expect("burst");
    expect_echoes(&br, 70).await;
    let leg = nodes[1 - first].conns();
    assert_eq!(leg.len(), 1, "{leg:?}");
    assert_eq!(
        (&leg[0]["conn_id"], &leg[0]["hopped_from"]),
        (&json!(id), &json!(from))
    );
    br.close().await;
}
