//! The status page (`GET /` on the admin listener, SPEC section 11) in a real browser:
//! Debian's headless chromium over chromedriver, against a gateway with two mock nodes.

use std::time::Duration;
use tokio::time::Instant;

use integration_tests::check::kill_one_of;
use integration_tests::http::{get, request};
use integration_tests::webdriver::Browser;
use integration_tests::{root, Gateway, Mock};
use serde_json::json;

const INTERVAL_MS: u64 = 300;
const TIMEOUT_MS: u64 = 300;
const DEGRADE_AFTER: u64 = 2;
const EJECT_AFTER: u64 = 5;
/// What the page adds to the SPEC's timing promise: the node watcher's 200 ms, the event stream,
/// the page's 100 ms render batching, the test's 50 ms polling, and a loaded CI machine.
const PAGE_SLACK: Duration = Duration::from_millis(2_500);

fn config(a: &Mock, b: &Mock, server_extra: &str) -> String {
    format!(
        r#"
[server]
{server_extra}
[health]
interval = "{INTERVAL_MS}ms"
timeout = "{TIMEOUT_MS}ms"
degrade_after = {DEGRADE_AFTER}
eject_after = {EJECT_AFTER}
recover_after = 1
slow_start = "0s"
[[clusters]]
name = "provider-service"
  [[clusters.nodes]]
  id = "node-a"
  addr = "{}"
  [[clusters.nodes]]
  id = "node-b"
  addr = "{}"
[[routes]]
id = "api"
match = {{ path_prefix = "/" }}
cluster = "provider-service"
"#,
        a.addr(),
        b.addr()
    )
}

/// Waits until the page's row for `node` shows `state` (its `data-state`); returns how long it took.
async fn wait_state(b: &Browser, node: &str, state: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    let js = format!(
        "const r = document.querySelector('tr[data-node=\"{node}\"]'); return !!r && r.dataset.state === '{state}';"
    );
    b.wait_js(&js, within, &format!("{node} shown {state}"))
        .await;
    t0.elapsed()
}

/// Waits up to 10 s each for node-a and node-b to show healthy on the page in `br`, then for the
/// live marker (`what` names that wait: the event stream connected).
async fn healthy_and_live(br: &Browser, what: &str) {
    wait_state(br, "node-a", "healthy", Duration::from_secs(10)).await;
    wait_state(br, "node-b", "healthy", Duration::from_secs(10)).await;
    br.wait_js(
        "return document.getElementById('live-text').textContent === 'live';",
        Duration::from_secs(10),
        what,
    )
    .await;
}

/// In a browser: both nodes shown healthy; a node set down with /control/health is shown
/// degraded then ejected within the timing promise without a page reload; killing a bound node
/// puts the hop in the recent-hops list; the drain button puts the node in draining. Saves the
/// screenshot to target/test-artifacts/status-page.png.
/// Long on purpose: one browser session watches every state change without a reload.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn status_page_shows_nodes_hops_and_drain_live_in_a_browser() {
    let mut a = Mock::start("node-a").await;
    let mut b_node = Mock::start("node-b").await;
    let gw = Gateway::start(&config(&a, &b_node, "")).await;
    let page = get(&gw.admin("/"), &[]).await.expect("GET /");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(
        !page.text().contains("src=\"http") && !page.text().contains("href=\"http"),
        "the page fetches nothing from elsewhere"
    );

    let br = Browser::start().await;
    br.goto(&gw.admin("/")).await;
    br.exec("window.__loadMarker = 4242; return true;", json!([]))
        .await
        .expect("set marker");
    healthy_and_live(&br, "event stream connected").await;

    // Down: degraded within degrade_after intervals (+ one timeout), ejected within eject_after.
    let t0 = Instant::now();
    b_node.set_down().await;
    let promise_degraded = Duration::from_millis(DEGRADE_AFTER * INTERVAL_MS + TIMEOUT_MS);
    let promise_ejected = Duration::from_millis(EJECT_AFTER * INTERVAL_MS + TIMEOUT_MS);
    wait_state(&br, "node-b", "degraded", promise_degraded + PAGE_SLACK).await;
    let degraded_at = t0.elapsed();
    wait_state(&br, "node-b", "ejected", promise_ejected + PAGE_SLACK).await;
    let ejected_at = t0.elapsed();
    assert!(
        degraded_at < ejected_at,
        "degraded ({degraded_at:?}) shown before ejected ({ejected_at:?})"
    );
    eprintln!("page showed degraded after {degraded_at:?}, ejected after {ejected_at:?}");
    let marker = br
        .exec("return window.__loadMarker || 0;", json!([]))
        .await
        .expect("marker");
    assert_eq!(marker, json!(4242), "the page was not reloaded");

    // Back up; then kill the node a conn id is bound to: the hop shows in the recent-hops list.
    b_node.set_up().await;
    wait_state(&br, "node-b", "healthy", Duration::from_secs(10)).await;
    let conn = "page-hop-conn-1";
    let r = get(&gw.url("/data"), &[("X-Conn-Id", conn)])
        .await
        .expect("bind");
    assert_eq!(r.status, 200);
    let bound = gw.admin_json(&format!("/admin/conns/{conn}")).await["node"]
        .as_str()
        .expect("bound node")
        .to_string();
    let survivor = kill_one_of(&bound, &mut a, &mut b_node).await;
    let r = get(&gw.url("/data"), &[("X-Conn-Id", conn)])
        .await
        .expect("after kill");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(survivor), "{}", r.text());
    let hop = br
        .wait_js(
            &format!(
                "const r = document.querySelector('#hops tr[data-conn=\"{conn}\"]'); return r ? r.textContent : '';"
            ),
            Duration::from_secs(5),
            "the hop in the recent-hops list",
        )
        .await;
    let hop = hop.as_str().expect("text").to_string();
    assert!(
        hop.contains(&bound) && hop.contains(survivor),
        "hop row names from and to: {hop}"
    );

    // Drain the survivor with its button.
    br.click(&format!("button[data-drain=\"{survivor}\"]"))
        .await
        .expect("click drain");
    wait_state(&br, survivor, "draining", Duration::from_secs(5)).await;
    assert_eq!(gw.node(survivor).await["state"], "draining");
    br.wait_js(
        &format!("const r = document.querySelector('tr[data-node=\"{survivor}\"] button'); return r && r.textContent === 'Undrain';"),
        Duration::from_secs(5),
        "the button offers undrain",
    )
    .await;

    let shot = root().join("target/test-artifacts/status-page.png");
    br.screenshot(&shot).await.expect("screenshot");
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "a real screenshot"
    );
    eprintln!("screenshot: {}", shot.display());
    br.close().await;
}

/// With admin_token set, GET / needs no token and carries no node data; the page asks
/// for the token, refuses a wrong one, and with the right one shows the nodes (sent as a bearer
/// header on its API and event calls).
#[tokio::test]
async fn status_page_asks_for_the_admin_token() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(&a, &b, "admin_token = \"page-s3cret\"")).await;
    let page = get(&gw.admin("/"), &[]).await.expect("GET /");
    assert_eq!(page.status, 200, "the page itself needs no token");
    assert!(
        !page.text().contains("node-a") && !page.text().contains(&a.addr()),
        "the page carries no node data"
    );
    let status = get(&gw.admin("/admin/status"), &[]).await.expect("status");
    assert_eq!(status.status, 401);
    let events = request("GET", &gw.admin("/admin/events"), &[], Vec::new())
        .await
        .expect("events");
    assert_eq!(events.status, 401);

    let br = Browser::start().await;
    br.goto(&gw.admin("/")).await;
    br.wait_js(
        "return getComputedStyle(document.getElementById('login')).display !== 'none';",
        Duration::from_secs(10),
        "the token prompt",
    )
    .await;
    let rows = br
        .exec(
            "return document.querySelectorAll('tr[data-node]').length;",
            json!([]),
        )
        .await
        .expect("rows");
    assert_eq!(rows, json!(0), "no node data before the token");

    br.type_into("#token", "wrong").await.expect("type");
    br.click("#token-form button").await.expect("submit");
    br.wait_js(
        "return document.getElementById('token-err').textContent.includes('refused');",
        Duration::from_secs(5),
        "a wrong token is refused",
    )
    .await;

    br.type_into("#token", "page-s3cret").await.expect("type");
    br.click("#token-form button").await.expect("submit");
    healthy_and_live(&br, "the event stream, read with the bearer header").await;
    // The stream is live with the token: a drain from outside shows without a poll.
    let r = request(
        "POST",
        &gw.admin("/admin/nodes/node-a/drain?period=5m"),
        &[("authorization", "Bearer page-s3cret")],
        Vec::new(),
    )
    .await
    .expect("drain");
    assert_eq!(r.status, 202);
    wait_state(&br, "node-a", "draining", Duration::from_secs(5)).await;
    br.screenshot(&root().join("target/test-artifacts/status-page-token.png"))
        .await
        .expect("screenshot");
    br.close().await;
}
