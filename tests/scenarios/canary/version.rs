//! Version routing (SPEC section 3 `[routes.canary]`): version header and query, weights without a
//! version, unknown versions (fallback or reject), and re-binding on version.

use super::*;

/// `gateway_canary_fallback_total` of cluster `svc`: requests whose version had no node.
async fn fallbacks(gw: &Gateway) -> f64 {
    gw.metric(r#"gateway_canary_fallback_total{cluster="svc"}"#)
        .await
}

/// A version header or query parameter sends requests to v2 nodes only.
#[tokio::test]
async fn version_header_and_query_reach_only_v2_nodes() {
    let (_mocks, gw) = canary_setup().await;
    for (path, headers) in [
        ("/data", &[("x-version", "v2")][..]),
        ("/data?version=v2", &[][..]),
    ] {
        let ids = fan_out(&gw, path, headers, 1_000).await;
        assert_eq!(ids.len(), 1_000);
        let c = count(&ids);
        assert!(ids.iter().all(|id| version_of(id) == "v2"), "{path}: {c:?}");
        assert_eq!(c.len(), 2, "both v2 nodes share the traffic: {c:?}");
        assert!(c.values().all(|n| (400..=600).contains(n)), "{path}: {c:?}");
    }
    assert_eq!(fallbacks(&gw).await, 0.0);
}

/// Requests without a version are spread by node weight.
#[tokio::test]
async fn unversioned_requests_follow_weights() {
    let (_mocks, gw) = canary_setup().await;
    let ids = fan_out(&gw, "/data", &[], 1_200).await;
    let c = count(&ids);
    let v2 = ids.iter().filter(|id| version_of(id) == "v2").count() as f64 / ids.len() as f64;
    eprintln!("unversioned: v2 share {v2:.3} ({c:?})");
    // Weights 100 + 100 (v1) vs 50 + 50 (v2): v2 takes 1/3.
    assert!((v2 - 1.0 / 3.0).abs() <= 0.05, "v2 share {v2:.3} ({c:?})");
    assert_eq!(c.len(), 4, "every node serves: {c:?}");
}

/// An unknown version falls back to the default nodes with a WARN line and a counter increment.
#[tokio::test]
async fn unknown_version_falls_back_with_warn_and_counter() {
    let (_mocks, gw) = canary_setup().await;
    let ids = fan_out(&gw, "/data", &[("x-version", "v3")], 40).await;
    let c = count(&ids);
    assert_eq!(c.len(), 4, "served by all candidates: {c:?}");
    let keys = ["requested_version", "candidates", "matched", "cluster"];
    let line = gw.logs.wait_for(&keys, Duration::from_secs(2)).await;
    for part in [
        "WARN",
        "cluster=svc",
        "requested_version=\"v3\"",
        "candidates=4",
        "matched=0",
    ] {
        assert!(
            line.contains(part) || line.contains(&part.replace('"', "")),
            "{part} missing in {line}"
        );
    }
    integration_tests::wait_until(
        Duration::from_secs(2),
        "one WARN per occurrence (40)",
        || async { gw.logs.matching(&["requested_version"]).len() >= 40 },
    )
    .await;
    assert_eq!(
        gw.logs.matching(&["requested_version"]).len(),
        40,
        "one WARN per occurrence"
    );
    assert_eq!(fallbacks(&gw).await, 40.0);
}

/// An unknown version is rejected when the route says so.
#[tokio::test]
async fn unknown_version_is_rejected_when_configured() {
    let (_mocks, gw) = canary_setup().await;
    let r = get(&gw.url("/strict/data"), &[("x-version", "v3")])
        .await
        .expect("request");
    assert_eq!(r.status, 503, "{}", r.text());
    let body = r.json();
    assert_eq!(body["code"], -1, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains("v3")),
        "{body}"
    );
    // A version that exists is served on the same route; none at all is balanced.
    let ok = get(&gw.url("/strict/data"), &[("x-version", "v2")])
        .await
        .expect("request");
    assert_eq!(ok.status, 200);
    assert_eq!(version_of(&ok.header("x-node-id").expect("node")), "v2");
    let plain = get(&gw.url("/strict/data"), &[]).await.expect("request");
    assert_eq!(plain.status, 200);
    assert_eq!(fallbacks(&gw).await, 0.0, "a reject is not a fallback");
}

/// An id bound on one version is re-bound when its requests ask for another version.
#[tokio::test]
async fn bound_id_rebinds_on_version() {
    let (_mocks, gw) = canary_setup().await;
    let hops = || gw.metric(r#"hopping_count_total{reason="version"}"#);
    let send = |version: Option<&'static str>| {
        let url = gw.url("/data");
        async move {
            let mut h = vec![("x-conn-id", "c-canary-1")];
            if let Some(v) = version {
                h.push(("x-version", v));
            }
            let r = get(&url, &h).await.expect("request");
            assert_eq!(r.status, 200);
            r.header("x-node-id").expect("node")
        }
    };
    let v1_node = send(Some("v1")).await;
    assert_eq!(version_of(&v1_node), "v1");
    for _ in 0..5 {
        assert_eq!(send(None).await, v1_node, "binding holds without a version");
    }
    assert_eq!(hops().await, 0.0);

    let v2_node = send(Some("v2")).await;
    assert_eq!(version_of(&v2_node), "v2");
    assert_eq!(hops().await, 1.0, "re-bound with hop reason version");
    gw.logs
        .wait_for(
            &["Hopping triggered for conn c-canary-1", "version"],
            Duration::from_secs(2),
        )
        .await;
    for v in [Some("v2"), None, Some("v2"), Some("v3")] {
        assert_eq!(send(v).await, v2_node, "stays on its v2 node ({v:?})");
    }
    assert_eq!(
        hops().await,
        1.0,
        "no further hops, not even for a version no node has"
    );
    let conn = gw.admin_json("/admin/conns/c-canary-1").await;
    assert_eq!(conn["node"], v2_node.as_str());
}
