//! The admin listener (SPEC section 8): conn lookup and delete, the admin token (liveness and
//! readiness and the data plane stay open), and `/metrics` in Prometheus text or OpenMetrics as
//! asked; plus the data plane's JSON 404 when no route matches.

use std::time::Duration;

use integration_tests::check::HDR;
use integration_tests::{get, request, Config, Gateway, Health, Mock, Route};

/// No matching route is a JSON 404 (its body counted in the access log); `/admin/conns/<id>` shows
/// a binding with its sliding TTL and DELETE removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_json_and_admin_conns_lifecycle() {
    let a = Mock::start("node-a").await;
    let api = Route::prefix("api", "/api", "c");
    let gw = Gateway::start(&Config::single(Health::http_fast(), &[&a], api).toml()).await;

    let r = get(&gw.url("/other"), &[]).await.expect("get");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        serde_json::json!({"code": -1, "message": "no route matches GET /other"})
    );
    // The access log counts the gateway's own answer's body.
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/other",
                "status=404",
                &format!("bytes_out={}", r.body.len()),
            ],
            Duration::from_secs(2),
        )
        .await;

    let r = get(&gw.admin("/admin/conns/nope"), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], -1);

    let r = get(&gw.url("/api/x"), &[(HDR, "adm-1")])
        .await
        .expect("get");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
    let conn = gw.admin_json("/admin/conns/adm-1").await;
    assert_eq!(
        (conn["conn_id"].as_str(), conn["node"].as_str()),
        (Some("adm-1"), Some("node-a"))
    );
    let ttl = conn["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(
        ttl > 3_500_000 && ttl <= 3_600_000,
        "sliding TTL of 1h, got {ttl} ms"
    );

    let r = request("DELETE", &gw.admin("/admin/conns/adm-1"), &[], Vec::new())
        .await
        .expect("delete");
    assert_eq!((r.status, r.body.len()), (204, 0));
    let r = get(&gw.admin("/admin/conns/adm-1"), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404);
    let r = request("DELETE", &gw.admin("/admin/conns/adm-1"), &[], Vec::new())
        .await
        .expect("delete");
    assert_eq!(r.status, 404);
}

/// With `admin_token` set, admin paths need the bearer token; `/healthz`, `/readyz` and the data
/// plane do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_is_required_when_set() {
    let a = Mock::start("node-a").await;
    let config = Config::single(Health::http_fast(), &[&a], Route::api());
    let gw = Gateway::start(&config.table("server", "admin_token = \"s3cret\"").toml()).await;
    for path in ["/admin/nodes", "/admin/routes", "/metrics"] {
        let r = get(&gw.admin(path), &[]).await.expect("admin");
        assert_eq!(r.status, 401, "{path} without a token");
        assert_eq!(r.json()["code"], -1);
        let r = get(&gw.admin(path), &[("authorization", "Bearer wrong")])
            .await
            .expect("admin");
        assert_eq!(r.status, 401, "{path} with a wrong token");
        let r = get(&gw.admin(path), &[("authorization", "Bearer s3cret")])
            .await
            .expect("admin");
        assert_eq!(r.status, 200, "{path} with the token");
    }
    let r = get(
        &gw.admin("/admin/nodes"),
        &[("authorization", "Bearer s3cret")],
    )
    .await
    .expect("admin");
    assert_eq!(r.json()[0]["id"], "node-a");
    // Liveness and readiness stay open for orchestrator probes.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            get(&gw.admin(path), &[]).await.expect("admin").status,
            200,
            "{path}"
        );
    }
    // The data plane never asks for the admin token.
    assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
}

/// Asserts `promtool check metrics` (Debian package prometheus) accepts Prometheus text `text`
/// with no lint problem.
fn promtool_accepts(text: &str) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) is installed");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool ran");
    let said = integration_tests::check::output_text(&out);
    assert!(
        out.status.success(),
        "promtool check metrics failed: {said}"
    );
    assert_eq!(said.trim(), "", "promtool lint problems: {said}");
}

/// `/metrics` answers the Prometheus 0.0.4 text format (which `promtool check
/// metrics` accepts, with no lint problem) unless OpenMetrics is asked for; then OpenMetrics with
/// its own content type and `# EOF`. Checked after traffic and a hop, so labelled series exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_types_match_bodies() {
    let (_a, _b, gw) = Gateway::two_nodes(Health::http_fast()).await;
    let r = get(&gw.url("/data"), &[("X-Conn-Id", "m-1")])
        .await
        .expect("bind");
    assert_eq!(r.status, 200);
    let bound = gw.admin_json("/admin/conns/m-1").await["node"]
        .as_str()
        .expect("bound")
        .to_string();
    let drain = gw
        .admin_post(&format!("/admin/nodes/{bound}/drain?period=30s"))
        .await;
    assert_eq!(drain.status, 202);
    let r = get(&gw.url("/data"), &[("X-Conn-Id", "m-1")])
        .await
        .expect("hop");
    assert_eq!(r.status, 200);
    let _ = get(&gw.url("/nothing-here"), &[]).await.expect("404");
    for accept in [None, Some("*/*")] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let r = get(&gw.admin("/metrics"), &headers).await.expect("metrics");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = r.text();
        assert!(
            !text.contains("# EOF"),
            "no OpenMetrics terminator in 0.0.4 text"
        );
        assert!(
            text.contains("# TYPE hopping_count_total counter"),
            "{text}"
        );
        assert!(
            text.contains("hopping_count_total{reason=\"draining\"} 1"),
            "{text}"
        );
        promtool_accepts(&text);
    }
    let r = get(
        &gw.admin("/metrics"),
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )],
    )
    .await
    .expect("metrics");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = r.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE hopping_count counter"), "{text}");
}
